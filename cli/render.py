"""Text for people: one renderer per result type, shared by the CLI and `/chronos`.

rich draws tables with aligned columns and, on a terminal with NO_COLOR
unset, colour; into a pipe or for `/chronos` it writes plain text.  Names
that are not UTF-8 are shown with `\\xNN` escapes (engine.codec.human).
"""
from __future__ import annotations

import io
import os
from datetime import datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..engine.codec import human
from ..service import results as r


def console(stream, *, plain: bool = False) -> Console:
    color = not plain and stream.isatty() and not os.environ.get("NO_COLOR")
    return Console(file=stream, force_terminal=color, no_color=not color, highlight=False,
                   soft_wrap=True, emoji=False, width=None if color else 200)


def show(result: r.Result, stream, *, command: str | None = None) -> None:
    """Print `result` for a person on `stream` (colour on a terminal)."""
    if stream.isatty():
        con = console(stream)
        for part in _parts(result, command):
            con.print(part)
    else:
        stream.write(text(result, command) + "\n")
    stream.flush()


def text(result: r.Result, command: str | None = None) -> str:
    """`result` as plain text (for pipes and `/chronos`, whose output Hermes prints itself)."""
    buf = io.StringIO()
    con = console(buf, plain=True)
    for part in _parts(result, command):
        con.print(part)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").split("\n"))


def progress(stream):
    """A progress callback for long work (compaction): one line per step, on a terminal only."""
    if not stream.isatty():
        return None
    con = console(stream)

    def say(message: str) -> None:
        con.print(Text(f"… {message}", style="dim"))
    return say


# ---------------------------------------------------------------- dispatch
def _parts(result: r.Result, command: str | None):
    for kind, fn in _RENDERERS:
        if isinstance(result, kind):
            yield from fn(result)
            return
    if result.status == "error":
        yield _error(result.error or "failed")
        return
    yield Text(human(str(result.wire())))


def _error(message: str) -> Text:
    return Text.assemble(("error: ", "bold red"), human(message))


def _short(cid: str | None) -> str:
    return cid[:8] if cid else "-"


def _when(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _table(*columns, title: str | None = None, header: bool = True) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False, box=None, pad_edge=False,
              header_style="bold", show_header=header)
    for c in columns:
        if isinstance(c, tuple):
            t.add_column(c[0], justify=c[1], no_wrap=c[1] == "right")
        else:
            t.add_column(c)
    return t


# ---------------------------------------------------------------- renderers
def _refusal(res: r.Refusal):
    yield Text.assemble(("recovery gate CLOSED", "bold red"), f" ({res.integrity})")
    for op in res.operations:
        yield Text(f"  {op.operation_id[:12]}  {op.tool}  {op.state}" + (f": {op.reason}" if op.reason else ""))
    yield Text(human(res.message))


def _snapshot(res: r.SnapshotResult):
    if res.created:
        head = Text.assemble(("checkpoint ", ""), (_short(res.checkpoint), "bold"),
                             f" of {human(res.workspace)}: {res.files} files ({res.kind}, {res.scan})")
    else:
        head = Text(f"nothing changed since checkpoint {_short(res.checkpoint)} of {human(res.workspace)}")
    yield head
    if res.partial:
        yield Text("  partial: the snapshot budget ran out; unchanged entries come from the previous one",
                   style="yellow")
    yield from _skipped(res.skipped, res.nested_repos)


def _skipped(skipped: list[r.Skipped], nested: list[str]):
    if nested:
        yield Text(f"  nested repositories left out: {', '.join(human(n) for n in nested[:10])}")
    if skipped:
        t = _table("skipped", "why", title=f"  {len(skipped)} path(s) not captured:")
        for s in skipped[:50]:
            t.add_row(human(s.path), s.reason)
        yield t


