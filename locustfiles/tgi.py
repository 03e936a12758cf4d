"""Load-test a Hugging Face TGI server (/generate_stream, greedy decoding, details for token counts).

    locust -f locustfiles/tgi.py --headless -u 64 -t 300s                       # embedded simulator
    locust -f locustfiles/tgi.py --host http://gpu-box:8080 --headless -u 64 -t 300s
    ... --llm-endpoint chat                                                     # TGI's Messages API
"""

from locust import events

import exporters
from llm_users import plugin
from llm_users.users import TGIUser

plugin.register(events)
exporters.register(events)  # the Prometheus /metrics endpoint (docs/prometheus.md)


class TGI(TGIUser):
    pass
