"""The request path: the streaming HTTP client, SDK mode, one request's life, connection habits.

``stream`` (raw sockets + httptools) and ``sdk`` (the official SDKs) both drive a
``request_state.RequestState``; ``failures`` maps SDK exceptions onto :mod:`llm_users.errors`;
``backoff`` and ``keepalive`` hold what the client learns about a server as requests go.
"""
