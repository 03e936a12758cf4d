"""Load-test a rerank endpoint: vLLM's /v1/rerank (``--llm-endpoint rerank_root``: /rerank).

    locust -f locustfiles/rerank.py --headless -u 8 -t 60s --llm-batch-size 16       # embedded simulator
    locust -f locustfiles/rerank.py --host http://gpu-box:8000 --headless -u 8 -t 60s --llm-batch-size 16

Each request ranks --llm-batch-size documents from the workload against the User's
``rerank_query``. TEI's /rerank: tei.py with --llm-endpoint rerank.
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import VLLMRerankUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class VLLMRerank(VLLMRerankUser):
    pass
