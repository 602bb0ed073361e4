"""Text for people: one renderer per result type, shared by the CLI and `/chronos`.

rich draws tables with aligned columns and, on a terminal with NO_COLOR
unset, colour; into a pipe or for `/chronos` it writes plain text (no escape
codes, no trailing whitespace).  Names that are not UTF-8 are shown with
`\\xNN` escapes (engine.codec.human), and so are control characters, so a
hostile file name can neither crash the output nor drive the terminal.
An error is one line, "error: ...", which the CLI prints on stderr.
"""
from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
from contextlib import contextmanager
from datetime import datetime

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..commands import COMMANDS as TABLE
from ..engine.checkpoint import SHORT_ID
from ..engine.codec import human
from ..engine.wording import plural
from ..service import results as r

_PLAIN_WIDTH = 10_000            # no wrapping in pipes: tables get their natural width
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_KEEP_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$")
PROG = "chronos-git"             # the standalone command; inside Hermes it is `hermes chronos-git`
COMMANDS = (*TABLE.top_words(), "windtunnel", "setup")   # the parser's own words (a test checks)
_INVOCATION = re.compile(r"(?<![\w./-])(?<!hermes )chronos-git(?= (?:%s)\b)" % "|".join(COMMANDS))


def for_prog(text: str, prog: str = PROG) -> str:
    """Hints name the command the reader types: `chronos-git journal status` becomes
    `hermes chronos-git journal status` where the CLI runs inside Hermes."""
    return text if prog == PROG else _INVOCATION.sub(prog, text)


def colour(stream) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (https://no-color.org)."""
    try:
        return stream.isatty() and not os.environ.get("NO_COLOR")
    except (AttributeError, ValueError):
        return False


def console(stream, *, color: bool = False) -> Console:
    return Console(file=stream, force_terminal=color, no_color=not color, color_system="auto" if color else None,
                   highlight=False, soft_wrap=True, emoji=False, markup=False,
                   width=shutil.get_terminal_size().columns if color else _PLAIN_WIDTH)


def _live_console(stream) -> Console:
    """For a progress display on a terminal: cursor control always, colour as `colour` says."""
    color = colour(stream)
    return Console(file=stream, force_terminal=True, no_color=not color, color_system="auto" if color else None,
                   highlight=False, emoji=False, markup=False)


def show(result: r.Result, out, err, *, command: str | None = None, prog: str = PROG) -> None:
    """Print `result` for a person: what it says on `out`, an error as one line on `err`."""
    body = for_prog(_render(_safe_parts(result, command), colour(out)), prog)
    if body:
        _write(out, body)
    if result.status == "error":
        _write(err, for_prog(_render([_error(_message(result))], colour(err)), prog))


def text(result: r.Result, command: str | None = None, prog: str = PROG) -> str:
    """`result` as plain text (for pipes and `/chronos`, whose output Hermes prints itself)."""
    parts = _safe_parts(result, command)
    if result.status == "error":
        parts.append(_error(_message(result)))
    return for_prog(_render(parts, False), prog)


def _render(parts, color: bool) -> str:
    buf = io.StringIO()
    con = console(buf, color=color)
    for part in parts:
        con.print(part)
    lines = buf.getvalue().rstrip("\n").split("\n")
    return human("\n".join(_TRAILING.sub(r"\1", line) for line in lines)).strip("\n")


def _write(stream, s: str) -> None:
    try:
        stream.write(s + "\n")
    except UnicodeEncodeError:          # a terminal whose encoding cannot show some character
        enc = getattr(stream, "encoding", None) or "ascii"
        stream.write((s + "\n").encode(enc, "backslashreplace").decode(enc))
    stream.flush()


# ---------------------------------------------------------------- progress (terminals only)
_PHASES = {"listing": "listing files", "packing": "storing files", "trees": "writing trees"}


@contextmanager
def import_progress(stream, label: str = "first snapshot", unit: str = "files"):
    """A progress bar for a first snapshot's bulk import, as `progress(phase, done, total)`.

    Yields None unless `stream` is a terminal (never into a pipe or beside --json); the
    bar appears with the import's first report, so later snapshots (no import) show none."""
    if stream is None or not stream.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    bar = Progress(SpinnerColumn(), TextColumn(label + ": {task.description}"), BarColumn(),
                   MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn(),
                   console=_live_console(stream), transient=True)
    task = None

    def report(phase: str, done: int, total: int) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(_PHASES.get(phase, phase), total=None)
        bar.update(task, description=_PHASES.get(phase, phase), completed=done, total=total or None)

    try:
        yield report
    finally:
        if task is not None:
            bar.stop()


@contextmanager
def steps(stream, what: str):
    """A spinner with the current step of long work (compaction's `progress(msg)`).

    Yields None unless `stream` is a terminal."""
    if stream is None or not stream.isatty():
        yield None
        return
    status = _live_console(stream).status(what, spinner="dots")
    status.start()
    try:
        yield lambda message: status.update(f"{what}: {_clean(message)}")
    finally:
        status.stop()


# ---------------------------------------------------------------- dispatch
def _safe_parts(result: r.Result, command: str | None) -> list:
    """The renderer's parts; should one fail on data it did not expect, plain `key: value`
    lines of the wire document instead (a person still gets every fact, never a traceback)."""
    try:
        return list(_parts(result, command))
    except Exception:
        return [Text(f"{key}: {_name(str(value))}") for key, value in result.wire().items()
                if key not in ("status", "error")]


def _parts(result: r.Result, command: str | None):
    for kind, fn in _RENDERERS + _late_renderers():
        if isinstance(result, kind):
            yield from fn(result)
            return
    if result.status != "error":
        yield Text(_clean(str(result.wire())))


def _message(result: r.Result) -> str:
    if isinstance(result, r.Refusal):
        return result.message
    return result.error or "failed"


def _error(message: str) -> Text:
    one_line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return Text.assemble(("error: ", "bold red"), _name(one_line))


def shell_word(s: str) -> str:
    """`s` as one word bash (or zsh) gives back byte for byte (a name with spaces, a newline or
    bytes that are not UTF-8: `$'...'` with escapes), for a command to paste."""
    raw = os.fsencode(s)
    if all(0x20 < b < 0x7f for b in raw):
        return shlex.quote(s)
    return "$'" + "".join(chr(b) if 0x20 <= b < 0x7f and b not in b"'\\" else f"\\x{b:02x}" for b in raw) + "'"


def _name(s: str | None) -> str:
    """A name or message on one line: undecodable bytes and control characters as \\xNN."""
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()), human(s or ""))


