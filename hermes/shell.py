"""The "protection is OFF" shell: what chronos-git registers when it cannot protect.

`hermes plugins install` only clones the plugin; the Python that runs Hermes
usually has no pygit2.  The plugin then used to fail in register(), listed as
enabled, with a line in errors.log as the only trace, while the user believed
they were protected.  Instead, `register()` falls back to this shell, which says so
everywhere the user or the model looks: `/chronos`, the `chronos_status` tool,
`hermes chronos-git health|setup|…`, and a notice on the first turn of every
session (stderr for the user, `pre_llm_call` context for the model).

Stdlib only (pydantic may be missing too) and cheap: no subprocess, no network.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import re
import sys
import threading

log = logging.getLogger("chronos_git")

HERMES_PROG = "hermes chronos-git"                  # the operator CLI as typed inside Hermes
SETUP_COMMAND = f"{HERMES_PROG} setup"              # fixes missing/broken dependencies
UPDATE_PLUGIN = "hermes plugins update chronos-git"  # fixes a plugin checkout that fails to load
UPDATE_HERMES = "hermes update"                      # fixes a host without the needed APIs
# Import name -> lowest version the full plugin works with (pyproject.toml dependencies).
DEPENDENCIES = {"pygit2": (1, 15), "pydantic": (2,)}


def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"\d+(\.\d+)*", text)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def dependency_problems() -> dict[str, str]:
    """Import name -> what is wrong with it, for each dependency that cannot be used.

    find_spec first (cheap), then a real import: a broken wheel is found but fails to import.
    """
    problems: dict[str, str] = {}
    for name, minimum in DEPENDENCIES.items():
        try:
            if importlib.util.find_spec(name) is None:
                problems[name] = "not installed"
                continue
            importlib.import_module(name)
        except Exception as exc:
            problems[name] = f"installed but fails to import ({type(exc).__name__}: {exc})"
            continue
        try:
            have = importlib.metadata.version(name)
        except Exception:
            continue  # importable without metadata (vendored, odd install): accept it
        if () < _version_tuple(have) < minimum:  # an unparsable version is given the benefit of the doubt
            need = ".".join(map(str, minimum))
            problems[name] = f"version {have} is too old (chronos-git needs >= {need})"
    return problems


def protection_problem() -> str | None:
    """Why the dependencies cannot run in this interpreter, as one sentence; None when they can."""
    problems = dependency_problems()
    if not problems:
        return None
    where = f"in the Python that runs Hermes ({sys.executable})"
    if set(problems.values()) == {"not installed"}:
        names = " and ".join(problems)
        verb = "is" if len(problems) == 1 else "are"
        return f"{names} {verb} not installed {where}"
    return "; ".join(f"{n} {p}" for n, p in problems.items()) + f" {where}"


def host_problem(ctx) -> str | None:
    """Why this Hermes cannot host the full plugin (feature detection); None when it can."""
    missing = [a for a in ("register_middleware", "register_hook") if not callable(getattr(ctx, a, None))]
    if not missing:
        return None
    return (f"this Hermes has no {' or '.join('ctx.' + m for m in missing)} "
            "(chronos-git needs hermes-agent 0.19 or newer)")


def notice(reason: str, fix: str = SETUP_COMMAND) -> str:
    """The one text shown everywhere: OFF, why, and the one command that fixes it."""
    return (f"⚠ chronos-git protection is OFF: {reason}. Tool calls are NOT checkpointed or journaled "
            f"and cannot be rolled back. Fix: run `{fix}`, then restart Hermes.")


def off_status(reason: str, fix: str = SETUP_COMMAND) -> dict:
    return {"status": "error", "protection": {"state": "off", "reason": reason, "fix": fix},
            "error": notice(reason, fix)}


class Shell:
    """The registered callbacks; one per process, state in memory only."""

    def __init__(self, reason: str, fix: str = SETUP_COMMAND, stream=None):
        self.reason = reason
        self.fix = fix
        self.notice = notice(reason, self.fix)
        self._stream = stream            # None: sys.stderr at call time (tests swap it)
        self._told: set[str] = set()
        self._lock = threading.Lock()

    # /chronos ANYTHING
    def slash(self, raw_args: str = "", *args, **kwargs) -> str:
        return self.notice

    # chronos_status tool
    def status_tool(self, args=None, **kwargs) -> str:
        return json.dumps(off_status(self.reason, self.fix), ensure_ascii=False)

    # pre_llm_call: once per session, tell the model (context) and the user (stderr)
    def pre_llm_call(self, session_id=None, is_first_turn=None, **kwargs):
        key = session_id or ("" if is_first_turn else None)
        with self._lock:
            if key is None or key in self._told:
                return None
            self._told.add(key)
        try:
            stream = self._stream or sys.stderr
            stream.write(f"\n{self.notice}\n\n")
            stream.flush()
        except Exception:
            pass
        return {"context": f"[chronos-git] {self.notice} Tell the user this before you change any files."}

    # hermes chronos-git …
    def setup_cli(self, parser) -> None:
        """Accept any subcommand (unknown ones answer OFF too); dests prefixed: Hermes shares the namespace."""
        parser.add_argument("--json", dest="chronos_json", action="store_true", help="print one JSON document")
        parser.add_argument("chronos_cmd", nargs="?", metavar="COMMAND",
                            help="health [--json] | setup [--yes] [--json]")
        parser.add_argument("chronos_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def handle_cli(self, args) -> int:
        rest = list(getattr(args, "chronos_args", None) or [])
        if getattr(args, "chronos_json", False):
            rest.append("--json")
        rc = self.run_cli(getattr(args, "chronos_cmd", None), rest)
        if rc:
            sys.exit(rc)
        return rc

    def run_cli(self, cmd: str | None, rest: list[str], out=None, err=None) -> int:
        out, err = out or sys.stdout, err or sys.stderr
        if cmd == "setup":
            from ..cli.deps import configure_setup_parser, run_setup
            p = argparse.ArgumentParser(prog=SETUP_COMMAND)
            configure_setup_parser(p)
            try:
                a = p.parse_args(rest)
            except SystemExit as exc:
                return int(exc.code or 0)
            if self.fix != SETUP_COMMAND:    # installing packages cannot fix this reason
                return self._off(a.chronos_json, out, err)
            return run_setup(a.chronos_yes, a.chronos_json, out, err)
        return self._off("--json" in rest, out, err)

    def _off(self, as_json: bool, out, err) -> int:
        """JSON on stdout; the text is an error, so stderr (as the full CLI does)."""
        if as_json:
            doc = off_status(self.reason, self.fix)
            doc.pop("error")
            out.write(json.dumps(doc, ensure_ascii=False) + "\n")
            out.flush()
        else:
            err.write(self.notice + "\n")
            err.flush()
        return 1


def register_shell(ctx, reason: str, fix: str = SETUP_COMMAND) -> Shell:
    """Register whatever this host supports; each registration on its own, none may raise."""
    shell = Shell(reason, fix)
    steps = (
        ("register_command", lambda f: f("chronos", shell.slash, description="chronos-git (protection is OFF)",
                                         args_hint="[anything]")),
        ("register_tool", lambda f: f(name="chronos_status", toolset="chronos", schema={
            "name": "chronos_status",
            "description": "chronos-git protection state. Protection is currently OFF; this says why and "
                           "how the user can fix it.",
            "parameters": {"type": "object", "properties": {}}}, handler=shell.status_tool, emoji="⏱")),
        ("register_cli_command", lambda f: f(name="chronos-git", help="chronos-git (protection is OFF: run setup)",
                                             setup_fn=shell.setup_cli, handler_fn=shell.handle_cli,
                                             description=shell.notice)),
        ("register_hook", lambda f: f("pre_llm_call", shell.pre_llm_call)),
    )
    for attr, call in steps:
        fn = getattr(ctx, attr, None)
        if callable(fn):
            try:
                call(fn)
            except Exception as exc:
                log.warning("chronos-git: %s failed in the OFF shell: %s", attr, exc)
    return shell
