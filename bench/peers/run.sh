#!/usr/bin/env bash
# The peer comparison (issue 34 item 4): AIPerf, GuideLLM (and inference-perf where it runs)
# against the same paced server as locust-llm, each pinned to one core, then the table.
#
#   bench/peers/run.sh                                   # 50,200,500 streams, 60 s each, every tool
#   bench/peers/run.sh --streams 50 --duration 10 --tools aiperf,locust-llm   # a short check
#
# The server: llm-sim (one write and one TCP segment per chunk, TCP_NODELAY; TTFT 50 ms,
# ITL 20 ms, 200 tokens, whatever max_tokens the tool sends) pinned to --sim-cpu; each tool
# pinned to --tool-cpu with its whole process tree (taskset is inherited). Tools are installed
# by install.sh into their own venvs under $PEERS_CACHE (default ~/.cache/locust-llm/peers).
# Results: --out (default bench/results/peers/<UTC time>/), table printed and in table.md.
# PYTHON: the project's interpreter (default .venv/bin/python; llm-sim and locust beside it).
# docs/benchmarks.md ("peers") explains the method and each tool's TTFT/ITL definitions.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
BIN="$(dirname "$PY")"
CACHE="${PEERS_CACHE:-$HOME/.cache/locust-llm/peers}"
STREAMS="50,200,500"; DURATION=60; TOOLS="locust-llm,aiperf,guidellm,inference-perf"
SIM_CPU=0; TOOL_CPU=1; TTFT_MS=50; ITL_MS=20; TOKENS=200
OUT="$ROOT/bench/results/peers/$(date -u +%Y%m%dT%H%M%SZ)"
while [ $# -gt 0 ]; do
  case "$1" in
    --streams) STREAMS="$2"; shift 2;;
    --duration) DURATION="$2"; shift 2;;
    --tools) TOOLS="$2"; shift 2;;
    --sim-cpu) SIM_CPU="$2"; shift 2;;
    --tool-cpu) TOOL_CPU="$2"; shift 2;;
    --out) OUT="$2"; shift 2;;
    --no-install) NO_INSTALL=1; shift;;
    -h|--help) sed -n 2,14p "$0"; exit 0;;
    *) echo "locust-llm: bench/peers/run.sh: unknown option $1" >&2; exit 2;;
  esac
done
command -v taskset >/dev/null || { echo "locust-llm: taskset (util-linux) is needed" >&2; exit 2; }
mkdir -p "$OUT"
if [ -z "${NO_INSTALL:-}" ]; then
  PEERS_TOOLS="$(echo "$TOOLS" | sed 's/locust-llm,\?//')" bash "$HERE/install.sh" || echo "peers: some tools did not install; running the others" >&2
fi
TOK="$CACHE/tokenizer"
if [ ! -f "$TOK/tokenizer.json" ] && [ -x "$CACHE/guidellm/bin/python" ]; then
  "$CACHE/guidellm/bin/python" "$HERE/make_tokenizer.py" "$TOK"
fi

# the paced server
SIMLOG="$OUT/sim.log"
taskset -c "$SIM_CPU" "$BIN/llm-sim" --host 127.0.0.1 --port 0 --ttft-ms "$TTFT_MS" --itl-ms "$ITL_MS" \
  --output-tokens "$TOKENS" --ignore-max-tokens "$TOKENS" --tokens-per-chunk 1 --max-batch 4096 --seed 1 \
  --exit-with-parent > "$SIMLOG" 2>&1 &
SIM_PID=$!
trap 'kill $SIM_PID 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "serving on" "$SIMLOG" && break; sleep 0.1; done
URL="$(sed -n 's/.*serving on \([^ ]*\).*/\1/p' "$SIMLOG" | head -1)"
[ -n "$URL" ] || { echo "locust-llm: llm-sim did not start: $(cat "$SIMLOG")" >&2; exit 1; }
echo "peers: server $URL on CPU $SIM_CPU (TTFT $TTFT_MS ms, ITL $ITL_MS ms, $TOKENS tokens); tools on CPU $TOOL_CPU; $OUT"
REQ_S="$(awk -v t="$TTFT_MS" -v i="$ITL_MS" -v n="$TOKENS" 'BEGIN{print (t + (n-1)*i)/1000}')"

