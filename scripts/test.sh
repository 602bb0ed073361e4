#!/usr/bin/env bash
# The test command: sets up the environment, then runs the tests.
#
#   bash scripts/test.sh            every test (unit, CLI, crash/fault, real Hermes end-to-end,
#                                   HTTP, browser, wind tunnel), in parallel workers
#   bash scripts/test.sh --fast     the fast lane: tests with none of the markers hermes, browser,
#                                   slow, process, fsync (in-process CLI, no fsync)
#
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k journal` or `-n 0` for one
# process.  CHRONOS_TEST_WORKERS sets the number of workers (default: one per core, at least 2;
# the fast lane one more).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAST=0
if [ "${1:-}" = "--fast" ]; then FAST=1; shift; fi
if [ "$FAST" = 1 ]; then
  CHRONOS_SKIP_BROWSER=1 CHRONOS_SKIP_SSHD=1 bash "$ROOT/scripts/setup-env.sh"
else
  bash "$ROOT/scripts/setup-env.sh"
fi
cd "$ROOT"
PY="${CHRONOS_VENV:-$ROOT/.venv}/bin/python"
CORES="$(nproc 2>/dev/null || echo 2)"
WORKERS="${CHRONOS_TEST_WORKERS:-$(( CORES < 2 ? 2 : CORES ))}"
if [ "$FAST" = 1 ]; then
  # in-process tests wait on the disk between bursts of CPU: one worker more than cores
  exec "$PY" -m pytest -n "${CHRONOS_TEST_WORKERS:-$(( WORKERS + 1 ))}" \
    -m "not (hermes or browser or slow or process or fsync)" "$@"
fi
exec "$PY" -m pytest -n "$WORKERS" --dist loadgroup "$@"