def _clean(s: str | None) -> str:
    """Free text (a patch): like `_name`, but lines and tabs stay."""
    return _CONTROL_KEEP_LINES.sub(lambda m: "\\x%02x" % ord(m.group()), human(s or ""))


def _short(cid: str | None) -> str:
    return cid[:SHORT_ID] if cid else "-"


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


def _checkpoint(c: r.CheckpointInfo | None, cid: str | None = None) -> str:
    """`6d50f681 ("before write_file", 2026-12-01 11:06:52)`: which checkpoint, for a person."""
    if c is None:
        return _short(cid)
    return f'{_short(c.id)} ("{_name(c.description)}", {_when(c.time)})'


ROLE_LABELS = {"baseline": "first", "before_call": "before call", "after_call": "after call",
               "turn_start": "turn start", "safety": "safety", "manual": "manual", "restored": "restored",
               "boundary": "crash found"}


def _role(c: r.CheckpointInfo) -> str:
    """Every role it served (a reused checkpoint: "after call + before call"), its own first."""
    served = [c.role] + [x for x in (c.roles or ()) if x != c.role] if c.role else []
    label = " + ".join(ROLE_LABELS.get(x, x) for x in served) or c.kind
    return f"{label} (partial)" if c.kind == "partial" and c.role else label


def _table(*columns, header: bool = True) -> Table:
    t = Table(show_edge=False, box=None, pad_edge=False, header_style="bold", show_header=header)
    for c in columns:
        if isinstance(c, tuple):
            t.add_column(c[0], justify=c[1], no_wrap=True)
        else:
            t.add_column(c)
    return t


def _indent(renderable):
    return Padding(renderable, (0, 0, 0, 2), expand=False)


def _facts(rows) -> Padding:
    """Aligned `key  value` lines (rows whose value is None are left out)."""
    t = _table("", "", header=False)
    for key, value in rows:
        if value is not None:
            t.add_row(key, value)
    return _indent(t)


# ---------------------------------------------------------------- checkpoints
def _snapshot(res: r.SnapshotResult):
    ws = _name(res.workspace)
    if not res.created:
        yield Text(f"nothing changed since checkpoint {_checkpoint(res.checkpoint_info, res.checkpoint)} "
                   f"of {ws}; no new checkpoint" if res.checkpoint else f"no checkpoint taken of {ws}")
        if res.note:
            yield Text(f"  {_name(res.note)}", style="yellow")
    else:
        info = res.checkpoint_info
        new = f", {_size(info.added_bytes)} new" if info else ""
        how = {"bulk": " (first snapshot)", "declared": " (only the given paths were read)"}.get(res.scan, "")
        yield Text.assemble("new checkpoint ", (_checkpoint(info, res.checkpoint), "bold"),
                            f" of {ws}: {plural(res.files, 'file')}{new}{how}")
    if res.partial:
        yield Text("  partial: the snapshot budget ran out; entries it did not reach are as in the "
                   "checkpoint before", style="yellow")
    yield from _skipped(res.skipped, res.nested_repos)
    c = res.ignore_change
    if c is not None and c.count:
        yield Text(f"  ignore rules changed ({', '.join(_name(x) for x in c.sources)}): they now ignore "
                   f"{'at least ' if not c.complete else ''}{c.count} of {plural(c.files, 'captured path')} "
                   f"({', '.join(_name(x) for x in c.sample[:3])}{' ...' if c.count > 3 else ''}); files created "
                   "there are left out", style="yellow" if c.large else "")


def _skipped(skipped: list[r.Skipped], nested: list[str]):
    if nested:
        more = f" and {len(nested) - 10} more" if len(nested) > 10 else ""
        yield Text(f"  nested repositories left out: {', '.join(_name(n) for n in nested[:10])}{more}")
    if skipped:
        yield Text(f"  {plural(len(skipped), 'path')} not captured:")
        t = _table("path", "why", ("size", "right"))
        for s in skipped[:50]:
            t.add_row(_name(s.path), s.reason.replace("_", " "), _size(s.size) if s.size is not None else "")
        yield _indent(t)
        if len(skipped) > 50:
            yield Text(f"  ... and {len(skipped) - 50} more (--json lists them all)", style="dim")


def _log(res: r.LogResult):
    if not res.checkpoints:
        yield Text(f"no checkpoints yet for {_name(res.workspace)}" + (f" ({res.note})" if res.note else ""))
        yield from _damaged(res.damaged)
        return
    which = "every checkpoint" if res.all else "the current line of the timeline"
    yield Text(f"checkpoints of {_name(res.workspace)}, {which}, newest first:")
    lanes = _graph(res.checkpoints) if res.graph else None
    t = _table(*([""] if lanes else []), ("#", "right"), ("@", "right"), "id", "when", "role", ("files", "right"),
               "what")
    for row, c in enumerate(res.checkpoints):
        tool = c.tool if c.tool and c.tool != "turn start" else None      # a turn start is not a tool
        what = Text(_name(c.description) + (f" [{_name(tool)}]" if tool else ""))
        if c.restored_from:
            what.append(f" (restored {_short(c.restored_from)})")
        if c.skipped:
            what.append(f" ({len(c.skipped)} not captured)")
        if c.damaged:
            what.append(f" ({_name(c.damaged)})", style="bold red")
        t.add_row(*([lanes[row]] if lanes else []), str(c.index or ""), f"@{c.number}" if c.number else "",
                  _short(c.id), _when(c.time),
                  Text(_role(c), style="yellow" if c.kind == "partial" else ""), str(c.files), what)
    yield _indent(t)
    yield Text("  #: 1 = newest, shifts as checkpoints are added; @N: the checkpoint's own number, never changes",
               style="dim")
    yield from _damaged(res.damaged)
    if res.note:
        yield Text(f"  {_name(res.note)}", style="dim")


def _graph(checkpoints: list[r.CheckpointInfo]) -> list[str]:
    """Per checkpoint (newest first) its column of the timeline's tree: `*` on its lane, `|`
    on the others; a lane closes where its line joins the one it branched from (`/`)."""
    lanes: list[str | None] = []            # the checkpoint each lane waits for
    out = []
    for c in checkpoints:
        mine = [i for i, want in enumerate(lanes) if want == c.id]
        if not mine:
            lanes.append(c.id)
            mine = [len(lanes) - 1]
        first = mine[0]
        cells = ["*" if i == first else ("/" if i in mine else ("|" if want else " "))
                 for i, want in enumerate(lanes)]
        for i in mine[1:]:
            lanes[i] = None
        lanes[first] = (c.parents or [None])[0]
        while lanes and lanes[-1] is None:
            lanes.pop()
        out.append(" ".join(cells).rstrip())
    return out