def _log(res: r.LogResult):
    if not res.checkpoints:
        yield Text(f"no checkpoints yet for {human(res.workspace)}" + (f" ({res.note})" if res.note else ""))
        return
    t = _table(("#", "right"), "id", "when", "kind", "what", title=f"checkpoints of {human(res.workspace)}, newest first")
    for c in res.checkpoints:
        what = human(c.description) + (f" [{c.tool}]" if c.tool else "")
        if c.skipped:
            what += f" ({len(c.skipped)} skipped)"
        t.add_row(str(c.index or ""), _short(c.id), _when(c.time), c.kind, what)
    yield t


_STATUS_STYLE = {"added": "green", "deleted": "red", "modified": "yellow", "renamed": "cyan"}


def _diff(res: r.DiffResult):
    to = "the working tree" if res.to == "working tree" else _short(res.to)
    yield Text(f"{_short(res.from_)} -> {to}: {res.stats.files} file(s), "
               f"+{res.stats.additions} -{res.stats.deletions}")
    if res.files:
        t = _table("status", "path", ("+", "right"), ("-", "right"))
        for f in res.files:
            path = human(f.path) + (f" (from {human(f.old_path)})" if f.old_path else "")
            t.add_row(Text(f.status, style=_STATUS_STYLE.get(f.status, "")), path,
                      "bin" if f.binary else str(f.additions), "" if f.binary else str(f.deletions))
        yield t
    if res.patch:
        yield Text("")
        yield Text(human(res.patch.rstrip("\n")))
    if res.patch_truncated:
        yield Text("(patch truncated)", style="dim")


def _show(res: r.ShowResult):
    c = res.checkpoint
    yield Text.assemble(("checkpoint ", ""), (c.id, "bold"))
    yield Text(f"  {_when(c.time)}  {c.kind}  {human(c.description)}" + (f" [{c.tool}]" if c.tool else ""))
    yield Text(f"  {c.files} files, {_size(c.added_bytes)} new" + (f"; {human(c.note)}" if c.note else ""))
    yield from _skipped(c.skipped, c.nested_repos)
    if res.changes is None:
        yield Text("  the first checkpoint: nothing before it to compare with")
    else:
        yield from _diff(res.changes)


_ACTION_STYLE = {"restore": "yellow", "create": "green", "delete": "red", "keep": "bold magenta",
                 "failed": "bold red", "skip": "dim"}


def _restore(res: r.RestoreResult):
    target = _short(res.restored_checkpoint)
    if res.dry_run:
        yield Text(f"dry run: restoring {target} would write {res.files_changed} file(s) and remove "
                   f"{res.untracked_removed}; {res.kept} kept, {res.skipped} skipped. Nothing was changed.")
    else:
        yield Text.assemble(("restored " if not res.failed else "restore INCOMPLETE: ",
                             "bold" if not res.failed else "bold red"),
                            f"checkpoint {target}: {res.files_changed} file(s) written, "
                            f"{res.untracked_removed} removed, {res.kept} kept, {res.skipped} skipped"
                            + (f", {res.failed} failed" if res.failed else ""))
        if res.safety_checkpoint:
            yield Text(f"undo: chronos-git restore {res.safety_checkpoint[:12]}  (the safety checkpoint)")
    if res.plan:
        t = _table("action", "path", "why")
        for it in res.plan[:200]:
            t.add_row(Text(it.action, style=_ACTION_STYLE.get(it.action, "")), human(it.path),
                      human(it.reason or ""))
        yield t
        if len(res.plan) > 200:
            yield Text(f"... and {len(res.plan) - 200} more (--json lists them all)", style="dim")
    if res.error:
        yield _error(res.error)