run_tool() {  # tool streams
  local tool="$1" n="$2" d="$OUT/$1-$2" offered
  offered="$(awk -v n="$2" -v k="$TOKENS" -v r="$REQ_S" 'BEGIN{print n*k/r}')"
  mkdir -p "$d"
  local pin=(taskset -c "$TOOL_CPU")
  local cmd=()
  case "$tool" in
    locust-llm)
      cmd=("${pin[@]}" "$BIN/locust" -f "$ROOT/locustfiles/vllm.py" --host "$URL" --headless -u "$n" -r "$n"
           -t "${DURATION}s" --llm-max-tokens "$TOKENS" --llm-report "$d/report" --loglevel WARNING);;
    aiperf)
      [ -x "$CACHE/aiperf/bin/aiperf" ] || { echo "peers: aiperf not installed, skipped"; return; }
      cmd=("${pin[@]}" "$CACHE/aiperf/bin/aiperf" profile --model sim-model --url "$URL" --endpoint-type chat
           --streaming --concurrency "$n" --benchmark-duration "$DURATION" --tokenizer "$TOK"
           --synthetic-input-tokens-mean 32 --output-tokens-mean "$TOKENS" --extra-inputs ignore_eos:true --ui-type none
           --artifact-dir "$d/artifacts" --random-seed 1);;
    guidellm)
      [ -x "$CACHE/guidellm/bin/guidellm" ] || { echo "peers: guidellm not installed, skipped"; return; }
      cmd=("${pin[@]}" env HF_HUB_OFFLINE=1 "$CACHE/guidellm/bin/guidellm" run
           --backend "kind=openai_http,target=$URL,model=sim-model,request_format=/v1/chat/completions"
           --profile "kind=concurrent,streams=$n"
           --constraint "kind=max_duration,seconds=$DURATION"
           --data "kind=synthetic_text,prompt_tokens=32,output_tokens=$TOKENS"
           --tokenizer "kind=huggingface_auto,model=$TOK"
           --output "kind=json,path=$d/benchmarks.json" --disable-console-interactive);;
    inference-perf)
      [ -x "$CACHE/inference-perf/bin/inference-perf" ] || { echo "peers: inference-perf not installed, skipped"; return; }
      "$PY" "$HERE/inference_perf_config.py" --url "$URL" --streams "$n" --duration "$DURATION" --tokens "$TOKENS" \
        --tokenizer "$TOK" --out "$d/report" --request-s "$REQ_S" > "$d/config.yml"
      cmd=("${pin[@]}" env HF_HUB_OFFLINE=1 "$CACHE/inference-perf/bin/inference-perf" --config_file "$d/config.yml");;
  esac
  echo "peers: $tool at $n streams (offered $offered chunks/s), ${DURATION}s"
  "$PY" "$HERE/measure.py" --sim "$URL" --tool "$tool" --streams "$n" --offered "$offered" --duration "$DURATION" --request-s "$REQ_S" \
    --timeout "$(( DURATION * 3 + 120 ))" --out "$d/measure.json" -- "${cmd[@]}" \
    || echo "peers: $tool at $n streams exited with an error (see $d/measure.log)"
}

IFS=, read -ra NS <<< "$STREAMS"
IFS=, read -ra TS <<< "$TOOLS"
for n in "${NS[@]}"; do
  for t in "${TS[@]}"; do run_tool "$t" "$n"; done
done
"$PY" "$HERE/table.py" "$OUT" --ttft-ms "$TTFT_MS" | tee "$OUT/table.md"
