#!/usr/bin/env bash
# Install the peer tools, each in its own venv under the cache dir, at pinned versions.
# Idempotent: a venv whose tool already reports the pinned version is kept.
#   PEERS_CACHE   where the venvs go (default ~/.cache/locust-llm/peers)
#   AIPERF_VERSION, GUIDELLM_VERSION, INFERENCE_PERF_VERSION   the pins
#   PEERS_PYTHON  the Python the venvs are made from (default: python3.11 or python3)
#   PEERS_PYTHON312  a Python 3.12 for inference-perf (default: pyenv's 3.12 if any)
set -euo pipefail
CACHE="${PEERS_CACHE:-$HOME/.cache/locust-llm/peers}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
GUIDELLM_VERSION="${GUIDELLM_VERSION:-0.8.1}"
INFERENCE_PERF_VERSION="${INFERENCE_PERF_VERSION:-0.7.0}"
mkdir -p "$CACHE"

pick_python() {
  for p in "${PEERS_PYTHON:-}" python3.11 python3; do
    [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 && { command -v "$p"; return; }
  done
  echo "locust-llm: no python3 to build the peer venvs from" >&2; exit 2
}
pick_python312() {
  for p in "${PEERS_PYTHON312:-}" python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python" $(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python 2>/dev/null); do
    [ -n "$p" ] && [ -x "$(command -v "$p" 2>/dev/null || echo "$p")" ] && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo "$p"; return; }
  done
}

install_one() {  # name pip-spec python
  local name="$1" spec="$2" py="$3" dir="$CACHE/$1"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$spec" ]; then
    echo "peers: $name already installed ($spec) in $dir"; return 0
  fi
  echo "peers: installing $spec into $dir (python $("$py" -c 'import platform; print(platform.python_version())'))"
  rm -rf "$dir"
  "$py" -m venv "$dir"
  "$dir/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
  if "$dir/bin/pip" install -q "$spec" > "$CACHE/$name-install.log" 2>&1; then
    echo "$spec" > "$dir/.installed"
    echo "peers: $name installed"
  else
    echo "peers: $name FAILED to install (see $CACHE/$name-install.log)" >&2
    tail -5 "$CACHE/$name-install.log" >&2
    return 1
  fi
}

PY="$(pick_python)"
status=0
want="${PEERS_TOOLS:-aiperf,guidellm,inference-perf}"
case ",$want," in *,aiperf,*) install_one aiperf "aiperf==$AIPERF_VERSION" "$PY" || status=1;; esac
case ",$want," in *,guidellm,*) install_one guidellm "guidellm==$GUIDELLM_VERSION" "$PY" || status=1;; esac
case ",$want," in *,inference-perf,*)
  PY312="$(pick_python312 || true)"
  if [ -n "$PY312" ]; then
    install_one inference-perf "inference-perf==$INFERENCE_PERF_VERSION" "$PY312" || status=1
  else
    echo "peers: inference-perf needs Python 3.12 and none was found (set PEERS_PYTHON312): skipped" >&2
  fi;;
esac
exit $status