def _damaged(found: list[r.Damage] | None, *, workspaces: bool = False):
    """What cannot serve, one line each (a ref or an unreadable commit ends a listing there)."""
    for d in (found or ())[:20]:
        what = "" if d.ref else f"checkpoint {_short(d.id)}"      # a ref's reason names it
        where = f"{' of ' if what else ''}{_name(d.workspace)}" if workspaces and d.workspace else ""
        yield Text(f"  damaged: {what}{where}{': ' if what or where else ''}{_name(d.reason)}", style="bold red")
    if len(found or ()) > 20:
        yield Text(f"  ... and {len(found or ()) - 20} more (--json lists them all)", style="dim")


_STATUS_STYLE = {"added": "green", "deleted": "red", "modified": "yellow", "renamed": "cyan"}


def _diff(res: r.DiffResult):
    to = "the working tree" if res.to == "working tree" else _short(res.to)
    if not res.files:
        yield Text(f"{_short(res.from_)} -> {to}: no changes")
        return
    yield Text(f"{_short(res.from_)} -> {to}: {plural(res.stats.files, 'file')} changed, "
               f"+{res.stats.additions} -{res.stats.deletions} lines")
    t = _table("status", "path", ("+", "right"), ("-", "right"))
    for f in res.files:
        path = (_name(f.path) + (f" (from {_name(f.old_path)})" if f.old_path else "")
                + (f" (mode {f.mode})" if f.mode else ""))
        adds, dels = ("bin", "bin") if f.binary else (str(f.additions), str(f.deletions))
        t.add_row(Text(f.status, style=_STATUS_STYLE.get(f.status, "")), path,
                  Text(adds, style="green"), Text(dels, style="red"))
    yield _indent(t)
    if res.patch:
        yield Text("")
        yield _patch(res.patch)
    if res.patch_truncated:
        yield Text("(patch truncated: --json has it in full up to its limit; --path narrows it)", style="dim")


def _patch(patch: str) -> Text:
    out = Text()
    for line in _clean(patch.rstrip("\n")).split("\n"):
        style = ("bold" if line.startswith(("diff --git", "--- ", "+++ ")) else
                 "green" if line.startswith("+") else "red" if line.startswith("-") else
                 "cyan" if line.startswith("@@") else "")
        out.append(line + "\n", style=style)
    out.rstrip()
    return out


def _show(res: r.ShowResult):
    c = res.checkpoint
    yield Text.assemble("checkpoint ", (c.id, "bold"))
    yield _facts([
        ("when", _when(c.time)),
        ("what", _name(c.description)),
        ("kind", c.kind + (f", by tool {_name(c.tool)}" if c.tool else "")),
        ("files", f"{c.files}, {_size(c.added_bytes)} new"),
        ("session", _name(c.session_id) if c.session_id else None),
        ("tool call", _name(c.tool_call_id) if c.tool_call_id else None),
        ("note", _name(c.note) if c.note else None),
    ])
    yield from _skipped(c.skipped, c.nested_repos)
    if res.changes is None:
        yield Text(f"the first checkpoint ({plural(c.files, 'file')}): nothing before it to compare with; "
                   f"`chronos-git diff {c.id[:12]}` compares it with the workspace now")
    else:
        yield Text("what it recorded against the checkpoint before:")
        yield from _diff(res.changes)


_ACTION_STYLE = {"restore": "yellow", "create": "green", "delete": "red", "keep": "bold magenta",
                 "failed": "bold red", "skip": "dim"}


def _restore(res: r.RestoreResult):
    if res.kind:
        yield from _merged(res)
        return
    target = _checkpoint(res.target, res.restored_checkpoint)
    others = [f"{n} {what}" for n, what in ((res.kept, "kept"), (res.skipped, "skipped"),
                                            (res.failed, "failed")) if n]
    others_text = f" ({', '.join(others)})" if others else ""
    if res.code == "plan_changed":        # refused: the plan below is the one that would run now
        yield Text.assemble(("restore REFUSED", "bold red"),
                            f": the workspace changed since the preview, so nothing was changed. Restoring "
                            f"checkpoint {target} now would write {plural(res.files_changed, 'file')} and "
                            f"remove {res.untracked_removed}{others_text}:")
    elif res.dry_run:
        if not res.files_changed and not res.untracked_removed:
            yield Text(f"dry run: restoring checkpoint {target} would change nothing{others_text}; "
                       "the workspace already matches it. Nothing was changed.")
        else:
            yield Text(f"dry run: restoring checkpoint {target} would write {plural(res.files_changed, 'file')} and "
                       f"remove {res.untracked_removed}{others_text}. Nothing was changed.")
    else:
        head = (("restore INCOMPLETE", "bold red") if res.failed else ("restored", "bold"))
        yield Text.assemble(head, f" checkpoint {target}: {plural(res.files_changed, 'file')} written, "
                                  f"{res.untracked_removed} removed{others_text}")
    if res.kept:
        yield Text(f"  kept: {plural(res.kept, 'file')} whose current bytes could not be saved first; "
                   "--force overwrites them (their bytes are lost for good)", style="magenta")
    if res.plan:
        shown = res.plan[:200]
        why = any(it.reason for it in shown)
        t = _table("action", "path", *(["why"] if why else []))
        for it in shown:
            t.add_row(Text(it.action, style=_ACTION_STYLE.get(it.action, "")), _name(it.path),
                      *([_name(it.reason) if it.reason else ""] if why else []))
        yield _indent(t)
        if len(res.plan) > 200:
            yield Text(f"  ... and {len(res.plan) - 200} more (--json lists them all)", style="dim")
    if not res.dry_run and res.safety_checkpoint:
        yield Text(f"undo: chronos-git restore {res.safety_checkpoint[:12]}  "
                   "(the safety checkpoint taken just before)")
        yield Text("  or: chronos-git undo  (the newest restore, revert or redo not yet undone)", style="dim")


