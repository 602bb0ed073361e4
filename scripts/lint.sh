#!/usr/bin/env bash
# Lint and type-check the packages held to the gate: engine/, journal_refs/, service/.
# The rule sets are written down in pyproject.toml ([tool.ruff], [tool.mypy]); the tools are
# pinned in requirements-dev.txt.  Exits non-zero on any finding.  .ci/run calls it before
# the tests.
#
# mypy and the package layout: the code is the package `chronos_git` (relative imports
# throughout), but its files sit at the repository root, and the editable install maps the
# name with an import hook that mypy cannot follow.  So mypy gets a temporary directory
# holding one symlink, chronos_git -> the repository root, as its MYPYPATH, and checks the
# three packages by module name (`-p chronos_git.engine` ...).  It follows their imports
# into the rest of the package (settings.py, ...); the overrides in pyproject.toml keep
# errors there out of the report until those packages are held to the gate too.  Paths in
# its output are shown relative to the repository root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CHRONOS_VENV:-$ROOT/.venv}"
PACKAGES=(engine journal_refs service commands)

for tool in ruff mypy; do
  if [ ! -x "$VENV/bin/$tool" ]; then
    echo "lint: $VENV/bin/$tool is missing: run scripts/setup-env.sh (requirements-dev.txt pins it)" >&2
    exit 2
  fi
done

status=0

echo "lint: ruff check ${PACKAGES[*]}"
(cd "$ROOT" && "$VENV/bin/ruff" check --no-cache "${PACKAGES[@]}") || status=1

echo "lint: mypy ${PACKAGES[*]}"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/chronos-mypy.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
ln -s "$ROOT" "$TMP/chronos_git"
args=()
for p in "${PACKAGES[@]}"; do args+=(-p "chronos_git.$p"); done
# run from the temporary directory: the root itself must not be on mypy's search path
# (there `engine` would be a top-level package of its own)
set +e
out="$(cd "$TMP" && MYPYPATH="$TMP" "$VENV/bin/mypy" --config-file "$ROOT/pyproject.toml" \
         --cache-dir /dev/null "${args[@]}" 2>&1)"
rc=$?
set -e
printf '%s\n' "$out" | sed 's#^chronos_git/##'
[ "$rc" -eq 0 ] || status=1

if [ "$status" -ne 0 ]; then
  echo "lint: FAILED (fix the findings above; the rule sets are in pyproject.toml)" >&2
else
  echo "lint: clean"
fi
exit "$status"
