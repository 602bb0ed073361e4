"""`hermes chronos-git setup`: install chronos-git's dependencies into the Python that runs Hermes.

`hermes plugins install` only clones the plugin; pygit2 is then missing from
Hermes' interpreter and protection is OFF.  This installs the pinned packages
with `<sys.executable> -m pip install …`, only those that are missing or
broken (so Hermes' own pydantic is left alone when it already works).

Stdlib only: it runs precisely when the dependencies are missing.  The checks
(before and after) run in a subprocess of the target interpreter, so they see
what a restarted Hermes will see.  Never a traceback: every failure is one
clear message and exit code 1.  With --json, stdout holds exactly one JSON
document and everything for humans goes to stderr.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

# Import name -> pip pin.  Must match requirements-dev.txt (tests/test_install_path.py checks it).
PINS = {"pygit2": "pygit2==1.21.0", "pydantic": "pydantic==2.13.4"}

EXIT_OK, EXIT_FAILED, EXIT_NOT_CONFIRMED = 0, 1, 2
_SHELL = Path(__file__).resolve().parent.parent / "hermes" / "shell.py"   # stdlib only: runs anywhere
_PROBE = r"""
import importlib.metadata as md, json, runpy, sys
problems = runpy.run_path(sys.argv[1])["dependency_problems"]()
def version(name):
    try:
        return md.version(name)
    except Exception:
        return None
print(json.dumps({"problems": problems, "versions": {n: version(n) for n in sys.argv[2:]}}))
"""


class SetupError(Exception):
    pass


def configure_setup_parser(parser) -> None:
    """Options of `setup`; dest names are prefixed because Hermes shares the namespace."""
    parser.add_argument("--yes", "-y", dest="chronos_yes", action="store_true",
                        help="install without asking")
    parser.add_argument("--json", dest="chronos_json", action="store_true",
                        help="print exactly one JSON document on stdout")


def probe(python: str) -> dict:
    """{"problems": {name: what}, "versions": {name: version|None}} as seen by `python`."""
    try:
        r = subprocess.run([python, "-c", _PROBE, str(_SHELL), *PINS], capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    except Exception as exc:
        raise SetupError(f"could not run {python}: {type(exc).__name__}: {exc}") from None
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        detail = (r.stderr or r.stdout).strip()[-500:] or f"exit code {r.returncode}"
        raise SetupError(f"could not check the dependencies with {python}: {detail}") from None


def pip_available(python: str) -> bool:
    try:
        return subprocess.run([python, "-m", "pip", "--version"], capture_output=True, timeout=60,
                              stdin=subprocess.DEVNULL).returncode == 0
    except Exception:
        return False


def _confirm(err) -> bool | None:
    """y/N on a terminal; None when there is no terminal to ask on."""
    if not (sys.stdin and sys.stdin.isatty()):
        return None
    err.write("Install now? [y/N] ")
    err.flush()
    try:
        return input().strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        return False


def run_setup(yes: bool, as_json: bool, out, err, *, python: str | None = None) -> int:
    """Say what will happen, ask (or need --yes), pip install, verify in a subprocess, report."""
    python = python or sys.executable
    say = err if as_json else out
    doc: dict = {"status": "error", "python": python, "packages": [], "command": [], "installed": False}

    def finish(rc: int, message: str, **extra) -> int:
        doc.update(extra, status="ok" if rc == EXIT_OK else "error")
        doc["message" if rc == EXIT_OK else "error"] = message
        (say if rc == EXIT_OK else err).write(message + "\n")
        if as_json:
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
        out.flush()
        err.flush()
        return rc

    try:
        before = probe(python)
        missing = before["problems"]
        if not missing:
            return finish(EXIT_OK, f"chronos-git's dependencies already import in {python}: nothing to do.",
                          versions=before["versions"])
        doc["packages"] = [PINS[n] for n in missing if n in PINS]
        doc["command"] = [python, "-m", "pip", "install", *doc["packages"]]
        doc["problems"] = missing
        say.write("chronos-git needs " + "; ".join(f"{n} ({p})" for n, p in missing.items()) + ".\n"
                  f"  Python that runs Hermes: {python}\n"
                  f"  Packages to install:     {' '.join(doc['packages'])}\n"
                  f"  Command:                 {shlex.join(doc['command'])}\n")
        say.flush()
        if not yes:
            answer = _confirm(err)
            if answer is None:
                return finish(EXIT_NOT_CONFIRMED, "Nothing installed: no terminal to confirm on. "
                              "Run `hermes chronos-git setup --yes` to install.")
            if not answer:
                return finish(EXIT_NOT_CONFIRMED, "Nothing installed.")
        if not pip_available(python):
            return finish(EXIT_FAILED, f"pip is not available in {python}, so nothing was installed. "
                          f"Add pip with `{shlex.quote(python)} -m ensurepip --upgrade` and run setup again, "
                          f"or install the packages with another tool, e.g. "
                          f"`uv pip install --python {shlex.quote(python)} {' '.join(doc['packages'])}`.")
        rc, tail = _pip(doc["command"], say)
        if rc != 0:
            return finish(EXIT_FAILED, f"pip install failed (exit code {rc}); nothing changed in chronos-git. "
                          "Check the network and pip's messages above, or run the command yourself: "
                          f"{shlex.join(doc['command'])}", pip_output=tail)
        doc["installed"] = True
        after = probe(python)
        if after["problems"]:
            return finish(EXIT_FAILED, "pip finished, but the dependencies still do not import: " + "; ".join(
                f"{n} {p}" for n, p in after["problems"].items()), versions=after["versions"])
        got = ", ".join(f"{n} {v}" for n, v in after["versions"].items() if v)
        return finish(EXIT_OK, f"✓ Installed and verified in {python} ({got}).\n"
                      "Restart Hermes to turn protection on (quit running `hermes chat` sessions; "
                      "`hermes gateway restart` for the gateway), then check with `hermes chronos-git health`.",
                      versions=after["versions"])
    except Exception as exc:
        return finish(EXIT_FAILED, f"setup failed: {exc if isinstance(exc, SetupError) else repr(exc)}")


def _pip(command: list[str], stream) -> tuple[int, list[str]]:
    """Run pip, streaming its output to `stream`; (exit code, its last lines)."""
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
    except OSError as exc:
        return 1, [f"{type(exc).__name__}: {exc}"]
    tail: list[str] = []
    for line in proc.stdout:
        stream.write(line)
        stream.flush()
        tail = (tail + [line.rstrip("\n")])[-20:]
    return proc.wait(), tail