def _merged(res: r.RestoreResult):
    """An agent-only restore, a revert, an undo or a redo: what it took back, what it left."""
    calls = f" ({plural(len(res.calls or []), 'call')} taken back)" if res.kind in ("agent-only restore",
                                                                                     "revert") else ""
    counts = (f"{plural(res.files_changed, 'file')} written, {res.untracked_removed} removed, "
              f"{plural(res.conflicts, 'conflict')}")
    if res.code == "plan_changed":
        yield Text.assemble((f"{res.kind} REFUSED", "bold red"), ": the workspace changed since the preview, so "
                            f"nothing was changed. Now it would do: {counts}:")
    elif res.dry_run:
        yield Text(f"dry run: the {res.kind}{calls} would do: {counts}. Nothing was changed.")
    else:
        head = (f"{res.kind} INCOMPLETE", "bold red") if res.failed else (f"{res.kind} done", "bold")
        yield Text.assemble(head, f"{calls}: {counts}")
    for it in res.plan[:200]:
        style = "bold yellow" if it.action == "conflict" else _ACTION_STYLE.get(it.action, "")
        yield _indent(Text.assemble((f"{it.action:<9}", style), " ", _name(it.path)))
        if it.action == "conflict":
            for label, text in (("agent", it.agent), ("after", it.person)):
                if text:
                    yield _indent(Text(f"            {label}: {_name(text)}", style="dim"))
            if it.reason and (not it.agent or it.reason.startswith("conflict markers")):
                yield _indent(Text(f"            why: {_name(it.reason)}", style="dim"))
    if len(res.plan) > 200:
        yield Text(f"  ... and {len(res.plan) - 200} more (--json lists them all)", style="dim")
    if "--conflicts markers" not in (res.note or "") and any(
            it.action == "conflict" and not (it.reason or "").startswith("conflict markers") for it in res.plan):
        yield Text("  a conflict is left exactly as it is; --conflicts markers writes git-style markers into text "
                   "files instead", style="yellow")
    if res.note:
        yield Text(f"  {_name(res.note)}", style="dim")
    changed = res.after_checkpoint != res.safety_checkpoint        # one that changed nothing is not on the stack
    if not res.dry_run and res.safety_checkpoint and res.code != "plan_changed" and changed:
        back = "redo: chronos-git redo" if res.kind == "undo" else "undo: chronos-git undo"
        yield Text(f"{back}  (or restore the safety checkpoint {res.safety_checkpoint[:12]})")


# ---------------------------------------------------------------- journal
def _gate(gate: str | None) -> Text:
    return Text("open", style="green") if gate == "open" else Text("CLOSED", style="bold red")


def _ops(items) -> list[r.Operation]:
    """Operations as models (a service may hand over the journal's plain dicts)."""
    out = []
    for o in items:
        if isinstance(o, dict):
            try:
                o = r.Operation.model_validate(o)
            except ValueError:
                o = r.Operation.model_construct(**(dict.fromkeys(r.Operation.model_fields) | o))
        out.append(o)
    return out


def _waiting(unresolved, settled: list[r.Settled]):
    """Operations waiting for an operator, each once, with why (the settlement's, if any)."""
    unresolved = _ops(unresolved)
    if not unresolved:
        return
    why = {s.operation_id: s.why or (f"{s.result}: {s.evidence}" if s.evidence else s.result) for s in settled}
    yield Text(f"waiting for an operator ({len(unresolved)}):", style="bold red")
    t = _table("operation", "tool", "state", "why")
    for op in unresolved:
        reason = _name(op.reason) if op.reason else ("cut off by a crash" if op.state == "pending" else "")
        if op.operation_id in why:
            reason = f"{reason}; {_name(why[op.operation_id])}" if reason else _name(why[op.operation_id])
        t.add_row(op.operation_id[:12], _name(op.tool) or "-", op.state, reason or "-")
    yield _indent(t)
    op = unresolved[0].operation_id[:12] if len(unresolved) == 1 else "OP"
    yield Text(f"  settle it: chronos-git journal resolve {op} --outcome completed|not_applied --evidence TEXT\n"
               f"         or: chronos-git journal recover {op} --rollback  (back to its pre-checkpoint)")


def _settled(settled: list[r.Settled], waiting: set[str], title: str):
    done = [s for s in settled if s.operation_id not in waiting and s.result != "needs_operator"]
    if not done:
        return
    yield Text(title)
    t = _table("operation", "tool", "result", "evidence")
    for s in done:
        t.add_row(s.operation_id[:12], _name(s.tool) or "-", s.result.replace("_", " "),
                  _name(s.evidence or s.why or ""))
    yield _indent(t)


def _integrity(integrity: str) -> Text:
    return Text("ok") if integrity == "ok" else Text(f"IN DOUBT: {_name(integrity)}", style="bold red")


def _journal_status(res: r.JournalStatus):
    yield Text.assemble(f"journal: {plural(res.events, 'event')}, recovery gate ", _gate(res.gate), ", integrity ",
                        _integrity(res.integrity))
    if res.gate_reason and not res.unresolved:     # operations waiting are listed below, with their fix
        yield Text("  " + _name(res.gate_reason.removeprefix("chronos-git recovery gate is closed: ")), style="bold red")
    p = res.protection
    if p.state not in ("on", "ready"):
        yield Text(f"  protection {p.state.upper()}: {_name(p.reason)}" + (f" (fix: {p.fix})" if p.fix else ""),
                   style="bold red" if p.state == "off" else "yellow")
    if res.new_store:
        yield Text(f"  note: there was no store at {_name(res.new_store)}, so this made a new, empty one; if you "
                   "expected another, check --store / CHRONOS_GIT_STORE / store_dir", style="yellow")
    if res.healed:
        yield Text(f"  healed: {_name(res.healed)}")
    waiting = {op.operation_id for op in _ops(res.unresolved)}
    yield from _settled(res.settled_at_start, waiting, "settled by evidence at this start:")
    yield from _waiting(res.unresolved, res.settled_at_start)
    for op in _ops(res.running):
        yield Text(f"running: {op.operation_id[:12]} {_name(op.tool)} (pid {(op.owner or {}).get('pid')})")
    if res.replayable:
        op = res.replayable[0][:12] if len(res.replayable) == 1 else "OP"
        yield Text(f"replayable (not applied, can run exactly once): {', '.join(o[:12] for o in res.replayable)}"
                   f"; replay with: chronos-git journal recover {op} --replay")
    for x in res.remotes or []:
        yield Text.assemble(f"remote {_name(x.name)}: ", _remote_state(x))
    if not res.unresolved and not res.running and res.gate == "open":
        yield Text("nothing unresolved", style="green")


def _tampering(found: list[r.TamperFinding] | None):
    """The store audit's findings (engine/store_audit.py): each one, why, and its fix."""
    for f in found or []:
        yield Text(f"  tampering: {_name(f.what)} in {_name(f.where)}: {_name(f.why)}", style="bold red")
        yield Text(f"    fix: {_name(f.fix)}")