def _journal_status(res: r.JournalStatus):
    gate = Text("open", style="green") if res.gate == "open" else Text("CLOSED", style="bold red")
    yield Text.assemble(f"journal: integrity {res.integrity}, {res.events} events, gate ", gate)
    p = res.protection
    if p.state not in ("on", "ready"):
        yield Text(f"  protection {p.state.upper()}: {human(p.reason or '')}" + (f" (fix: {p.fix})" if p.fix else ""),
                   style="bold red" if p.state == "off" else "yellow")
    if res.healed:
        yield Text(f"  healed: {res.healed}")
    for s in res.settled_at_start:
        yield Text(f"  settled at this start: {s.operation_id[:12]} {s.tool}: {s.result}"
                   + (f" ({human(s.evidence)})" if s.evidence else ""))
    if res.unresolved:
        t = _table("operation", "tool", "state", "why", title="  waiting for an operator:")
        for op in res.unresolved:
            t.add_row(op.operation_id[:12], op.tool or "-", op.state, human(op.reason or "cut off by a crash"))
        yield t
        yield Text("  resolve with: chronos-git journal resolve OP --outcome completed|not_applied --evidence TEXT\n"
                   "           or: chronos-git journal recover OP --rollback")
    for op in res.running:
        yield Text(f"  running: {op.operation_id[:12]} {op.tool} (pid {(op.owner or {}).get('pid')})")
    if res.replayable:
        yield Text(f"  replayable (not applied): {', '.join(o[:12] for o in res.replayable)}")


def _verify(res: r.VerifyResult):
    if res.integrity != "ok":
        yield Text("journal verification FAILED:", style="bold red")
        for p in res.problems:
            yield Text(f"  {human(p)}")
        return
    trees = res.checkpoint_trees
    if trees.problems:
        yield Text("journal verified, but checkpoints hold entries git's fsck rejects:", style="bold red")
        for p in trees.problems:
            yield Text(f"  {human(p)}")
        return
    yield Text(f"journal verified: {res.events} events, integrity ok; {trees.checkpoints} checkpoint(s) "
               f"clean ({res.seconds} s)" + (f"; {res.healed}" if res.healed else ""))


def _head(res: r.JournalHeadResult):
    c = res.checkpoint
    yield Text(f"journal head {c.head} (event #{c.seq}) of journal {c.journal_id}")
    yield Text("keep this elsewhere; later: chronos-git journal checkpoint --json > head.json, then "
               "chronos-git journal verify --checkpoint head.json", style="dim")


def _events(res: r.EventsResult | r.OperationEvents):
    if isinstance(res, r.OperationEvents):
        yield Text(f"operation {res.operation_id}:")
    t = _table(("#", "right"), "when", "kind", "operation", "what")
    for e in res.events:
        extra = e.model_extra or {}
        what = " ".join(str(extra[k]) for k in ("tool", "status", "outcome", "reason", "action") if extra.get(k))
        t.add_row(str(e.seq), _when(e.timestamp_ns / 1e9), e.kind, (e.operation_id or "-")[:12], human(what))
    yield t


def _resolve(res: r.ResolveResult):
    yield Text(f"operation {res.operation_id[:12]} resolved as {res.outcome} (event #{res.event}); gate {res.gate}")


def _recover(res: r.RecoverResult):
    yield Text(f"settled {len(res.settled)} operation(s) by evidence")
    for s in res.settled:
        yield Text(f"  {s.operation_id[:12]} {s.tool}: {s.result}" + (f" ({human(s.evidence)})" if s.evidence else
                                                                       f" ({s.why})" if s.why else ""))
    for rp in res.replayed or ():
        yield Text(f"  replayed {rp.operation_id[:12]} as {rp.replay_operation_id[:12]}: "
                   f"{', '.join(human(p) for p in rp.paths)}")
    yield Text(f"gate {res.gate}; {len(res.unresolved)} unresolved")


def _rollback(res: r.RollbackResult):
    yield Text(f"operation {res.operation_id[:12]}: rolled back ({human(res.evidence)}); gate {res.gate}")


