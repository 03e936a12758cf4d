"""The LLM tab in Locust's web UI: the page's routes and form (``tab``), the live view it draws
(``live``) and its script (``tab.js``)."""