def _verify(res: r.VerifyResult):
    if res.tampering:
        yield Text(f"the store holds {plural(len(res.tampering), 'thing')} chronos-git never writes "
                   "(never honoured; stock git would):", style="bold red")
        yield from _tampering(res.tampering)
    if res.integrity != "ok":
        yield Text(f"journal verification FAILED (integrity {_name(res.integrity)}):", style="bold red")
        for p in res.problems:
            yield Text(f"  {_name(p)}")
        return
    trees = res.checkpoint_trees
    if trees.problems:
        yield Text("journal verified, but checkpoints hold entries git's fsck rejects:", style="bold red")
        for p in trees.problems:
            yield Text(f"  {_name(p)}")
        return
    extra = "; matches the exported head" if res.external_checkpoint else ""
    if res.tampering:
        yield Text(f"the journal itself verified: {plural(res.events, 'event')}, integrity ok", style="yellow")
        return
    yield Text(f"journal verified: {plural(res.events, 'event')}, integrity ok; "
               f"{plural(trees.checkpoints, 'checkpoint')} "
               f"clean ({res.seconds} s){extra}" + (f"; {_name(res.healed)}" if res.healed else ""),
               style="green")
    if res.remote:
        a = res.remote
        yield Text(f"remote {_name(a.remote)} holds host {_name(a.host)}'s journal up to {_short(a.remote_head)}"
                   + (f", {plural(a.behind, 'event')} behind (the next push sends "
                      f"{'it' if a.behind == 1 else 'them'})" if a.behind else
                      ", the local head"), style="green")


def _head(res: r.JournalHeadResult):
    c = res.checkpoint
    yield Text(f"journal head {c.head} (event #{c.seq}) of journal {c.journal_id}")
    yield Text("keep this elsewhere; later: chronos-git journal export --json > head.json, then "
               "chronos-git journal verify --head head.json", style="dim")


def _fields(e: r.Event) -> dict:
    """An event's fields beyond the common ones: those its model declares and the rest."""
    return {**{k: v for k in ("tool", "session_id", "subagent_id", "workspace") if (v := getattr(e, k)) is not None},
            **(e.model_extra or {})}


def _events(res: r.EventsResult | r.OperationEvents):
    if isinstance(res, r.OperationEvents):
        yield Text(f"operation {res.operation_id}: {plural(len(res.events), 'event')}")
        yield _operation_facts(res.events)
    elif not res.events:
        yield Text("no journal events")
        return
    # the session (and subagent) a call ran in: what `revert --session` / `--subagent` take
    sessions = any(e.session_id or e.subagent_id for e in res.events)
    t = _table(("#", "right"), "when", "kind", "operation", *(["session"] if sessions else []), "what")
    for e in res.events:
        extra = _fields(e)
        what = " ".join(str(extra[k]) for k in ("tool", "status", "outcome", "reason", "action") if extra.get(k))
        who = " ".join(filter(None, (e.session_id, e.subagent_id and f"subagent {e.subagent_id}")))
        t.add_row(str(e.seq), _when(e.timestamp_ns / 1e9), e.kind, (e.operation_id or "-")[:12],
                  *([_name(who)] if sessions else []), _name(what))
    yield _indent(t)


def _operation_facts(events: list[r.Event]) -> Padding:
    """What `journal show` says of the call itself (the JSON has it in its events): the tool,
    who ran and who settled it, its checkpoints before and after, its exit code, its outcome."""
    ev = [(e.kind, _fields(e)) for e in events]
    started = next((x for k, x in ev if k in ("started", "refused")), {})
    # a time-machine operation's checkpoint after is `after_checkpoint` (its post is its target)
    after = next((x for _, x in reversed(ev) if x.get("after_checkpoint") or x.get("post_checkpoint")), {})
    exit_code = next((x["exit_code"] for _, x in reversed(ev) if x.get("exit_code") is not None), None)
    actors = [str(started["actor"])] if started.get("actor") else []
    actors += [f"{k} by {x['actor']}" for k, x in ev if k != "started" and x.get("actor")]
    pre, post = started.get("pre_checkpoint"), after.get("after_checkpoint") or after.get("post_checkpoint")
    closed = any(k not in ("started", "maintenance") for k, _ in ev)     # no checkpoint after will come
    cps = (None if not pre and not post else
           f"{_short(pre)} (nothing changed)" if pre == post else
           f"before {_short(pre) if pre else 'none'}, after "
           f"{_short(post) if post else 'none' if closed else 'none yet'}")
    outcome = None
    for k, x in ev:
        if k == "returned":
            outcome = f"returned {x.get('status')}"
        elif k == "uncertain":
            outcome = f"unknown: {x.get('reason')}"
        elif k == "recovered":
            outcome = f"settled by evidence: {x.get('outcome')}"
        elif k == "resolved":
            outcome = f"resolved by an operator: {x.get('outcome')}"
        elif k == "replayed":
            outcome = f"replayed once as {str(x.get('replay_operation_id'))[:12]}"
        elif k == "refused":
            outcome = (f"refused before it ran ({x.get('code')}): "
                       + ", ".join(str(p.get("path")) for p in x.get("paths") or () if isinstance(p, dict)))
    changed = next((x["protected_changed"] for _, x in ev if x.get("protected_changed")), None)
    return _facts([
        ("tool", _name(str(started["tool"])) if started.get("tool") else None),
        ("workspace", _name(str(started["workspace"])) if started.get("workspace") else None),
        ("actor", _name("; ".join(actors)) if actors else None),
        ("session", _name(str(started["session_id"])) if started.get("session_id") else None),
        ("subagent", _name(" ".join(filter(None, (started.get("subagent_id"), started.get("parent_tool_call_id") and
                                                   f"(started by call {started['parent_tool_call_id']})"))))
         if started.get("subagent_id") or started.get("parent_tool_call_id") else None),
        ("checkpoints", cps),
        ("exit code", str(exit_code) if exit_code is not None else None),
        ("outcome", _name(outcome) if outcome else "none recorded yet (running, or cut off by a crash)"),
        ("changed chronos-git's own files", _name(", ".join(map(str, changed))) if changed else None),
    ])


def _resolve(res: r.ResolveResult):
    yield Text.assemble(f"operation {res.operation_id[:12]} resolved as {res.outcome} (event #{res.event}); "
                        "recovery gate ", _gate(res.gate))


def _recover(res: r.RecoverResult):
    waiting = {op.operation_id for op in _ops(res.unresolved)}
    done = [s for s in res.settled if s.operation_id not in waiting and s.result != "needs_operator"]
    yield Text(f"settled {plural(len(done), 'operation')} by evidence" if done else "nothing to settle by evidence")
    yield from _settled(res.settled, waiting, "settled:")
    for rp in res.replayed or ():
        yield Text(f"replayed {rp.operation_id[:12]} as {rp.replay_operation_id[:12]} ({rp.outcome}): "
                   f"{', '.join(_name(p) for p in rp.paths)}")
    for nr in res.not_replayed or ():
        yield Text(f"not replayed {nr.operation_id[:12]}: later calls changed its paths "
                   f"({_name(nr.evidence)}); it stays replayable "
                   f"once they are back at its pre-image")
    yield from _waiting(res.unresolved, res.settled)
    yield Text.assemble("recovery gate ", _gate(res.gate))