def _compact(res: r.CompactResult):
    dropped = sum(len(d.checkpoints) for d in res.dropped)
    if res.dry_run:
        yield Text(f"dry run: retention would drop {dropped} checkpoint(s); nothing was changed")
    else:
        yield Text(f"compacted: {dropped} checkpoint(s) dropped by retention, store {_size(res.size_before)} "
                   f"-> {_size(res.size_after)} in {res.elapsed_s} s")
    for d in res.dropped:
        yield Text(f"  {human(d.workspace)}: {len(d.checkpoints)} dropped, {d.kept} kept (oldest kept {d.boundary[:8]})")


def _health(res: r.HealthResult):
    p = res.protection
    style = {"on": "bold green", "ready": "green", "degraded": "yellow", "off": "bold red"}[p.state]
    yield Text.assemble("protection: ", (p.state.upper(), style), f"  {human(p.reason or '')}")
    if p.fix:
        yield Text(f"  fix: {p.fix}")
    for problem in res.settings_problems:
        yield Text(f"  settings problem: {human(problem)}", style="yellow")
    if not res.store_exists:
        yield Text(f"store: {res.store} (not created yet)")
        return
    t = _table("", "", header=False)
    t.add_row("store", f"{res.store} ({_size(res.store_bytes)}, {res.workspaces} workspace(s))")
    if res.journal:
        t.add_row("journal", f"{res.journal.events} events, integrity {res.journal.integrity}")
    t.add_row("gate", f"{res.gate}, {res.unresolved} unresolved")
    if res.last_snapshot:
        ls = res.last_snapshot
        t.add_row("last snapshot", f"{_short(ls.get('checkpoint'))} at {_when(ls['time'])} ({ls.get('kind', '-')})")
    w = res.workspace
    if w is not None:
        latest = f", newest {_short(w.latest.id)} ({_when(w.latest.time)})" if w.latest else ""
        t.add_row("workspace", f"{human(w.root)}: {w.checkpoints} checkpoint(s){latest}")
        if w.background and w.background.running:
            t.add_row("", f"first snapshot running: {w.background.progress or ''}")
    if res.deferred:
        t.add_row("deferred", human(res.deferred))
    yield t


def _call(res: r.CallRecord):
    if isinstance(res, r.RunResult) and res.read_only:
        yield Text(f"ran (read-only tool, not journaled): exit code {res.exit_code}")
        return
    what = (f"wrote {human(res.path)} ({res.bytes_written} bytes)" if isinstance(res, r.WriteResult)
            else f"ran: exit code {res.exit_code}")
    yield Text(f"{what}; operation {(res.operation_id or '-')[:12]}, checkpoint before "
               f"{_short(res.pre_checkpoint)}, after {_short(res.post_checkpoint)}")
    if res.outcome == "uncertain":
        yield Text(f"  outcome unknown ({res.reason}): the recovery gate is closed", style="bold red")
    if res.gate_warning:
        yield Text(f"  warning: {human(res.gate_warning)}", style="yellow")
    if res.error:
        yield _error(res.error)


def _workspaces(res: r.WorkspacesResult):
    t = _table("workspace", ("checkpoints", "right"), "newest")
    for w in res.workspaces:
        t.add_row(human(w.root), str(w.checkpoints), _when(w.latest.time) if w.latest else "-")
    yield t


# most specific first
_RENDERERS = [
    (r.Refusal, _refusal), (r.SnapshotResult, _snapshot), (r.LogResult, _log), (r.ShowResult, _show),
    (r.DiffResult, _diff), (r.RestoreResult, _restore), (r.JournalStatus, _journal_status),
    (r.VerifyResult, _verify), (r.JournalHeadResult, _head), (r.EventsResult, _events),
    (r.OperationEvents, _events), (r.ResolveResult, _resolve), (r.RecoverResult, _recover),
    (r.RollbackResult, _rollback), (r.CompactResult, _compact), (r.HealthResult, _health),
    (r.CallRecord, _call), (r.WorkspacesResult, _workspaces),
]
