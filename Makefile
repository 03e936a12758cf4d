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

.PHONY: install demo test test-fast lint bench sim clean

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

# The whole suite (CI runs exactly this). pytest's "no tests collected" (exit 5) is a failure.
test: install
	@$(BIN)/python -m pytest -q -rs tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

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
	rm -rf $(VENV) llm-report .pytest_cache