def _rollback(res: r.RollbackResult):
    if res.dry_run:
        yield Text(f"dry run: operation {res.operation_id[:12]} {_name(res.evidence)}; nothing changed")
    else:
        yield Text.assemble(f"operation {res.operation_id[:12]} rolled back ({_name(res.evidence)}); "
                            "recovery gate ", _gate(res.gate))
    if res.restore is not None:
        yield from _restore(res.restore)
    if res.kept:
        yield Text(f"kept (changed after the crash was found): {', '.join(_name(p) for p in res.kept[:20])}"
                   + (f" and {len(res.kept) - 20} more" if len(res.kept) > 20 else ""))


# ---------------------------------------------------------------- maintenance
def _compact(res: r.CompactResult):
    dropped = sum(len(d.checkpoints) for d in res.dropped)
    if res.dry_run:
        yield Text(f"dry run: retention would drop {plural(dropped, 'checkpoint')}, then pack the store "
                   f"(now {_size(res.size_before)}). Nothing was changed.")
    else:
        packed = f", {plural(res.objects_packed, 'object')} packed" if res.objects_packed is not None else ""
        yield Text(f"compacted the store: {_size(res.size_before)} -> {_size(res.size_after)}; "
                   f"{plural(dropped, 'checkpoint')} dropped by retention{packed} ({res.elapsed_s} s)")
    for d in res.dropped:
        verb = "would drop" if res.dry_run else "dropped"
        yield Text(f"  {_name(d.workspace)}: {verb} {len(d.checkpoints)}, {d.kept} kept "
                   f"(oldest kept {_short(d.boundary)})")
        t = _table("id", "when", "what")
        for c in d.checkpoints[:50]:
            t.add_row(_short(c.id), _when(c.time), _name(c.description))
        yield _indent(_indent(t))
        if len(d.checkpoints) > 50:
            yield Text(f"    ... and {len(d.checkpoints) - 50} more (--json lists them all)", style="dim")
    for p in res.pruned:
        verb = "would prune" if res.dry_run else "pruned"
        yield Text(f"  {_name(p.workspace)}: {verb} the whole workspace ({plural(p.checkpoints, 'checkpoint')}); "
                   f"its folder is gone since {_when(p.missing_since)}")


def _health(res: r.HealthResult):
    p = res.protection
    style = {"on": "bold green", "ready": "green", "degraded": "yellow", "off": "bold red"}[p.state]
    yield Text.assemble("protection ", (p.state.upper(), style), f": {_name(p.reason)}" if p.reason else "",
                        ("; but the recovery gate is CLOSED: protected calls are refused until an operator "
                         "reconciles (journal status)", "bold red") if res.gate == "closed" else "")
    if p.fix:
        yield Text(f"  fix: {p.fix}")
    yield from _tampering(res.tampering)
    yield from _held(res.settings_held)
    for n in res.capture_narrowed or ():
        yield Text(f"  capture narrowed: {_name(n.workspace)}: {', '.join(_name(x) for x in n.sources)} now "
                   f"ignore{'s' if len(n.sources) == 1 else ''} {n.count} of {n.files} captured paths "
                   f"({', '.join(_name(x) for x in n.sample[:3])}{' ...' if n.count > 3 else ''})", style="yellow")
    yield from _damaged(res.damaged, workspaces=True)
    for c in res.protected_changes or ():
        yield Text(f"  warning: {_name(c.tool or 'a call')} call {c.operation_id[:12]} ({_when(c.time)}) changed "
                   f"chronos-git's own files: {', '.join(_name(p) for p in c.paths)} "
                   f"(`chronos-git journal show {c.operation_id[:12]}`)", style="bold red")
    d = res.deployment
    if d is not None and d.backend != "local":
        yield Text(f"  terminal backend {_name(d.backend)}: {_name(d.summary)}",
                   style="yellow" if d.edits_here is not True else "")
    for problem in res.settings_problems:
        yield Text(f"  settings problem: {_name(problem)}", style="yellow")
    if not res.store_exists:
        if p.state != "ready" and res.store not in (p.reason or ""):    # else the reason named it
            yield Text(f"store: {_name(res.store)} (not created yet: nothing has been checkpointed)")
        return
    j = res.journal
    w = res.workspace
    yield _facts([
        ("store", f"{_name(res.store)} ({_size(res.store_bytes)}, {plural(res.workspaces, 'workspace')})"),
        ("journal", Text.assemble(f"{plural(j.events, 'event')}, integrity ", _integrity(j.integrity),
                                  f"; {_name(j.healed)}" if j.healed else "") if j else None),
        ("gate", Text.assemble(_gate(res.gate), f", {res.unresolved} unresolved" if res.unresolved else
                               ", nothing unresolved" if res.gate == "open" or not j or j.integrity == "ok"
                               else " while the journal's integrity is in doubt") if res.gate else None),
        ("last snapshot", _last_snapshot(res.last_snapshot) if res.last_snapshot else "none yet"),
        ("workspace", f"{_name(w.root)}: {plural(w.checkpoints, 'checkpoint')}"
                      + (f", newest {_checkpoint(w.latest)}" if w.latest else "") if w else None),
        ("watcher", _watcher(w.watcher) if w and w.watcher and w.watcher.enabled else None),
        ("", _first_snapshot(w.background) if w and w.background else None),
        ("", _seed_text(w.first_snapshot_seed) if w and w.first_snapshot_seed else None),
        ("budget", _budget(res.store_budget) if res.store_budget else None),
        ("consolidation", _consolidation(res.consolidation) if res.consolidation else None),
        ("deferred", _name(res.deferred) if res.deferred else None),
        ("background", "; ".join(_job(j) for j in res.jobs) if res.jobs else None),
        ("operator key", f"{res.operator_key}: operator acts are signed with it" if res.operator_key
         else _name(res.operator_key_note) if res.operator_key_note else None),
    ] + [(f"remote {_name(x.name)}", _remote_state(x)) for x in res.remotes or []])


def _held(held: list[r.HeldSetting] | None):
    for h in held or ():
        yield Text(f"  held for the operator: {h.key} = {_value(h.written)} in config.yaml; {_value(h.in_force)} "
                   f"stays in force ({h.why})", style="yellow")


def _value(v) -> str:
    return _name(json.dumps(v)) if not isinstance(v, str) else _name(v)


