#!/usr/bin/env bash
# sh_test entry: runs a Python file of tools/rbe on the rbe venv's Python 3.13 (BuildGrid 0.9.1),
# which tools/bazel builds from tools/rbe/requirements.lock (tools/rbe/venv.sh).
set -euo pipefail
python="${GCSCKPT_RBE_VENV:-/opt/gcsckpt/rbe-venv}/bin/python"
if [[ ! -x "$python" ]]; then
  echo "run_with_rbe_venv: $python missing: run through tools/bazel, or tools/rbe/venv.sh" >&2
  exit 1
fi
exec "$python" "$@"
