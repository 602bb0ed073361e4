"""The operator CLI: `chronos-git …` standalone and `hermes chronos-git …` in Hermes.

Both build the same parser with `configure(parser)` and run `dispatch(args)`.
With --json, stdout carries exactly one JSON document (a protected command's
own output goes to stderr); every error is `{"status":"error","error":…}`
with exit code 1, a closed recovery gate exits 3.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .calls import Blocked
from .engine.errors import ChronosError
from .journal_refs import JournalError
import pygit2

from . import settings as settings_mod
from . import setup_deps
from .engine import codec
from .engine.errors import explain
from .service import Chronos
from .settings import Settings

EXIT_ERROR = 1
EXIT_BLOCKED = 3


def _common(p: argparse.ArgumentParser, workspace: bool = True) -> None:
    if workspace:
        p.add_argument("--workspace", "-w", default=argparse.SUPPRESS,
                       help="workspace directory (default: current directory)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None,
                        help="store directory (default: $CHRONOS_GIT_STORE or <HERMES_HOME>/plugin-data/chronos-git)")
    parser.add_argument("--workspace", "-w", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", default=False, help="print one JSON document")
    sub = parser.add_subparsers(dest="chronos_cmd", metavar="COMMAND")

    p = sub.add_parser("snapshot", help="take a checkpoint now")
    p.add_argument("-m", "--message", default="manual checkpoint")
    p.add_argument("--path", action="append", default=None, help="only refresh these paths (declared-path snapshot)")
    _common(p)
    p = sub.add_parser("log", help="list checkpoints, newest first")
    p.add_argument("--limit", "-n", type=int, default=20)
    _common(p)
    p = sub.add_parser("show", help="one checkpoint with the changes it recorded")
    p.add_argument("checkpoint")
    _common(p)
    p = sub.add_parser("diff", help="diff FROM (default newest) against TO (default the working tree)")
    p.add_argument("from_", nargs="?", metavar="FROM")
    p.add_argument("to", nargs="?", metavar="TO")
    p.add_argument("--stat", action="store_true", help="file list only, no patch")
    p.add_argument("--path", action="append", default=None)
    _common(p)
    p = sub.add_parser("restore", help="restore a checkpoint (a safety checkpoint is taken first)")
    p.add_argument("checkpoint")
    p.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    p.add_argument("--path", action="append", default=None, help="restore only these paths")
    p.add_argument("--no-clean", action="store_true", help="keep files that are absent from the checkpoint")
    p.add_argument("--force", action="store_true",
                   help="also overwrite or delete files whose current bytes the safety checkpoint could not "
                        "capture (they are lost for good)")
    _common(p)
    p = sub.add_parser("compact", help="apply retention and pack the store")
    p.add_argument("--dry-run", action="store_true")
    _common(p, workspace=False)
    p = sub.add_parser("health", help="store, journal and workspace state")
    _common(p)
    p = sub.add_parser("setup", help="install chronos-git's dependencies into the Python that runs this")
    setup_deps.configure_setup_parser(p)
    p = sub.add_parser("run", help="run a command as a protected call: run [opts] -- CMD ARGS...")
    p.add_argument("--tool", default="terminal", help="tool name recorded in the journal")
    p.add_argument("run_argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")
    _common(p)
    p = sub.add_parser("write", help="a protected write_file")
    p.add_argument("path")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--content")
    g.add_argument("--from", dest="from_file")
    _common(p)

    j = sub.add_parser("journal", help="the tool-call journal")
    js = j.add_subparsers(dest="journal_cmd", metavar="SUBCOMMAND")
    q = js.add_parser("status", help="integrity and unresolved operations")
    _common(q, workspace=False)
    q = js.add_parser("verify", help="re-hash and replay the whole chain")
    q.add_argument("--checkpoint", default=None, help="an exported checkpoint that must be an ancestor")
    _common(q, workspace=False)
    q = js.add_parser("checkpoint", help="print an exportable checkpoint of the head")
    _common(q, workspace=False)
    q = js.add_parser("log", help="events, newest first")
    q.add_argument("--limit", "-n", type=int, default=50)
    _common(q, workspace=False)
    q = js.add_parser("show", help="every event of one operation")
    q.add_argument("operation")
    _common(q, workspace=False)
    q = js.add_parser("resolve", help="record the outcome of an unresolved operation")
    q.add_argument("operation")
    q.add_argument("--outcome", required=True, choices=["completed", "not_applied"])
    q.add_argument("--evidence", required=True)
    _common(q, workspace=False)
    q = js.add_parser("recover", help="settle crashed file operations by evidence; replay or roll back")
    q.add_argument("operation", nargs="?")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--replay", action="store_true", help="apply a not-applied file operation exactly once")
    g.add_argument("--rollback", action="store_true", help="restore the operation's pre-checkpoint, record rolled_back")
    _common(q, workspace=False)


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ArgumentError(message)


def build_parser(prog: str = "chronos-git") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="chronos-git: reversible, journaled tool calls (shadow git store).")
    configure(p)
    return p


def load_settings() -> Settings:
    """Standalone settings (config.yaml of the profile, then $CHRONOS_GIT_SETTINGS)."""
    return settings_mod.load().settings


EXIT_NOT_RECORDED = 4
READ_ONLY = {"log", "show", "diff", "health"}     # never create a store (the journal commands
                                                  # open, and so start, the journal)


def _read_only(args) -> bool:
    return args.chronos_cmd in READ_ONLY


def dispatch(args: argparse.Namespace, *, loaded: settings_mod.Loaded | None = None,
             store: str | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    as_json = bool(getattr(args, "json", False))
    try:
        if not getattr(args, "chronos_cmd", None):
            raise ChronosError("no command given: try snapshot, log, diff, restore, run, write, journal status")
        if args.chronos_cmd == "setup":
            return setup_deps.run_setup(args.chronos_yes, args.chronos_json or as_json, out, err)
        loaded = loaded or settings_mod.load()
        if loaded.problems and args.chronos_cmd != "health":
            raise ChronosError("the chronos-git configuration has problems, so nothing was done: "
                               + "; ".join(loaded.problems)
                               + " (fix them; `chronos-git health` shows them too)")
        svc = Chronos.get(args.store or store, loaded.settings, create=not _read_only(args),
                          problems=loaded.problems)
        workspace = os.path.abspath(getattr(args, "workspace", None) or os.getcwd())
        rc, result = _run(svc, args, workspace, as_json, err)
    except Blocked as exc:
        _emit({**exc.details, "status": "error", "error": "chronos_blocked", "blocked": True}, as_json, out, err)
        return EXIT_BLOCKED
    except (ChronosError, JournalError, _ArgumentError) as exc:
        _emit({"status": "error", "error": str(exc)}, as_json, out, err)
        return EXIT_ERROR
    except (OSError, pygit2.GitError) as exc:
        _emit({"status": "error", "error": explain(exc, *_stores(args, store))}, as_json, out, err)
        return EXIT_ERROR
    except Exception as exc:  # never a traceback for the operator
        _emit({"status": "error", "error": f"{type(exc).__name__}: {exc}"}, as_json, out, err)
        return EXIT_ERROR
    _emit(result, as_json, out, err, command=args.chronos_cmd)
    return EXIT_ERROR if rc == 0 and result.get("status") == "error" else rc


def _stores(args, store) -> list[str]:
    given = getattr(args, "store", None) or store
    return [given] if given else []


def _run(svc: Chronos, args, workspace: str, as_json: bool, err) -> tuple[int, dict]:
    cmd = args.chronos_cmd
    if cmd == "snapshot":
        return 0, svc.snapshot(workspace, args.message, paths=args.path)
    if cmd == "log":
        return 0, svc.log(workspace, args.limit)
    if cmd == "show":
        return 0, svc.show(workspace, args.checkpoint)
    if cmd == "diff":
        return 0, svc.diff(workspace, args.from_, args.to, patch=not args.stat, paths=args.path)
    if cmd == "restore":
        return 0, svc.restore(workspace, args.checkpoint, paths=args.path, clean=not args.no_clean,
                              dry_run=args.dry_run, force=args.force, actor="operator-cli")
    if cmd == "compact":
        return 0, svc.compact(dry_run=args.dry_run)
    if cmd == "health":
        return 0, svc.health(workspace)
    if cmd == "run":
        argv = list(args.run_argv)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise ChronosError("run needs a command after --, e.g. chronos-git run -- make test")
        stdout = err if as_json else None
        rc, info = svc.run_command(workspace, argv, tool=args.tool, stdout=stdout)
        result = {"status": "ok", **info}
        if rc is None:
            return 127, {**result, "status": "error"}
        if not info.get("recorded", True):
            return EXIT_NOT_RECORDED, {**result, "status": "error", "error": (
                f"the command ran (exit code {rc}) but its outcome could not be recorded: "
                f"{info.get('error')}; protected calls stay refused until an operator checks "
                "`chronos-git journal status`")}
        return rc, result
    if cmd == "write":
        if args.from_file is not None:
            content = Path(args.from_file).read_bytes()
        else:
            content = os.fsencode(args.content)
        return 0, {"status": "ok", **svc.write_file(workspace, args.path, content)}
    if cmd == "journal":
        jc = getattr(args, "journal_cmd", None)
        if jc == "status":
            return 0, svc.journal_status()
        if jc == "verify":
            cp = None
            if args.checkpoint:
                try:
                    cp = json.loads(Path(args.checkpoint).read_text())
                except ValueError as exc:
                    raise ChronosError(f"{args.checkpoint} is not a JSON checkpoint: {exc}") from None
                if isinstance(cp, dict) and isinstance(cp.get("checkpoint"), dict):
                    cp = cp["checkpoint"]
                if not isinstance(cp, dict):
                    raise ChronosError(f"{args.checkpoint} does not hold a journal checkpoint object")
            res = svc.journal_verify(cp)
            return (0 if res["status"] == "ok" else EXIT_ERROR), res
        if jc == "checkpoint":
            res = svc.journal_checkpoint()
            return 0, res
        if jc == "log":
            return 0, svc.journal_log(args.limit)
        if jc == "show":
            return 0, svc.journal_show(args.operation)
        if jc == "resolve":
            return 0, svc.resolve(args.operation, args.outcome, args.evidence, actor="operator-cli")
        if jc == "recover":
            return 0, svc.recover(args.operation, replay=args.replay, rollback=args.rollback,
                                  actor="operator-cli")
        raise ChronosError("journal needs a subcommand: status, verify, checkpoint, log, show, resolve, recover")
    raise ChronosError(f"unknown command {cmd!r}")


def _emit(result: dict, as_json: bool, out, err, command: str | None = None) -> None:
    if as_json:
        out.write(codec.dumps(result) + "\n")
        out.flush()
        return
    stream = err if result.get("status") == "error" else out
    stream.write(codec.human(render(result, command)) + "\n")
    stream.flush()


def render(result: dict, command: str | None = None) -> str:
    """Human-readable text for the terminal (and for /chronos)."""
    if result.get("status") == "error":
        return f"error: {result.get('message') or result.get('error')}"
    if "checkpoints" in result and isinstance(result["checkpoints"], list):
        rows = result["checkpoints"]
        if not rows:
            return f"no checkpoints yet for {result.get('workspace')}"
        lines = [f"checkpoints of {result.get('workspace')} (newest first):"]
        for c in rows:
            tool = f" [{c['tool']}]" if c.get("tool") else ""
            skipped = f" ({len(c['skipped'])} skipped)" if c.get("skipped") else ""
            lines.append(f"  {c.get('index', ''):>3}  {c['short_id']}  {c['time_iso']}  {c['kind']:<8}"
                         f" {c['description']}{tool}{skipped}")
        return "\n".join(lines)
    if "files" in result and "from" in result:
        lines = [f"diff {result['from'][:8]} -> {result['to'][:8] if result['to'] != 'working tree' else 'working tree'}: "
                 f"{result['stats']['files']} file(s), +{result['stats']['additions']} -{result['stats']['deletions']}"]
        for f in result["files"]:
            extra = f" (from {f['old_path']})" if f.get("old_path") else ""
            lines.append(f"  {f['status']:<9} {f['path']}{extra}  +{f['additions']} -{f['deletions']}")
        if result.get("patch"):
            lines += ["", result["patch"].rstrip("\n")]
        return "\n".join(lines)
    if "plan" in result and "restored_checkpoint" in result:
        head = ("dry run: restoring" if result.get("dry_run") else "restored") + f" {result['restored_checkpoint'][:8]}"
        lines = [f"{head}: {result['files_changed']} file(s) written, {result['untracked_removed']} removed, "
                 f"{result['skipped']} skipped"]
        if result.get("safety_checkpoint"):
            lines.append(f"safety checkpoint {result['safety_checkpoint'][:8]} (restore it to undo)")
        for item in result["plan"][:200]:
            lines.append(f"  {item['action']:<8} {item['path']}" + (f"  ({item['reason']})" if item.get("reason") else ""))
        return "\n".join(lines)
    if "unresolved" in result and "integrity" in result and "events" in result:
        return status_text(result)
    if "problems" in result and "integrity" in result:
        trees = result.get("checkpoint_trees") or {"problems": []}
        if result["integrity"] != "ok":
            return "journal verification FAILED:\n" + "\n".join(f"  {p}" for p in result["problems"])
        if trees["problems"]:
            return ("journal verified, but checkpoints hold entries git's fsck rejects:\n"
                    + "\n".join(f"  {p}" for p in trees["problems"]))
        return (f"journal verified: {result['events']} events, integrity ok; "
                f"{trees.get('checkpoints', 0)} checkpoint(s) clean ({result['seconds']} s)")
    if command == "journal" and "outcome" in result and "operation_id" in result:
        return (f"operation {result['operation_id'][:12]}: {result['outcome']}"
                + (f" ({result['evidence']})" if result.get("evidence") else "")
                + f"; gate {result.get('gate', '?')}")
    return json.dumps(result, indent=2, ensure_ascii=False, default=str)


def status_text(st: dict) -> str:
    lines = [f"journal: integrity {st['integrity']}, {st['events']} events, gate {st.get('gate', '?')}"]
    prot = st.get("protection") or {}
    if prot.get("state") not in (None, "on", "ready"):
        lines.append(f"  protection {prot['state'].upper()}: {prot.get('reason')}"
                     + (f" (fix: {prot['fix']})" if prot.get("fix") else ""))
    if st.get("healed"):
        lines.append(f"  healed: {st['healed']}")
    for s in st.get("settled_at_start") or []:
        lines.append(f"  settled at start: {s['operation_id'][:12]} {s['tool']}: {s['result']}")
    for op in st["unresolved"]:
        lines.append(f"  UNRESOLVED {op['operation_id'][:12]} {op['tool']} ({op['state']})"
                     + (f": {op['reason']}" if op.get("reason") else ""))
    for op in st.get("running") or []:
        lines.append(f"  running {op['operation_id'][:12]} {op['tool']} (pid {(op.get('owner') or {}).get('pid')})")
    if st.get("replayable"):
        lines.append(f"  replayable (not applied): {', '.join(o[:12] for o in st['replayable'])}")
    if st["unresolved"]:
        lines.append("  resolve with: chronos-git journal resolve OP --outcome completed|not_applied --evidence TEXT\n"
                     "           or: chronos-git journal recover OP --rollback")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except _ArgumentError as exc:
        as_json = "--json" in argv
        _emit({"status": "error", "error": f"bad arguments: {exc}"}, as_json, sys.stdout, sys.stderr)
        return EXIT_ERROR
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
