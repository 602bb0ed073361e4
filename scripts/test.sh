#!/usr/bin/env bash
# The test command: sets up the environment, then runs every test
# (unit, CLI, crash/fault, real Hermes end-to-end, HTTP, browser).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k journal`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup-env.sh"
cd "$ROOT"
exec "${CHRONOS_VENV:-$ROOT/.venv}/bin/python" -m pytest "$@"
