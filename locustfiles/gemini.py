"""Load-test the Google Gemini API (key from GEMINI_API_KEY or GOOGLE_API_KEY, never printed).

    GEMINI_API_KEY=... locust -f locustfiles/gemini.py --host https://generativelanguage.googleapis.com \\
        --headless -u 4 -t 60s

With no --host it runs against the embedded simulator (a key is still required, any value).
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import GeminiUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class Gemini(GeminiUser):
    pass
