"""Load-test a vLLM server (OpenAI-compatible API, vLLM dialect: max_tokens + ignore_eos).

    locust -f locustfiles/vllm.py --headless -u 64 -t 300s                  # embedded simulator
    locust -f locustfiles/vllm.py --host http://gpu-box:8000 --headless -u 64 -t 300s

The model is asked of the server (GET /v1/models) unless --llm-model is given.
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import VLLMUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class VLLM(VLLMUser):
    pass
