"""Pure wire-protocol modules: build a request, parse its stream. No sockets, no Locust."""