def _settings(res: r.SettingsRecord):
    if res.accepted:
        yield Text(f"accepted: {', '.join(res.accepted)} now in force (journaled)", style="green")
    elif not res.recorded:
        yield Text("no record of the settings in force yet (it is made at the next start in the profile's store)")
    if res.held:
        yield Text(f"{plural(len(res.held), 'weakening change')} of config.yaml waiting for the operator:",
                   style="yellow")
        yield from _held(res.held)
        yield Text(f"  if you made them: `{res.accept_command}` (from your own terminal); if not: undo them in "
                   "config.yaml")
    elif res.recorded and not res.accepted:
        yield Text("nothing held: config.yaml's settings are in force")
    yield _facts([("record", f"journal event {res.seq}, fingerprint {res.fingerprint}" if res.recorded else None),
                  ("this process", f"fingerprint {res.effective_fingerprint}")]
                 + [(k, _value(v)) for k, v in sorted(res.in_force.items())])


def _capture_accepted(res: r.CaptureAccepted):
    if not res.accepted:
        yield Text(f"{_name(res.workspace)}: {_name(res.note or 'nothing to accept')}")
        return
    yield Text(f"accepted: {_name(res.workspace)} captures less ({res.count} paths now ignored by "
               f"{', '.join(_name(x) for x in res.sources or ())}); journaled", style="green")


def _job(j: r.BackgroundJob) -> str:
    state = "running" if j.running else "failed" if j.error else "done"
    where = _on_a_thread(j.runs_in)
    return f"{j.kind} {state}" + (f" ({_name(j.error)})" if j.error else "") + (f", {where}" if where else "")


def _budget(b: r.StoreBudget) -> str:
    used = f"{_size(b.used_bytes)} new bytes kept across workspaces"
    if b.budget_bytes:
        used += f", {100 * b.used_bytes / b.budget_bytes:.0f}% of store_budget_mb ({_size(b.budget_bytes)})"
    else:
        used += " (no store budget)"
    if b.orphans:
        used += f"; {plural(b.orphans, 'workspace folder')} gone (pruned after orphan_days)"
    return used


def _on_a_thread(runs_in: str | None) -> str:
    """Where background work runs, when not in a child process (and why)."""
    return f"on a thread ({_name(runs_in)})" if runs_in and runs_in.startswith("this process") else ""


def _watcher(w: r.WatcherState) -> Text:
    """The inotify dirty set: watching, or degraded by the watch limit (what it costs, the fix)."""
    whose = f" (process {w.process})" if w.process else ""
    if w.unwatched_dirs:
        return Text(f"{w.mode}{whose}: {w.watches} directories watched, {w.unwatched_dirs} not (every snapshot "
                    f"walks them); fix: `{w.fix}`", style="yellow")
    return Text(f"{w.mode or 'on'}{whose}: {w.watches} directories watched")


def _first_snapshot(b: r.BackgroundJob) -> Text | None:
    """This process's background first snapshot: running (where), or what went wrong."""
    thread = _on_a_thread(b.runs_in)
    if b.running:
        p = b.progress or {}
        done = (f": {p.get('phase')} {p.get('files_done')}/{plural(p.get('files_total'), 'file')}"
                if p.get("files_total") else "")
        return Text(f"first snapshot running {thread or 'in a child process'}{done}")
    if b.error:
        return Text(f"the first snapshot failed{' ' + thread if thread else ''}: {_name(b.error)} "
                    "(the next call starts it again)", style="yellow")
    return Text(f"first snapshot taken {thread}") if thread else None


def _seed_text(seed: dict) -> str:
    if seed.get("adopted"):
        return (f"first snapshot adopted the workspace's git index ({plural(seed['seeded_files'], 'file')} "
                f"vouched for, {plural(seed.get('changed_files', 0), 'file')} read, "
                f"{plural(seed.get('linked_packs', 0), 'pack')} linked, "
                f"{plural(seed.get('loose_copied', 0), 'loose object')} copied)")
    why = f"; its index not adopted: {_name(str(seed['adopt_note']))}" if seed.get("adopt_note") else ""
    if seed.get("seeded_files"):
        return (f"first snapshot took {plural(seed['seeded_files'], 'file')} from the workspace's git index "
                f"({plural(seed.get('linked_packs', 0), 'pack')} linked{why})")
    return f"first snapshot hashed every file (git index not used: {_name(str(seed.get('note')))}{why})"


def _consolidation(c: r.Consolidation) -> Text:
    if c.error:
        return Text(f"{plural(c.pending_packs, 'pack')} of a first import not compressed yet; the last try failed: "
                    f"{_name(c.error)} (retried by the next start or `chronos-git compact`)", style="yellow")
    if c.running:
        p = c.progress or {}
        done = (f", {p.get('phase')}" + (f" {p.get('objects_done')}/{plural(p.get('objects_total'), 'object')}"
                                          if p.get("objects_total") else "")) if p else ""
        where = _on_a_thread(c.runs_in) or "in a child process"
        return Text(f"compressing a first import in the background, {where} ({plural(c.pending_packs, 'pack')}{done})")
    if c.pending_packs:
        return Text(f"{plural(c.pending_packs, 'pack')} of a first import not compressed yet (the next start or "
                    "`chronos-git compact` does it)")
    last = c.last
    return Text(f"first import compressed: {_size(last.bytes_before)} -> {_size(last.bytes_after)} "
                f"in {last.seconds:.1f} s" if last else "done")


def _remote_state(x: r.RemoteInfo) -> Text:
    if x.diverged:
        return Text("DIVERGED: " + _name(x.diverged), style="bold red")
    if x.last_error and x.failing_since:
        return Text(f"failing since {_when(x.failing_since)}: {_name(x.last_error)}", style="yellow")
    if x.last_error:                   # pushed, but some checkpoints were held back
        return Text(f"last push {_when(x.last_push or 0)}, incomplete: {_name(x.last_error)}", style="yellow")
    if not x.last_push:
        return Text("not pushed yet")
    return Text(f"last push {_when(x.last_push)}"
                + (f", {plural(x.behind, 'event')} behind" if x.behind else ", current"))


def _last_snapshot(ls: dict) -> str:
    if ls.get("error"):
        return f"failed at {_when(ls['time'])}: {_name(str(ls['error']))}"
    what = f"{_short(ls.get('checkpoint'))} at {_when(ls['time'])} ({ls.get('kind', '-')}"
    what += ", partial)" if ls.get("partial") and ls.get("kind") != "partial" else ")"
    if ls.get("note"):
        what += f"; {_name(str(ls['note']))}"
    return what


