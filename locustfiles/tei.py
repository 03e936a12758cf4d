"""Load-test Hugging Face Text Embeddings Inference: /embed (default) or /rerank.

    locust -f locustfiles/tei.py --headless -u 16 -t 60s --llm-batch-size 8                 # embedded simulator
    locust -f locustfiles/tei.py --host http://gpu-box:8080 --headless -u 16 -t 60s --llm-batch-size 8
    ... --llm-endpoint rerank                                                               # TEI's /rerank

TEI's answers carry no token counts: input tokens come from the workload's target
(synthetic exact lengths, measured with TEI's /tokenize).
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import TEIEmbedUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class TEIEmbed(TEIEmbedUser):
    pass
