"""Load-test the OpenAI API (or any server that speaks its dialect: max_completion_tokens).

    OPENAI_API_KEY=... locust -f locustfiles/openai.py --host https://api.openai.com --headless -u 8 -t 60s

With no --host it runs against the embedded simulator (a key is still required, any value).
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import OpenAIUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class OpenAI(OpenAIUser):
    pass
