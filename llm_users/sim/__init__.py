"""The embedded LLM inference server simulator (aiohttp): one process that speaks the
OpenAI/vLLM, TGI, Ollama, Anthropic and Gemini streaming protocols byte-faithfully on one port,
with seeded TTFT/ITL distributions, a batch-capacity model, per-request ground truth and fault
injection. Run it with ``llm-sim`` / ``python -m llm_users.sim``, start it as a child process
with :func:`llm_users.sim.launcher.start_simulator`, or embed it with
:func:`llm_users.sim.app.build_app`. See docs/simulator.md.

Importing this package does nothing else: no sockets, no event loop, no global registries.
"""
