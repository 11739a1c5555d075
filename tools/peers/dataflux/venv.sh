#!/usr/bin/env bash
# The venv of the benchmark's dataflux arm (gcs-torch-dataflux's DCP reader/writer), apart from
# the project's venv: gcs-torch-dataflux 1.4.0 needs google-cloud-storage 2.x, the project pins 3.x.
# Same base interpreter as the project's venv (Debian's 3.11), so the repository's python/ tree and
# its gcsckpt._gcsio extension import in the arm's rank processes (ckptbench.harness.local_ranks
# starts them on this venv's python).
#   tools/peers/dataflux/venv.sh            build it if missing or stale, print its python
#   tools/peers/dataflux/venv.sh --relock   rewrite requirements.lock from requirements.txt
# Environment: GCSCKPT_DATAFLUX_VENV (default /opt/gcsckpt/dataflux-venv), GCSCKPT_PYTHON (base
# interpreter, default /usr/bin/python3), GCSCKPT_WHEELS (local wheel folder, default /opt/wheels
# when present: torch's CPU wheel, as for the project's venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${GCSCKPT_DATAFLUX_VENV:-/opt/gcsckpt/dataflux-venv}"
base_python="${GCSCKPT_PYTHON:-/usr/bin/python3}"
lock="$here/requirements.lock"
# Installed without its dependencies: it requires lightning (a training framework), which only its
# Lightning CheckpointIO classes import, never its DCP reader/writer (see requirements.txt).
no_deps_package="gcs-torch-dataflux==1.4.0"

say() { echo "tools/peers/dataflux/venv.sh: $*" >&2; }

wheels="${GCSCKPT_WHEELS:-/opt/wheels}"
extra=()
[[ -d "$wheels" ]] && extra=(--find-links "$wheels")

if [[ "${1:-}" == "--relock" ]]; then
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  "$base_python" -m venv "$scratch/venv"
  "$scratch/venv/bin/pip" install -q "${extra[@]}" -r "$here/requirements.txt" >&2
  "$scratch/venv/bin/pip" install -q --no-deps "$no_deps_package" >&2
  { echo "# Every transitive pin of tools/peers/dataflux/requirements.txt plus $no_deps_package (pip freeze); venv.sh installs it with --no-deps."
    "$scratch/venv/bin/pip" freeze --all --exclude-editable | grep -v "^pip=="; } >"$lock"
  say "wrote $lock"
  exit 0
fi

want="$(sha256sum "$lock" | cut -d' ' -f1)"
have=""
[[ -f "$venv/.lock.sha256" ]] && have="$(cat "$venv/.lock.sha256")"
if [[ "$want" != "$have" || ! -x "$venv/bin/python" ]]; then
  say "creating $venv from tools/peers/dataflux/requirements.lock"
  if ! mkdir -p "$(dirname "$venv")" 2>/dev/null || ! [[ -w "$(dirname "$venv")" ]]; then
    say "cannot write $(dirname "$venv"); set GCSCKPT_DATAFLUX_VENV to a writable path or run as root."
    exit 1
  fi
  rm -rf "$venv"
  "$base_python" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "${extra[@]}" -r "$lock" >&2
  echo "$want" >"$venv/.lock.sha256"
fi
echo "$venv/bin/python"
