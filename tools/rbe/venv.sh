#!/usr/bin/env bash
# The venv of the loopback REAPI service (BuildGrid + the bot), apart from the project's venv:
# BuildGrid 0.9.x needs Python >= 3.13 while the project's venv is Debian's 3.11.
#   tools/rbe/venv.sh            build it if missing or stale, print its python
#   tools/rbe/venv.sh --relock   rewrite tools/rbe/requirements.lock from requirements.txt
# Environment: GCSCKPT_RBE_VENV (default /opt/gcsckpt/rbe-venv), GCSCKPT_RBE_PYTHON (a Python
# >= 3.13; default pyenv's 3.13.0, else python3.13 on PATH).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${GCSCKPT_RBE_VENV:-/opt/gcsckpt/rbe-venv}"
lock="$here/requirements.lock"

say() { echo "tools/rbe/venv.sh: $*" >&2; }

base_python() {
  local candidate root
  if [[ -n "${GCSCKPT_RBE_PYTHON:-}" ]]; then echo "$GCSCKPT_RBE_PYTHON"; return; fi
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  for candidate in "$root/versions/3.13.0/bin/python3.13" "$(command -v python3.13 || true)"; do
    [[ -n "$candidate" && -x "$candidate" ]] && { echo "$candidate"; return; }
  done
  say "no Python 3.13 found (pyenv install 3.13.0, or set GCSCKPT_RBE_PYTHON)"
  exit 1
}

if [[ "${1:-}" == "--relock" ]]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  "$(base_python)" -m venv "$scratch/venv"
  "$scratch/venv/bin/pip" install -q -r "$here/requirements.txt" >&2
  { echo "# Every transitive pin of tools/rbe/requirements.txt (pip freeze); tools/rbe/venv.sh installs it with --no-deps."
    "$scratch/venv/bin/pip" freeze --all --exclude-editable | grep -v "^pip=="; } >"$lock"
  say "wrote $lock"
  exit 0
fi

want="$(sha256sum "$lock" | cut -d' ' -f1)"
have=""
[[ -f "$venv/.lock.sha256" ]] && have="$(cat "$venv/.lock.sha256")"
if [[ "$want" != "$have" || ! -x "$venv/bin/python" ]]; then
  say "creating $venv from tools/rbe/requirements.lock"
  mkdir -p "$(dirname "$venv")"
  rm -rf "$venv"
  "$(base_python)" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$lock" >&2
  echo "$want" >"$venv/.lock.sha256"
fi
echo "$venv/bin/python"
