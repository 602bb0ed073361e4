"""The `chronos-git` command's entry: a missing or broken dependency (pygit2, pydantic) is
one clear message with the command that fixes it, never an ImportError's traceback.
Stdlib only until the real CLI (cli/main.py) imports."""
from __future__ import annotations

import json
import sys


def main(argv: list[str] | None = None) -> int:
    try:
        from .main import main as real
    except ImportError as exc:
        from .deps import PINS
        msg = (f"chronos-git cannot run: {exc} (a dependency is missing or broken in {sys.executable}); "
               f"install them with `{sys.executable} -m pip install {' '.join(PINS.values())}`, "
               "or inside Hermes run `hermes chronos-git setup`")
        if "--json" in (sys.argv[1:] if argv is None else argv):
            print(json.dumps({"status": "error", "code": "dependencies_missing", "error": msg}))
        else:
            print(f"error: {msg}", file=sys.stderr)
        return 1
    return real(argv)
