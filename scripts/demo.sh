#!/usr/bin/env bash
# The demo: sets up the environment, then drives a real Hermes session
# (snapshot, crash, recovery, gate, rollback) in a temporary folder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHRONOS_SKIP_BROWSER=1 CHRONOS_SKIP_SSHD=1 bash "$ROOT/scripts/setup-env.sh"
exec "${CHRONOS_VENV:-$ROOT/.venv}/bin/python" "$ROOT/scripts/demo.py" "$@"
