"""The operator CLI: `chronos-git …` standalone and `hermes chronos-git …` in Hermes.

Both build the same parser with `configure(parser)` and run `dispatch(args)`.
The contract: `chronos-git [--store DIR] <command> ... [--workspace DIR] [--json]`
(options are accepted after any subcommand).  Text for people (cli/render.py);
with --json exactly one JSON document on stdout (a protected command's own
output goes to stderr).  Exit codes: 0 ok, 1 error (`{"status":"error",...}`),
3 the recovery gate is closed, 4 a `run` whose outcome could not be recorded.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import stat
import sys
from pathlib import Path

from .. import settings as settings_mod
from ..engine.codec import dumps
from ..service import Chronos
from ..service.errors import EXIT_ERROR, EXIT_NOT_RECORDED, envelope
from ..service.operator_key import at_terminal
from ..service.results import ErrorResult, Result
from . import deps, render

READ_ONLY = {"log", "show", "diff", "health", "report", "git"}     # never create a store (`journal status`
                                                  # opens, and so starts, the journal)


READ_ONLY_SUB = {("journal", "verify"), ("journal", "log"), ("journal", "show"), ("journal", "export"),
                 ("journal", "checkpoint"),
                 ("remote", "list")}


def _reads_only(args) -> bool:
    """Whether the command only reads the journal: then it makes no store where none was (a
    mistyped --store must not be answered with a new, empty and "verified" one)."""
    cmd = args.chronos_cmd
    sub = getattr(args, "journal_cmd", None) or getattr(args, "remote_cmd", None)
    return (cmd, sub) in READ_ONLY_SUB or (cmd == "compact" and bool(getattr(args, "dry_run", False)))


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def _common(p: argparse.ArgumentParser) -> None:
    """The options every command takes, after the command too."""
    p.add_argument("--workspace", "-w", default=argparse.SUPPRESS,
                   help="workspace directory (default: the current directory)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None,
                        help="store directory (default: $CHRONOS_GIT_STORE, store_dir, or "
                             "<HERMES_HOME>/plugin-data/chronos-git)")
    parser.add_argument("--workspace", "-w", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", default=False, help="print one JSON document")
    sub = parser.add_subparsers(dest="chronos_cmd", metavar="COMMAND")

    p = sub.add_parser("snapshot", help="take a checkpoint now")
    p.add_argument("-m", "--message", default="manual checkpoint")
    p.add_argument("--path", action="append", default=None, help="only refresh these paths (declared-path snapshot)")
    _common(p)
    p = sub.add_parser("log", help="list checkpoints, newest first")
    p.add_argument("--limit", "-n", type=_positive, default=20)
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
    _common(p)
    p = sub.add_parser("health", help="store, journal and workspace state")
    _common(p)
    p = sub.add_parser("settings", help="the settings in force; `settings accept` applies the changes held "
                                        "for the operator")
    p.add_argument("settings_cmd", nargs="?", choices=("show", "accept"), default="show", metavar="show|accept")
    p.add_argument("keys", nargs="*", metavar="KEY", help="accept: the held settings you accept (`all`: every one)")
    _common(p)
    p = sub.add_parser("capture", help="`capture accept`: accept a workspace's narrowing of what is captured "
                                       "(ignore rules that now leave out much of it)")
    p.add_argument("capture_cmd", choices=("accept",), metavar="accept")
    _common(p)
    p = sub.add_parser("report", help="write the self-contained HTML forensic report of the store")
    p.add_argument("--out", "-o", default=None,
                   help="file or folder to write (default: the folder chronos-git-reports beside the store, "
                        "outside every workspace; a dated file name)")
    p.add_argument("--limit", type=_positive, default=500, help="newest journal events in the timeline")
    p.add_argument("--checkpoints", type=_positive, default=20, help="newest checkpoints per workspace")
    _common(p)
    from ..windtunnel import runner as windtunnel
    p = sub.add_parser("windtunnel", help="crash / power-cut / I/O / tamper / concurrency / hostile-input "
                                          "suites against throwaway stores", description=windtunnel.DESCRIPTION)
    windtunnel.configure(p)
    p = sub.add_parser("setup", help="install chronos-git's dependencies into the Python that runs this")
    deps.configure_setup_parser(p)
    p.add_argument("--workspace", "-w", default=argparse.SUPPRESS, help=argparse.SUPPRESS)   # the contract; unused
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

    p = sub.add_parser("remote", help="git remotes that hold this host's journal (and, opt-in, checkpoints)")
    _common(p)
    rs = p.add_subparsers(dest="remote_cmd", metavar="SUBCOMMAND")
    q = rs.add_parser("add", help="add a remote: a path, file://, ssh://, git://, https:// or user@host:path")
    q.add_argument("name")
    q.add_argument("url")
    q.add_argument("--snapshots", action="store_true",
                   help="also push checkpoints: file contents leave the machine (default: journal only)")
    _common(q)
    q = rs.add_parser("list", help="remotes with their last push and last error")
    _common(q)
    q = rs.add_parser("remove", help="forget a remote (what it holds stays there)")
    q.add_argument("name")
    _common(q)
    p = sub.add_parser("push", help="push the journal (and checkpoints, for --snapshots remotes) now")
    p.add_argument("name", nargs="?", help="remote (default: the only one)")
    p.add_argument("--allow-excluded", action="store_true",
                   help="also push checkpoints that hold files matching remote_exclude")
    _common(p)
    p = sub.add_parser("fetch", help="fetch every host's journal and checkpoints from a remote")
    p.add_argument("name")
    _common(p)

    p = sub.add_parser(
        "git", help="read the store with stock git: git ARGS... (refused while the store holds anything "
                    "chronos-git never writes)",
        description="Runs `git --git-dir STORE --no-pager --no-replace-objects ARGS...` with no global or "
                    "system config, no GIT_* variables of yours, no pager, hooks, fsmonitor or network, once "
                    "the store's config, refs and hooks hold nothing chronos-git did not write (stock git "
                    "would run a pager or hook planted there, or show a history a replace ref forged). "
                    "The output is git's own and the exit code git's; --json does not apply.")
    p.add_argument("git_argv", nargs=argparse.REMAINDER, metavar="ARGS", help="git's own arguments, e.g. log --oneline "
                   "refs/chronos/journal")

    p = sub.add_parser("operator-key", help="the SSH key operator acts are signed with: `operator-key set PATH` "
                                            "registers it (once, from your own terminal)")
    p.add_argument("key_cmd", nargs="?", choices=("show", "set"), default="show", metavar="show|set")
    p.add_argument("key_file", nargs="?", metavar="PATH", help="set: the private key (its .pub beside it)")
    _common(p)
    j = sub.add_parser("journal", help="the tool-call journal")
    _common(j)
    js = j.add_subparsers(dest="journal_cmd", metavar="SUBCOMMAND")
    q = js.add_parser("status", help="integrity and unresolved operations")
    _common(q)
    q = js.add_parser("verify", help="re-hash and replay the whole chain")
    q.add_argument("--head", "--checkpoint", dest="checkpoint", default=None, metavar="FILE",
                   help="an exported journal head (`journal export`) that must be an ancestor")
    q.add_argument("--remote", default=None, metavar="NAME",
                   help="also check this host's journal on remote NAME: it must be the local head or an ancestor")
    _common(q)
    q = js.add_parser("export", aliases=["checkpoint"],     # `checkpoint`: its older name, still taken
                      help="print the journal head to keep elsewhere (verify against it later)")
    _common(q)
    q = js.add_parser("log", help="events, newest first")
    q.add_argument("--limit", "-n", type=_positive, default=50)
    _common(q)
    q = js.add_parser("show", help="every event of one operation")
    q.add_argument("operation")
    _common(q)
    q = js.add_parser("resolve", help="record the outcome of an unresolved operation")
    q.add_argument("operation")
    q.add_argument("--outcome", required=True, choices=["completed", "not_applied"])
    q.add_argument("--evidence", required=True)
    _common(q)
    q = js.add_parser("countersign", help="own an operator act that carries no valid signature (it was yours)")
    q.add_argument("seq", type=_positive, metavar="SEQ", help="its journal event number (health names it)")
    _common(q)
    q = js.add_parser("recover", help="settle crashed file operations by evidence; replay or roll back")
    q.add_argument("operation", nargs="?")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--replay", action="store_true", help="apply a not-applied file operation exactly once")
    g.add_argument("--rollback", action="store_true",
                   help="put back what the operation changed (up to the checkpoint taken when its crash was "
                        "found; later changes are kept), record rolled_back")
    q.add_argument("--dry-run", action="store_true", help="with --rollback: show the plan, change nothing")
    _common(q)


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ArgumentError(message)


def build_parser(prog: str = render.PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="chronos-git: reversible, journaled tool calls (shadow git store).")
    configure(p)
    return p


def dispatch(args: argparse.Namespace, *, loaded: settings_mod.Loaded | None = None,
             store: str | None = None, out=None, err=None, prog: str = render.PROG) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    as_json = bool(getattr(args, "json", False))
    command = getattr(args, "chronos_cmd", None)
    if command == "setup":
        return deps.run_setup(args.chronos_yes, args.chronos_json or as_json, out, err)
    if command == "windtunnel":           # throwaway stores of its own; the real one only gets its result
        from ..windtunnel.runner import run_from_args
        return run_from_args(args, store=getattr(args, "store", None) or store)
    stores = [s for s in (getattr(args, "store", None) or store,) if s]
    try:
        if not command:
            raise ValueError("no command given: try snapshot, log, diff, restore, run, write, journal status")
        from_env = loaded is None             # the standalone tool: CHRONOS_GIT_SETTINGS rules this process
        loaded = loaded or settings_mod.load()
        if loaded.problems and command != "health":
            raise ValueError("the chronos-git configuration has problems, so nothing was done: "
                             + "; ".join(loaded.problems) + " (fix them; `chronos-git health` shows them too)")
        svc = Chronos.get(args.store or store, loaded.settings, create=command not in READ_ONLY,
                          reads_only=_reads_only(args),
                          problems=loaded.problems)
        stores = [str(svc.store_dir)]
        svc.watch_profile(env_overrides=from_env)     # weakening edits of config.yaml are held
        workspace = _workspace(getattr(args, "workspace", None))
        with at_terminal():                    # an operator key's passphrase is asked here
            rc, result = _run(svc, args, workspace, as_json, err)
    except Exception as exc:               # never a traceback for the operator
        result, rc, _ = envelope(exc, *stores)
    _emit(result, as_json, out, err, command, prog)
    return EXIT_ERROR if rc == 0 and result.status == "error" else rc


def _cwd() -> str:
    return settings_mod.current_folder("cd into the workspace or pass --workspace")


def _workspace(given: str | None) -> str:
    """--workspace made absolute; a relative one needs the current folder, which may be gone."""
    if given is None:
        return _cwd()
    if not given.strip():
        raise ValueError("--workspace is empty: name a folder, or leave it out for the current one")
    if os.path.isabs(given):
        return os.path.normpath(given)
    return os.path.normpath(os.path.join(settings_mod.current_folder(
        f"the workspace path {given!r} is relative: give an absolute path"), given))


def _run(svc: Chronos, args, workspace: str, as_json: bool, err) -> tuple[int, Result]:
    cmd = args.chronos_cmd
    if cmd == "snapshot":
        with render.import_progress(None if as_json else err) as progress:
            res = svc.snapshot(workspace, args.message, paths=args.path, progress=progress)
        if svc.consolidation_due():
            # a first import was written for speed: compress it now (a Hermes host does it in the background)
            with render.import_progress(None if as_json else err, "compressing the first import",
                                        "objects") as progress:
                svc.consolidate(progress=progress)
        return 0, res
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
        with render.steps(None if as_json else err, "compacting the store") as progress:
            return 0, svc.compact(dry_run=args.dry_run, progress=progress)
    if cmd == "health":
        return 0, svc.health(workspace)
    if cmd == "settings":
        if args.settings_cmd == "accept":
            return 0, svc.settings_accept(args.keys, actor="operator-cli")
        if args.keys:
            raise ValueError("`settings` takes keys only with `accept`")
        return 0, svc.settings_show()
    if cmd == "operator-key":
        if args.key_cmd == "set":
            if not args.key_file:
                raise ValueError("`operator-key set` needs the private key's path (make one with `ssh-keygen -t "
                                 "ed25519 -f ~/.ssh/chronos-operator`, with a passphrase)")
            return 0, svc.operator_key_set(args.key_file, actor="operator-cli")
        if args.key_file:
            raise ValueError("`operator-key` takes a path only with `set`")
        return 0, svc.operator_key_show()
    if cmd == "capture":
        return 0, svc.capture_accept(workspace, actor="operator-cli")
    if cmd == "report":
        from ..report import written          # jinja2 only when a report is asked for
        return 0, written(svc, Path(args.out) if args.out else None, limit=args.limit,
                          checkpoints=args.checkpoints,
                          workspace=workspace if getattr(args, "workspace", None) else None)
    if cmd == "run":
        argv = list(args.run_argv)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise ValueError("run needs a command after --, e.g. chronos-git run -- make test")
        res = svc.run_command(workspace, argv, tool=args.tool, stdout=err if as_json else None)
        if res.exit_code is None:
            return 127, res
        if res.recorded is False:
            res.status = "error"
            res.error = (f"the command ran (exit code {res.exit_code}) but its outcome could not be recorded: "
                         f"{res.error}; protected calls stay refused until an operator checks "
                         "`chronos-git journal status`")
            return EXIT_NOT_RECORDED, res
        return res.exit_code, res
    if cmd == "write":
        content = (_source(args.from_file, svc.settings.max_file_size_mb) if args.from_file is not None
                   else os.fsencode(args.content))
        return 0, svc.write_file(workspace, args.path, content)
    if cmd == "remote":
        rc = getattr(args, "remote_cmd", None)
        if rc == "add":
            return 0, svc.remote_add(args.name, args.url, snapshots=args.snapshots)
        if rc == "list":
            return 0, svc.remote_list()
        if rc == "remove":
            return 0, svc.remote_remove(args.name)
        raise ValueError("remote needs a subcommand: add, list, remove")
    if cmd == "push":
        return 0, svc.push(args.name, allow_excluded=args.allow_excluded)
    if cmd == "fetch":
        return 0, svc.fetch(args.name)
    if cmd == "git":
        argv = list(args.git_argv)
        if argv and argv[0] == "--":
            argv = argv[1:]
        if not argv:
            raise ValueError("git needs git's arguments, e.g. chronos-git git log --oneline refs/chronos/journal")
        res = svc.git_passthrough(argv)
        return res.exit_code, res
    if cmd == "journal":
        jc = getattr(args, "journal_cmd", None)
        if jc == "status":
            return 0, svc.journal_status()
        if jc == "verify":
            return 0, svc.journal_verify(_exported_head(args.checkpoint) if args.checkpoint else None,
                                         remote=args.remote)
        if jc in ("export", "checkpoint"):
            return 0, svc.journal_export()
        if jc == "log":
            return 0, svc.journal_log(args.limit)
        if jc == "show":
            return 0, svc.journal_show(args.operation)
        if jc == "resolve":
            return 0, svc.resolve(args.operation, args.outcome, args.evidence, actor="operator-cli")
        if jc == "countersign":
            return 0, svc.journal_countersign(args.seq, actor="operator-cli")
        if jc == "recover":
            return 0, svc.recover(args.operation, replay=args.replay, rollback=args.rollback,
                                  dry_run=args.dry_run, actor="operator-cli")
        raise ValueError("journal needs a subcommand: status, verify, checkpoint, log, show, resolve, recover, "
                         "countersign")
    raise ValueError(f"unknown command {cmd!r}")


def _source(path: str, limit_mb: float) -> bytes:
    """What `write --from` writes, at most max_file_size_mb (a checkpoint would skip a larger
    file; `/dev/zero` had been read until memory ran out)."""
    limit = int(limit_mb * 1024 * 1024) if limit_mb else None
    with open(path, "rb") as fh:
        if stat.S_ISCHR(os.fstat(fh.fileno()).st_mode) or stat.S_ISBLK(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{path} is a device, not a file or a pipe: nothing was written")
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path} holds more than max_file_size_mb ({limit_mb:g} MB), above which checkpoints "
                         "skip a file: nothing was written (raise max_file_size_mb to write it)")
    return data


HEAD_MAX_BYTES = 1 << 20      # an exported journal head is a few hundred bytes


def _read_head_file(path: str) -> bytes:
    """The bytes of `path`, a regular file of at most HEAD_MAX_BYTES: `/dev/zero` had been read
    until memory ran out and a FIFO blocked forever.  Checked before opening (opening a device
    can have effects of its own) and again on the open descriptor (the name may be swapped
    meanwhile); O_NONBLOCK so that even then a FIFO cannot block the open."""
    what = (f"cannot read the journal head {path}: it is not a regular file (a device, a FIFO, a socket or "
            "a folder); give the file `journal export --json` wrote")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ValueError(what)
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ValueError(what)
            data = fh.read(HEAD_MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the journal head {path}: {exc.strerror or exc}") from None
    if len(data) > HEAD_MAX_BYTES:
        raise ValueError(f"cannot read the journal head {path}: it holds more than {HEAD_MAX_BYTES // 1024} KiB, "
                         "so it is not one (`journal export --json` writes a few hundred bytes)")
    return data


def _exported_head(path: str) -> dict:
    data = _read_head_file(path)
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{path} is not a JSON journal head: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("checkpoint"), dict):
        doc = doc["checkpoint"]            # the whole `journal export --json` output
    if not isinstance(doc, dict):
        raise ValueError(f"{path} does not hold a journal head object")
    return doc


def _emit(result: Result, as_json: bool, out, err, command: str | None, prog: str = render.PROG) -> None:
    if command == "git" and result.status == "ok":
        return                             # git's own output was the answer
    if as_json:
        out.write(dumps(result.wire()) + "\n")
        out.flush()
        return
    render.show(result, out, err, command=command, prog=prog)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # settings problems are logged for Hermes' log; here every command reports them itself
    # (an error naming them, or `health`), so Python's last-resort handler must not repeat them
    logging.getLogger("chronos_git").addHandler(logging.NullHandler())
    try:
        args = build_parser().parse_args(argv)
    except _ArgumentError as exc:
        _emit(ErrorResult(error=f"bad arguments: {exc}", code="bad_arguments"), "--json" in argv, sys.stdout, sys.stderr, None)
        return EXIT_ERROR
    try:
        return dispatch(args)
    except KeyboardInterrupt:             # Ctrl-C: one line, no traceback (every write is crash-safe)
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:               # `chronos-git log | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