def _call(res: r.CallRecord):
    if isinstance(res, r.RunResult) and res.read_only:
        yield Text(f"ran (read-only tool, not journaled): exit code {res.exit_code}")
        return
    if isinstance(res, r.WriteResult):
        what = f"wrote {_name(res.path)} ({plural(res.bytes_written, 'byte')})"
    else:
        what = "ran" + (f": exit code {res.exit_code}" if res.exit_code is not None else ": the command did not start")
    pre, post = res.pre_checkpoint, res.post_checkpoint
    cps = (f"checkpoint {_short(pre)} (nothing changed)" if pre and pre == post else
           f"checkpoint before {_short(pre)}, after {_short(post)}")
    yield Text(f"{what}; journaled as operation {(res.operation_id or '-')[:12]}; {cps}")
    note = (res.snapshot or {}).get("note")
    if note:
        yield Text(f"  {_name(str(note))}", style="dim")
    if (res.snapshot or {}).get("kind") == "failed":       # the call ran without its checkpoint: say so
        yield Text(f"  warning: no checkpoint was taken before this call ({_name(str(res.snapshot.get('error')))}); "
                   "it is journaled, but cannot be rolled back from a checkpoint", style="bold yellow")
    if res.outcome == "uncertain":
        yield Text(f"  outcome unknown ({_name(res.reason)}): the recovery gate is closed", style="bold red")
    if res.gate_warning:
        yield Text(f"  warning: {_name(res.gate_warning)}", style="yellow")
    if res.protected_changed:
        yield Text(f"  warning: this call changed chronos-git's own files: "
                   f"{', '.join(_name(p) for p in res.protected_changed)} (recorded in its outcome; "
                   f"`chronos-git journal show {(res.operation_id or '-')[:12]}`)", style="bold red")
    if isinstance(res, r.WriteResult) and pre and post and pre != post:
        yield Text(f"undo: chronos-git restore {pre[:12]} --path {shell_word(res.path)}")


def _workspaces(res: r.WorkspacesResult):
    t = _table("workspace", ("checkpoints", "right"), "newest")
    for w in res.workspaces:
        t.add_row(_name(w.root), str(w.checkpoints), _when(w.latest.time) if w.latest else "-")
    yield t


def _report(res):
    word = {"ok": "green", "warn": "yellow", "bad": "red"}.get(res.level, "")   # a style
    yield Text.assemble(("report written: ", "bold"), _name(res.path))
    yield Text.assemble("verdict: ", (res.verdict, word))


def _remote_added(res: r.RemoteAdded):
    what = "journal and checkpoints" if res.snapshots else "journal only (event metadata and hashes, no file contents)"
    yield Text(f"remote {_name(res.remote)} added: {_name(res.url)}" + (" (created)" if res.created else "")
               + f"; pushes {what} as host {_name(res.host)}")
    if res.warning:
        yield Text(f"warning: {_name(res.warning)}", style="yellow")


def _remotes(res: r.RemotesResult):
    if not res.remotes:
        yield Text(f"no remotes (host {_name(res.host)}); add one: chronos-git remote add NAME URL")
        return
    t = _table("remote", "url", "pushes", "last push", "state")
    for x in res.remotes:
        t.add_row(_name(x.name), _name(x.url), "journal + checkpoints" if x.snapshots else "journal",
                  _when(x.last_push) if x.last_push else "never", _remote_state(x))
    yield t
    yield Text(f"host id: {_name(res.host)}", style="dim")


def _pushed(res: r.PushResult):
    moved = f"{plural(len(res.updated), 'ref')} updated" if res.updated else "already current"
    yield Text(f"pushed to {_name(res.remote)} as host {_name(res.host)}: journal at {_short(res.journal_head)}, "
               f"{moved} ({res.seconds} s)")
    for ref in res.updated:
        yield Text(f"  {_name(ref)}", style="dim")


def _fetched(res: r.FetchResult):
    if not res.hosts:
        yield Text(f"remote {_name(res.remote)} holds no chronos-git hosts yet")
        return
    for h in res.hosts:
        yield Text(f"host {_name(h.host)}: {plural(h.events, 'journal event')}, head {_short(h.journal_head)}")
        t = _table("workspace", ("checkpoints", "right"), "latest")
        for w in h.workspaces:
            t.add_row(_name(w.path or w.id), str(w.checkpoints), w.latest or "-")
        if h.workspaces:
            yield _indent(t)
    yield Text("restore one: chronos-git restore <latest id> --workspace NEW_DIR", style="dim")


def _operator_key(res: r.OperatorKeyInfo):
    if res.changed:
        yield Text(f"operator key {res.fingerprint} registered" + (f", replacing {res.replaced}" if res.replaced
                                                                   else "") + ": operator acts are signed with it",
                   style="green")
    elif res.registered:
        yield Text(f"operator key {res.fingerprint}: operator acts are signed with it")
    else:
        yield Text(_name(res.note), style="yellow")
    if res.registered:
        yield _facts([("key file", res.key_file), ("registered", f"journal event {res.since_seq}")])
    yield from _tampering(res.unsigned_acts)


def _countersigned(res: r.Countersigned):
    yield Text(f"journal event {res.event_seq} ({_name(res.what)}) countersigned as yours (event {res.seq})",
               style="green")


def _none(res: r.Result):
    return iter(())


# most specific first; an ErrorResult (a Refusal too) is only its one error line
_RENDERERS = [
    (r.ErrorResult, _none), (r.SnapshotResult, _snapshot), (r.LogResult, _log), (r.ShowResult, _show),
    (r.DiffResult, _diff), (r.RestoreResult, _restore), (r.JournalStatus, _journal_status),
    (r.VerifyResult, _verify), (r.JournalHeadResult, _head), (r.EventsResult, _events),
    (r.OperationEvents, _events), (r.ResolveResult, _resolve), (r.RecoverResult, _recover),
    (r.RollbackResult, _rollback), (r.CompactResult, _compact), (r.HealthResult, _health),
    (r.CallRecord, _call), (r.WorkspacesResult, _workspaces), (r.RemoteAdded, _remote_added),
    (r.RemotesResult, _remotes), (r.PushResult, _pushed), (r.FetchResult, _fetched),
    (r.SettingsRecord, _settings), (r.CaptureAccepted, _capture_accepted),
    (r.OperatorKeyInfo, _operator_key), (r.Countersigned, _countersigned),
    (r.RemoteRemoved, lambda res: iter([Text(f"remote {_name(res.remote)} removed (what it holds stays there)")])),
]


def _late_renderers():
    """Results of optional parts (jinja2 is imported only when a report is written)."""
    try:
        from ..report.build import ReportWritten
    except ImportError:
        return []
    return [(ReportWritten, _report)]
