#!/usr/bin/env bash
# Create (or refresh) the project environment: .venv with chronos-git (editable),
# hermes-agent 0.19.0 and the test tools; Debian chromium for the browser tests.
# Idempotent: a stamp skips the pip step when nothing changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CHRONOS_VENV:-$ROOT/.venv}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for c in python3.11 python3; do command -v "$c" >/dev/null 2>&1 && { PY="$c"; break; }; done
fi
[ -x "$VENV/bin/python" ] || { echo "setup: creating $VENV"; "$PY" -m venv "$VENV"; }
STAMP="$VENV/.chronos-setup-stamp"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/requirements-dev.txt" | sha256sum | cut -c1-16)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "setup: installing python packages (first run takes a minute or two)"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/requirements-dev.txt" 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps -e "$ROOT" 2>&1 | grep -v '^WARNING: Location' || true
  "$VENV/bin/python" -c "import chronos_git, pygit2, hermes_cli, fastapi, playwright" 
  echo "$WANT" > "$STAMP"
fi
if [ "${CHRONOS_SKIP_BROWSER:-0}" != 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian chromium for the browser tests"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: chromium not found and cannot apt-get it here; browser tests will be skipped" >&2
  fi
fi
if [ "${CHRONOS_SKIP_SSHD:-0}" != 1 ] && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian openssh-server for the SSH remote tests"
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null 2>&1 || { apt-get update -qq >/dev/null && \
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; }; } || \
      echo "setup: openssh-server could not be installed; the SSH remote test will be skipped" >&2
  else
    echo "setup: sshd not found and cannot apt-get it here; the SSH remote test will be skipped" >&2
  fi
fi
