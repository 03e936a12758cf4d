"""locust-llm: Locust users that load-test LLM inference servers over streaming protocols.

Import the user classes from :mod:`llm_users.users` and call :func:`llm_users.plugin.register`
in your locustfile, and ``exporters.register`` for the Prometheus endpoint (the shipped ones in
``locustfiles/`` do all three).
"""

__version__ = "0.1.0"
