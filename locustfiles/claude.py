"""Load-test the Anthropic Messages API (key from ANTHROPIC_API_KEY, never printed).

    ANTHROPIC_API_KEY=... locust -f locustfiles/claude.py --host https://api.anthropic.com --headless -u 4 -t 60s

With no --host it runs against the embedded simulator (a key is still required, any value).
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import ClaudeUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class Claude(ClaudeUser):
    pass
