"""Load-test an Ollama server (/api/chat NDJSON; --llm-endpoint generate or openai for the others).

    locust -f locustfiles/ollama.py --headless -u 8 -t 300s                     # embedded simulator
    locust -f locustfiles/ollama.py --host http://127.0.0.1:11434 --llm-model llama3.2 --headless -u 8 -t 300s
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import OllamaUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class Ollama(OllamaUser):
    pass
