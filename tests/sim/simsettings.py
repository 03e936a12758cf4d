"""Settings of the session simulator (tests/sim/conftest.py), shared by the tests."""

SEED = 1234
TTFT_MS = 100.0
ITL_MS = 10.0
OUTPUT_TOKENS = 20
STALL_MS = 200.0

SIM_ARGS = [
    "--seed", str(SEED),
    "--ttft-ms", str(TTFT_MS),
    "--itl-ms", str(ITL_MS),
    "--output-tokens", str(OUTPUT_TOKENS),
    "--stall-ms", str(STALL_MS),
    "--model", "sim-model",
]
