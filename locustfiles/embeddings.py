"""Load-test an embeddings endpoint: vLLM's (or any OpenAI-compatible server's) /v1/embeddings.

    locust -f locustfiles/embeddings.py --headless -u 16 -t 60s --llm-batch-size 8   # embedded simulator
    locust -f locustfiles/embeddings.py --host http://gpu-box:8000 --headless -u 16 -t 60s \\
        --llm-batch-size 8 --llm-input-tokens 256

Each request carries --llm-batch-size inputs from the workload (synthetic exact lengths or a
dataset); the answer is one JSON body: latency is E2E (and TTFB), throughput requests/s,
inputs/s and input tokens/s (docs/metrics.md). Other dialects: ollama.py or gemini.py with
--llm-endpoint embed, openai.py with --llm-endpoint embeddings, tei.py; rerank: rerank.py.
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import VLLMEmbedUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class VLLMEmbed(VLLMEmbedUser):
    pass
