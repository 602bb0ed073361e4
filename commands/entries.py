"""Every command, once (the types are in commands/table.py).

`run(svc, ctx, p)` calls the service with the arguments `p` (by Arg.name, already parsed and
checked by the surface) and returns a service result; it decides nothing a surface could
decide differently, except what the entry declares per surface.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ..report.build import ReportWritten
from ..service import results as r
from .inputs import content_of, exported_head
from .table import Arg, Command, Context, Http, ModelTool, Table

CHECKPOINT_HELP = "id, 7+ hex prefix, @N (its number), index (1 = newest) or 'latest'"


def _ws(ctx: Context) -> str:
    if ctx.workspace is None:
        raise ValueError("this command needs a workspace")
    return ctx.workspace


# ------------------------------------------------------------------ time machine
def _snapshot(svc, ctx: Context, p: dict):
    tool = {"http": "dashboard", "model": "chronos_snapshot"}.get(ctx.surface)
    kw = {"tool": tool} if tool else {}
    if ctx.session_id:
        kw["session_id"] = ctx.session_id
    if ctx.progress is None:
        return svc.snapshot(_ws(ctx), p["message"], paths=p.get("paths"), **kw)
    with ctx.progress(None) as progress:
        res = svc.snapshot(_ws(ctx), p["message"], paths=p.get("paths"), progress=progress, **kw)
    if svc.consolidation_due():
        # a first import was written for speed: compress it now (a Hermes host does it in the background)
        with ctx.progress(("compressing the first import", "objects")) as progress:
            svc.consolidate(progress=progress)
    return res


def _log(svc, ctx: Context, p: dict):
    graph = bool(p.get("graph"))
    res = svc.log(_ws(ctx), p["limit"], all=bool(p.get("all")) or graph)
    res.graph = graph
    return res


def _show(svc, ctx: Context, p: dict):
    return svc.show(_ws(ctx), p["checkpoint"])


def _diff(svc, ctx: Context, p: dict):
    kw = {} if p.get("max_chars") is None else {"max_chars": p["max_chars"]}
    return svc.diff(_ws(ctx), p.get("from_"), p.get("to"), patch=not p.get("stat"), paths=p.get("paths"), **kw)


def _timeop(ctx: Context, p: dict) -> dict:
    """What every time-machine operation takes from any surface."""
    return {"dry_run": bool(p.get("dry_run")), "force": bool(p.get("force")), "actor": ctx.user,
            "plan_token": p.get("plan_token"), "require_plan": ctx.surface == "http"}


def _markers(p: dict) -> bool:
    return p.get("conflicts") == "markers"


def _restore(svc, ctx: Context, p: dict):
    clean = p.get("clean")
    if ctx.surface == "cli" or p.get("no_clean"):
        clean = not p.get("no_clean")
    kw: dict = {}
    if ctx.surface == "model":
        kw = {"session_id": ctx.session_id, "tool": "chronos_rollback"}
    mode = p.get("mode")
    if ctx.surface == "model" and mode is None:      # the model's default, unless it named paths or clean
        mode = "full" if p.get("paths") or p.get("clean") is not None else "agent_only"
    agent_only = bool(p.get("agent_only")) or mode == "agent_only"
    if agent_only:
        if p.get("paths") or p.get("no_clean") or p.get("clean") is not None:
            raise ValueError("an agent-only restore takes back whole calls: paths and clean apply to a full "
                             "restore (leave out --agent-only; for the model, mode=full)")
        res = svc.agent_restore(_ws(ctx), str(p["checkpoint"]), markers=_markers(p), **_timeop(ctx, p), **kw)
    else:
        if _markers(p):
            raise ValueError("conflict markers apply to an agent-only restore (add --agent-only; for the "
                             "model, mode=agent_only): a full restore writes every file as the checkpoint has it")
        res = svc.restore(_ws(ctx), str(p["checkpoint"]), paths=p.get("paths"), clean=clean,
                          **_timeop(ctx, p), **kw)
    if ctx.surface == "model" and res.status == "ok" and res.safety_checkpoint:
        res.undo = (f"chronos_rollback with checkpoint_id={res.safety_checkpoint} and mode=full restores the "
                    "state before this rollback")
    return res


def _workspaces(svc, ctx: Context, p: dict):
    return r.WorkspacesResult(workspaces=ctx.extra["servable"](svc))


def _revert(svc, ctx: Context, p: dict):
    return svc.revert(_ws(ctx), p.get("operation"), session=p.get("session"), subagent=p.get("subagent"),
                      markers=_markers(p),
                      **_timeop(ctx, p))


def _undo(svc, ctx: Context, p: dict):
    return svc.undo(_ws(ctx), markers=_markers(p), **_timeop(ctx, p))


def _redo(svc, ctx: Context, p: dict):
    return svc.redo(_ws(ctx), markers=_markers(p), **_timeop(ctx, p))


# ------------------------------------------------------------------ the store
def _compact(svc, ctx: Context, p: dict):
    if ctx.steps is None:
        return svc.compact(dry_run=bool(p.get("dry_run")))
    with ctx.steps("compacting the store") as progress:
        return svc.compact(dry_run=bool(p.get("dry_run")), progress=progress)


def _health(svc, ctx: Context, p: dict):
    return svc.health(ctx.workspace)


def _status(svc, ctx: Context, p: dict):
    st = svc.journal_status()
    h = svc.health(ctx.workspace)
    return r.ToolStatus(protection=h.protection, integrity=st.integrity, gate=st.gate, unresolved=st.unresolved,
                        running=st.running, events=st.events, workspace=h.workspace, store=h.store,
                        store_bytes=h.store_bytes, last_snapshot=h.last_snapshot)


def _settings(svc, ctx: Context, p: dict):
    if p.get("settings_cmd") == "accept":
        return svc.settings_accept(p.get("keys") or [], actor=ctx.actor)
    if p.get("keys"):
        raise ValueError("`settings` takes keys only with `accept`")
    return svc.settings_show()


def _operator_key(svc, ctx: Context, p: dict):
    if p.get("key_cmd") == "set":
        if not p.get("key_file"):
            raise ValueError("`operator-key set` needs the private key's path (make one with `ssh-keygen -t "
                             "ed25519 -f ~/.ssh/chronos-operator`, with a passphrase)")
        return svc.operator_key_set(p["key_file"], actor=ctx.actor)
    if p.get("key_file"):
        raise ValueError("`operator-key` takes a path only with `set`")
    return svc.operator_key_show()


def _capture(svc, ctx: Context, p: dict):
    return svc.capture_accept(_ws(ctx), actor=ctx.actor)


def _report(svc, ctx: Context, p: dict):
    from ..report import build, written  # jinja2 only when a report is asked for
    if ctx.surface == "http":
        return build(svc, limit=p["limit"], checkpoints=p["checkpoints"])
    out = p.get("out")
    if out is not None and ctx.surface == "slash":
        out = os.path.join(_ws(ctx), os.path.expanduser(out))
    return written(svc, Path(out) if out else None, limit=p["limit"], checkpoints=p["checkpoints"],
                   workspace=ctx.workspace if ctx.extra.get("workspace_named", True) else None)


# ------------------------------------------------------------------ protected calls
def _argv(p: dict, key: str) -> list[str]:
    argv = list(p.get(key) or [])
    return argv[1:] if argv and argv[0] == "--" else argv


def _run_cmd(svc, ctx: Context, p: dict):
    argv = _argv(p, "argv")
    if not argv:
        raise ValueError("run needs a command after --, e.g. chronos-git run -- make test")
    res = svc.run_command(_ws(ctx), argv, tool=p["tool"], stdout=ctx.output)
    if res.exit_code is not None and res.recorded is False:
        res.status = "error"
        res.error = (f"the command ran (exit code {res.exit_code}) but its outcome could not be recorded: "
                     f"{res.error}; protected calls stay refused until an operator checks "
                     "`chronos-git journal status`")
    return res


def _write(svc, ctx: Context, p: dict):
    if (p.get("content") is None) == (p.get("from_file") is None):
        raise ValueError("write needs exactly one of --content TEXT and --from FILE")
    content = (content_of(p["from_file"], svc.settings.max_file_size_mb) if p.get("from_file") is not None
               else os.fsencode(p["content"]))
    return svc.write_file(_ws(ctx), p["path"], content)


def _git(svc, ctx: Context, p: dict):
    return svc.git_passthrough(_argv(p, "git_argv"))     # no arguments: refused there, with an example


# ------------------------------------------------------------------ journal
def _verify(svc, ctx: Context, p: dict):
    return svc.journal_verify(p.get("checkpoint"), remote=p.get("remote"))


def _recover(svc, ctx: Context, p: dict):
    return svc.recover(p.get("operation"), replay=bool(p.get("replay")), rollback=bool(p.get("rollback")),
                       dry_run=bool(p.get("dry_run")), actor=ctx.actor)


CONFLICTS = Arg("conflicts", help="where a change taken back and a later one overlap: leave the file as it is "
                                  "(default) or write git-style conflict markers into it", choices=("leave", "markers"),
                 default="leave", metavar="leave|markers")
DRY_RUN = Arg("dry_run", "bool", "show the plan, change nothing")
FORCE = Arg("force", "bool", "also overwrite or delete files whose current bytes the safety checkpoint could not "
                             "capture (they are lost for good)")
PLAN_TOKEN = Arg("plan_token", help="from the dry run of this same request", cli=False)
WORKSPACE_PATHS = Arg("paths", "names", "only these paths (files or folders); repeat it", flags=("--path",),
                      metavar="PATH")
def _limit(default: int, le: int, **kw) -> Arg:
    return Arg("limit", "int", kw.pop("help", "how many"), default=default, ge=1, le=le, flags=("--limit", "-n"),
               **kw)

COMMANDS = Table([
    Command("snapshot", "take a checkpoint now", _snapshot, r.SnapshotResult, (
        Arg("message", help="what this checkpoint marks", default="manual checkpoint", flags=("-m", "--message"),
            http_default="checkpoint from the dashboard", model="description",
            model_help="What this checkpoint marks.", model_default="checkpoint requested by the model",
            model_required=True),
        Arg("paths", "names", "only refresh these paths (declared-path snapshot)", flags=("--path",), http="-"),
    ), model=ModelTool("chronos_snapshot", "Take a chronos-git checkpoint of the workspace now (a restore point "
                                           "you can diff against or roll back to)."),
        http=Http("POST", "/snapshot", body="SnapshotRequest")),
    Command("log", "list checkpoints, newest first", _log, r.LogResult, (
        _limit(20, 1000, model="limit", model_help="How many (default 20).", model_le=200),
        Arg("all", "bool", "every checkpoint, also of the lines a restore left behind, each with its parent",
            http_default=True),                  # the panes draw the whole timeline
        Arg("graph", "bool", "draw the timeline as a tree (implies --all)", http="-"),
    ), slash=("list", "--list", "ls"), slash_args=("limit",),
        model=ModelTool("chronos_list_checkpoints", "List the workspace's chronos-git checkpoints, newest first "
                                                    "(index 1 = newest), with the tool call that each one "
                                                    "preceded."),
        http=Http("GET", "/checkpoints"), creates_store=False),
    Command("show", "one checkpoint with the changes it recorded", _show, r.ShowResult, (
        Arg("checkpoint", help=CHECKPOINT_HELP, positional=True, required=True),
    ), slash=("diff", "--diff"), slash_args=("checkpoint",), http=Http("GET", "/checkpoints/{checkpoint}"),
        creates_store=False),
    Command("diff", "diff FROM (default newest) against TO (default the working tree)", _diff, r.DiffResult, (
        Arg("from_", help="a checkpoint (default: the newest)", positional=True, nargs="?", metavar="FROM",
            http="from", model="from_checkpoint", model_also=("checkpoint_id",)),
        Arg("to", help="a checkpoint (default: the current files)", positional=True, nargs="?", metavar="TO",
            model="to_checkpoint", model_help="Omit for the current working tree."),
        Arg("stat", "bool", "file list only, no patch"),
        replace(WORKSPACE_PATHS, model="paths"),
        Arg("max_chars", "int", "patch size limit", ge=0, le=5_000_000, cli=False, http_default=100_000,
            model="max_chars", model_help="Patch size limit (default 20000).", model_default=20_000),
    ), model=ModelTool("chronos_diff", "Show what changed: from a checkpoint (default: the newest) to another "
                                       "checkpoint or to the current files. Checkpoints are ids, 7+ hex "
                                       "prefixes, indexes (1 = newest) or 'latest'."),
        http=Http("GET", "/diff"), creates_store=False),
    Command("restore", "restore a checkpoint (a safety checkpoint is taken first)", _restore, r.RestoreResult, (
        Arg("checkpoint", help=CHECKPOINT_HELP, positional=True, required=True, model="checkpoint_id"),
        DRY_RUN,
        Arg("paths", "names", "restore only these paths", flags=("--path",), metavar="PATH", model="paths",
            model_help="Only these files or directories."),
        Arg("no_clean", "bool", "keep files that are absent from the checkpoint", http="-"),
        Arg("clean", "maybe", "remove files absent from the checkpoint (default from settings)", cli=False,
            model="clean", model_help="Remove files absent from the checkpoint (default from settings)."),
        FORCE, PLAN_TOKEN,
        Arg("agent_only", "bool", "take back only what protected calls changed since the checkpoint; every other "
                                  "change (the person's edits between calls, in the same files too) stays"),
        CONFLICTS,
        Arg("mode", help="agent_only or full", choices=("agent_only", "full"), cli=False, http="-", model="mode",
            model_help="agent_only (default): undo only what tool calls changed since the checkpoint and keep "
                       "the user's own edits; full: put the whole workspace (or the paths) back as it was.",
            ),
    ), model=ModelTool("chronos_rollback", "Roll the workspace back to a checkpoint. By default only the changes "
                                           "tool calls made since then are undone and the user's own edits are "
                                           "kept (a file where both overlap is left as it is and listed as a "
                                           "conflict). The user must approve it; a safety checkpoint of the "
                                           "current state is always taken first, so it can be undone."),
        http=Http("POST", "/restore", body="RestoreRequest", conflict=True,
                  summary="A dry run returns `plan_token`; the real restore must send it back (428 without)."),
        slash=("restore",), slash_args=("checkpoint", "paths*"), confirm=True),
    Command("revert", "take back one call's changes (or one session's or subagent's), keeping everything after it",
            _revert, r.RestoreResult, (
                Arg("operation", help="a journal operation id or a unique prefix (`journal log` lists them)",
                    positional=True, nargs="?", metavar="OPERATION"),
                Arg("session", help="instead: every call of this Hermes session", metavar="ID"),
                Arg("subagent", help="instead: every call of one subagent (its id, or the tool call that "
                                     "started it, where the host names them)", metavar="ID"),
                DRY_RUN, CONFLICTS, FORCE, PLAN_TOKEN,
            ), slash=("revert",), slash_args=("operation",), confirm=True,
        http=Http("POST", "/revert", body="RevertRequest", conflict=True)),
    Command("undo", "undo the newest restore, revert or redo not yet undone", _undo, r.RestoreResult,
            (DRY_RUN, CONFLICTS, FORCE, PLAN_TOKEN), slash=("undo",), confirm=True,
            http=Http("POST", "/undo", body="UndoRequest", conflict=True)),
    Command("redo", "re-apply the newest undo's operation", _redo, r.RestoreResult,
            (DRY_RUN, CONFLICTS, FORCE, PLAN_TOKEN), slash=("redo",), confirm=True,
            http=Http("POST", "/redo", body="RedoRequest", conflict=True)),
    Command("workspaces", "the workspaces this store holds", _workspaces, r.WorkspacesResult, cli=False,
            workspace=None, http=Http("GET", "/workspaces")),
    Command("compact", "apply retention and pack the store", _compact, r.CompactResult, (
        Arg("dry_run", "bool", "show what would go, change nothing"),
    ), workspace=None, reads_only="dry_run", slash=("compact", "--compact"),
        http=Http("POST", "/compact", body="CompactRequest", also_query=("dry_run",))),
    Command("health", "store, journal and workspace state", _health, r.HealthResult, workspace="optional",
            http=Http("GET", "/health"), creates_store=False),
    Command("status", "journal integrity, unresolved calls, store size, last snapshot", _status, r.ToolStatus,
            cli=False, model=ModelTool("chronos_status", "chronos-git state: journal integrity, unresolved tool "
                                                         "calls blocking protected tools, store size, last "
                                                         "snapshot.")),
    Command("settings", "the settings in force; `settings accept` applies the changes held for the operator",
            _settings, r.SettingsRecord, (
                Arg("settings_cmd", help="show|accept", positional=True, nargs="?", choices=("show", "accept"),
                    default="show", metavar="show|accept"),
                Arg("keys", "words", "accept: the held settings you accept (`all`: every one)", positional=True,
                    nargs="*", metavar="KEY"),
            ), workspace=None, operator_only=True),
    Command("capture", "`capture accept`: accept a workspace's narrowing of what is captured (ignore rules that "
                       "now leave out much of it)", _capture, r.CaptureAccepted, (
                Arg("capture_cmd", positional=True, choices=("accept",), metavar="accept", required=True),
            ), operator_only=True),
    Command("report", "write the self-contained HTML forensic report of the store", _report, ReportWritten, (
        Arg("out", help="file or folder to write (default: the folder chronos-git-reports beside the store, "
                        "outside every workspace; a dated file name)", flags=("--out", "-o"), http="-"),
        Arg("limit", "int", "newest journal events in the timeline", default=500, ge=1, le=10_000),
        Arg("checkpoints", "int", "newest checkpoints per workspace", default=20, ge=1, le=200),
    ), workspace="optional", slash=("report",), slash_args=("out",), creates_store=False,
        http=Http("GET", "/report", workspace=False, html=True,
                  summary="the forensic report: one HTML document, no scripts, no external references")),
    Command("run", "run a command as a protected call: run [opts] -- CMD ARGS...", _run_cmd, r.RunResult, (
        Arg("tool", help="tool name recorded in the journal", default="terminal"),
        Arg("argv", "remainder", positional=True, metavar="-- CMD ARGS"),
    )),
    Command("write", "a protected write_file", _write, r.WriteResult, (
        Arg("path", positional=True, required=True),
        Arg("content", help="the bytes to write (as UTF-8)"),
        Arg("from_file", help="a file holding the bytes to write", flags=("--from",)),
    )),
    Command("remote add", "add a remote: a path, file://, ssh://, git://, https:// or user@host:path",
            lambda svc, ctx, p: svc.remote_add(p["name"], p["url"], snapshots=bool(p.get("snapshots"))),
            r.RemoteAdded, (
                Arg("name", positional=True, required=True), Arg("url", positional=True, required=True),
                Arg("snapshots", "bool", "also push checkpoints: file contents leave the machine (default: "
                                         "journal only)")), workspace=None, operator_only=True),
    Command("remote list", "remotes with their last push and last error", lambda svc, ctx, p: svc.remote_list(),
            r.RemotesResult, workspace=None, reads_only=True),
    Command("remote remove", "forget a remote (what it holds stays there)",
            lambda svc, ctx, p: svc.remote_remove(p["name"]), r.RemoteRemoved,
            (Arg("name", positional=True, required=True),), workspace=None, operator_only=True),
    Command("push", "push the journal (and checkpoints, for --snapshots remotes) now",
            lambda svc, ctx, p: svc.push(p.get("name"), allow_excluded=bool(p.get("allow_excluded"))),
            r.PushResult, (
                Arg("name", help="remote (default: the only one)", positional=True, nargs="?"),
                Arg("allow_excluded", "bool", "also push checkpoints that hold files matching remote_exclude"),
            ), workspace=None),
    Command("fetch", "fetch every host's journal and checkpoints from a remote",
            lambda svc, ctx, p: svc.fetch(p["name"]), r.FetchResult,
            (Arg("name", positional=True, required=True),), workspace=None),
    Command("git", "read the store with stock git: git ARGS... (refused while the store holds anything "
                   "chronos-git never writes)", _git, r.GitRun, (
                Arg("git_argv", "remainder", "git's own arguments, e.g. log --oneline refs/chronos/journal",
                    positional=True, metavar="ARGS"),),
            workspace=None, creates_store=False,
            description="Runs `git --git-dir STORE --no-pager --no-replace-objects ARGS...` with no global or "
                        "system config, no GIT_* variables of yours, no pager, hooks, fsmonitor or network, once "
                        "the store's config, refs and hooks hold nothing chronos-git did not write (stock git "
                        "would run a pager or hook planted there, or show a history a replace ref forged). "
                        "The output is git's own and the exit code git's; --json does not apply."),
    Command("operator-key", "the SSH key operator acts are signed with: `operator-key set PATH` registers it "
                            "(once, from your own terminal)", _operator_key, r.OperatorKeyInfo, (
                Arg("key_cmd", positional=True, nargs="?", choices=("show", "set"), default="show",
                    metavar="show|set"),
                Arg("key_file", help="set: the private key (its .pub beside it)", positional=True, nargs="?",
                    metavar="PATH"),
            ), workspace=None, operator_only=True),
    Command("journal status", "integrity and unresolved operations", lambda svc, ctx, p: svc.journal_status(),
            r.JournalStatus, workspace=None, slash=("status",), http=Http("GET", "/journal/status")),
    Command("journal verify", "re-hash and replay the whole chain", _verify, r.VerifyResult, (
        Arg("checkpoint", "json", "an exported journal head that must be an ancestor",
            flags=("--head", "--checkpoint"), metavar="FILE", cli_read=exported_head),
        Arg("remote", help="also check this host's journal on remote NAME: it must be the local head or an "
                           "ancestor", metavar="NAME", http="-"),
    ), workspace=None, reads_only=True, slash=("verify",),
        model=ModelTool("chronos_verify", "Verify the whole tool-call journal (hash chain, state, local "
                                          "checkpoint)."),
        http=Http("POST", "/journal/verify", body="VerifyRequest", conflict=True)),
    Command("journal export", "print the journal head to keep elsewhere (verify against it later)",
            lambda svc, ctx, p: svc.journal_export(), r.JournalHeadResult, workspace=None, reads_only=True,
            cli_aliases=("checkpoint",), http=Http("GET", "/journal/checkpoint")),
    Command("journal log", "events, newest first", lambda svc, ctx, p: svc.journal_log(p["limit"]),
            r.EventsResult, (_limit(50, 10_000),), workspace=None, reads_only=True,
            http=Http("GET", "/journal/log")),
    Command("journal show", "every event of one operation", lambda svc, ctx, p: svc.journal_show(p["operation"]),
            r.OperationEvents, (Arg("operation", positional=True, required=True),), workspace=None,
            reads_only=True),
    Command("journal resolve", "record the outcome of an unresolved operation",
            lambda svc, ctx, p: svc.resolve(p["operation"], p["outcome"], p["evidence"], actor=ctx.actor),
            r.ResolveResult, (
                Arg("operation", positional=True, required=True, http="operation_id"),
                Arg("outcome", required=True, choices=("completed", "not_applied")),
                Arg("evidence", required=True),
            ), workspace=None, operator_only=True, slash=("resolve",),
        slash_args=("operation", "outcome", "evidence*"),
        http=Http("POST", "/journal/resolve", body="ResolveRequest")),
    Command("journal countersign", "own an operator act that carries no valid signature (it was yours)",
            lambda svc, ctx, p: svc.journal_countersign(p["seq"], actor=ctx.actor), r.Countersigned, (
                Arg("seq", "int", "its journal event number (health names it)", positional=True, required=True,
                    ge=1, metavar="SEQ"),), workspace=None, operator_only=True),
    Command("journal recover", "settle crashed file operations by evidence; replay or roll back", _recover,
            r.RecoverResult | r.RollbackResult, (
                Arg("operation", positional=True, nargs="?", http="operation_id"),
                Arg("replay", "bool", "apply a not-applied file operation exactly once"),
                Arg("rollback", "bool", "put back what the operation changed (up to the checkpoint taken when "
                                        "its crash was found; later changes are kept), record rolled_back"),
                Arg("dry_run", "bool", "with --rollback: show the plan, change nothing"),
            ), workspace=None, operator_only=True, slash=("recover",), slash_args=("operation",),
        http=Http("POST", "/journal/recover", body="RecoverRequest")),
])
