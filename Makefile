# locust-llm developer commands. Everything runs from the project's own .venv.
PY     ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
USERS  ?= 32
RATE   ?= 8
TIME   ?= 30s
# A simulator that behaves like a small GPU server: lognormal TTFT, jittered ITL, a batch knee.
SIM    ?= --ttft-ms 120 --ttft-dist lognormal --ttft-sd-ms 30 --itl-ms 15 --itl-dist normal \
          --itl-sd-ms 2 --output-tokens 256 --max-batch 48

.PHONY: install demo demo-real test test-loaded coverage test-real test-fast lint bench sim real-servers clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# The main job on the embedded simulator: a headless vLLM-dialect run, LLM summary at the end.
# Max tokens = the simulated answer length, so the run asks for exactly what the server gives.
demo: install
	$(BIN)/locust -f locustfiles/vllm.py --headless -u $(USERS) -r $(RATE) -t $(TIME) \
		--stop-timeout 15 --only-summary --llm-report llm-report --llm-sim-args "$(SIM)" \
		--llm-slo ttft=500ms,tpot=25ms --llm-max-tokens 256

# The main job against a real server on this machine, no GPU: llama.cpp's own server (the
# xllamacpp wheel) with Gemma 3 270M, installed pinned on first use (tests/real/servers.py).
# One thread decodes about 25 tokens/s for the whole batch: 4 users, 64 tokens each.
# 16-token answers: the small model decodes about 30 tokens/s for the whole batch on 2 cores, so
# 4 users finish about 60 requests in 30 s (64 tokens gave 4 measured), each within its SLOs.
demo-real: install
	$(BIN)/python tests/real/servers.py run --slots 4 -- $(BIN)/locust -f locustfiles/vllm.py --host {llama} \
		--headless -u 4 -r 4 -t $(TIME) --stop-timeout 30 --only-summary --llm-report llm-report-real \
		--llm-max-tokens 16 --llm-slo ttft=2s,tpot=200ms

# The real servers installed and the model assembled, once (cached in ~/.cache/locust-llm/real).
real-servers: install
	$(BIN)/python tests/real/servers.py install

# The real-server tier alone: llama.cpp's server and the LiteLLM gateway (tests/real).
test-real: real-servers
	@$(BIN)/python -m pytest -q -rs tests/real; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-real: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The whole suite (CI runs exactly this), the real-server tier included: SHARDS pytest processes
# at once, then the timing-bound tests in three quiet lanes (tests/sharding.py; each lane's output in
# .test-shards/). A shard that collects no tests (pytest's exit 5) is a failure.
SHARDS ?= 3
test: real-servers
	@$(BIN)/python -m tests.sharding -j $(SHARDS) tests

# The suite on a loaded machine (issue 55): the shards beside two busy loops, the serial lanes
# beside one, LOADED_RUNS times in a row; stops at the first run that does not pass.
LOADED_RUNS ?= 3
test-loaded: real-servers
	@for i in $$(seq $(LOADED_RUNS)); do echo "make test-loaded: run $$i of $(LOADED_RUNS)"; \
	$(BIN)/python -m tests.sharding -j $(SHARDS) --busy 2 --busy-serial 1 tests || exit 1; done

# The product's line coverage under the whole suite (every process a test starts; pyproject's
# [tool.coverage]), into coverage.json; compare two with python -m tests.coverage_compare.
coverage: real-servers
	@rm -rf .coverage-data; $(BIN)/coverage run -m tests.sharding -j $(SHARDS) tests; rc=$$?; \
	$(BIN)/coverage combine -q && $(BIN)/coverage json -q -o coverage.json && \
	echo "make coverage: $$($(BIN)/coverage report --format=total)% of the product's lines (coverage.json)"; exit $$rc

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow" tests

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check llm_users exporters locustfiles tests bench || true

bench: install
	$(BIN)/python bench/client_overhead.py

sim: install
	$(BIN)/llm-sim --host 127.0.0.1 --port 8000

clean:
	rm -rf $(VENV) llm-report llm-report-real .pytest_cache tests-real-logs
