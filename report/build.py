"""Gather what the service says about a store, then render it as one HTML file.

Rules that make the file safe to open and to hand on:

* self-contained: inline CSS, no script, no external reference, and a
  Content-Security-Policy that forbids loading anything, in case a browser
  ever found something to load;
* every string comes from the store (descriptions, tool names, evidence are
  written by agents and operators) and is escaped (Jinja2 autoescape), made
  visible (control and bidi characters as `\\uXXXX`) and clipped with a note
  of how much was left out, so no value can break the page;
* names that are not UTF-8 show their display form and their exact bytes;
* bounded: the newest `limit` events, `checkpoints` per workspace, at most
  MAX_WORKSPACES workspaces, so a huge store still gives a readable file;
* read-only: no store is created, a store without a journal is not given
  one (opening the journal writes its first event), and the file is never
  written into the store.  What the service does on any command still
  happens: its once-per-process start settles calls cut off by a crash by
  evidence, and `journal verify` notes when it last verified the chain (or
  raises the alarm on a damaged one).
"""
from __future__ import annotations

import fnmatch
import json
import os
import unicodedata
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .. import __version__
from ..engine.codec import from_b64, human
from ..engine.fsutil import tree_size
from ..engine.layout import REPORT_NAME_GLOB
from ..engine.wording import plural
from ..service.results import Result
from ..settings import current_folder

TEMPLATES = Path(__file__).resolve().parent / "templates"
WINDTUNNEL = Path("chronos") / "windtunnel-last.json"
WINDTUNNEL_MAX_BYTES = 5 << 20
MAX_WORKSPACES = 50
MAX_BREACHES = 50
NOTABLE = {"uncertain", "recovered", "resolved", "replayed"}


class ReportWritten(Result):
    """What `chronos-git report` and `/chronos report` answer."""
    path: str
    verdict: str
    level: str


# ------------------------------------------------------------------ gather
def gather(svc, *, limit: int = 500, checkpoints: int = 20) -> dict:
    """Everything the template shows, as plain data (the services' wire documents)."""
    if limit < 1 or checkpoints < 1:
        raise ValueError("limit and checkpoints must be at least 1")
    notes: list[str] = []                     # what could not be read, said in the report

    def attempt(what: str, fn: Callable, default=None):
        try:
            return fn()
        except Exception as exc:              # a damaged store still gets a report
            notes.append(f"{what} failed: {type(exc).__name__}: {exc}")
            return default

    store = str(svc.store_dir)
    exists = svc.store_exists()
    journal = exists and attempt("looking for the journal", lambda: _has_journal(svc), False)
    verify = status = health = None
    events: list[dict] = []
    if journal:
        verify = attempt("journal verify", lambda: svc.journal_verify().wire())
        status = attempt("journal status", lambda: svc.journal_status().wire())
        health = attempt("health", lambda: svc.health().wire())
        # operations are grouped from a wider window than the timeline shows
        events = attempt("reading the journal", lambda: svc.journal_log(limit * 20).wire()["events"], [])
    typed = attempt("listing workspaces", lambda: svc.workspaces().workspaces, []) if exists else []
    by_op = _by_op(events)
    for ev in events:                          # the timeline shows an outcome with its call's tool
        ev["summary"] = summary(ev, by_op)
        ev["op_tool"] = next((e.get("tool") for e in by_op.get(ev.get("operation_id"), ())
                              if e["kind"] == "started"), None)
    total_events = (verify or {}).get("events") or (status or {}).get("events") or len(events)
    ctx = {
        "generated": _iso(datetime.now(timezone.utc)),
        "version": __version__,
        "store": store,
        "exists": exists,
        "journal": journal,
        "verify": verify,
        "status": status,
        "protection": (health or {}).get("protection") or svc.protection().wire(),
        "health": health,
        "settings": svc.settings.model_dump(),
        "operations": _operations(by_op, status),
        "scanned": len(events),
        "timeline": events[:limit],
        "total_events": total_events,
        "left_out": max(0, total_events - min(limit, len(events))),
        "workspaces": [attempt(f"checkpoints of {human(w.root)}", lambda w=w: _workspace(svc, w, checkpoints),
                               {"root": human(w.root), "error": True})
                       for w in typed[:MAX_WORKSPACES]],
        "workspaces_left_out": max(0, len(typed) - MAX_WORKSPACES),
        "store_bytes": health.get("store_bytes") if health else tree_size(os.path.join(store, "objects")) if exists else None,
        "maintenance": next((e for e in events if e["kind"] == "maintenance"), None),
        "store_budget": (health or {}).get("store_budget"),
        "consolidation": (health or {}).get("consolidation"),
        "windtunnel": _windtunnel(Path(store)) if exists else None,
        "remotes": [{**r, "when": _iso(datetime.fromtimestamp(r["last_push"], timezone.utc))
                     if isinstance(r.get("last_push"), (int, float)) else "never"}
                    for r in (health or {}).get("remotes") or []],
        "notes": notes,
    }
    ctx["verdict"] = _verdict(ctx)
    return ctx


def _has_journal(svc) -> bool:
    """Without opening it: the service's journal writes its genesis event when it opens none.
    A missing witness beside a journal ref is tampering, so both are looked at."""
    return svc.journal_exists()


def _by_op(events: list[dict]) -> dict[str, list[dict]]:
    """Operation id -> its events, oldest first."""
    by_op: dict[str, list[dict]] = {}
    for ev in reversed(events):
        if ev.get("operation_id"):
            by_op.setdefault(ev["operation_id"], []).append(ev)
    return by_op


def _operations(by_op: dict, status: dict | None) -> dict[str, list[dict]]:
    """Open operations, and closed ones that needed recovery or an operator, newest first."""
    open_ops = {o["operation_id"]: o for o in (status or {}).get("unresolved", []) + (status or {}).get("running", [])}
    groups: dict[str, list[dict]] = {"unresolved": [], "recovered": [], "resolved": []}
    for oid in [*open_ops, *(o for o in by_op if o not in open_ops)]:
        evs = by_op.get(oid, [])
        kinds = {e["kind"] for e in evs}
        group = ("unresolved" if oid in open_ops else "resolved" if "resolved" in kinds
                 else "recovered" if kinds & NOTABLE else None)
        if group:
            groups[group].append(_operation(oid, evs, open_ops.get(oid), by_op))
    for ops in groups.values():
        ops.sort(key=lambda o: -o["last_seq"])
    return groups


def _operation(oid: str, evs: list[dict], open_op: dict | None, by_op: dict) -> dict:
    started = next((e for e in evs if e["kind"] == "started"), None)
    src = started or open_op or {}
    evidence = next((e["evidence"] for e in reversed(evs) if isinstance(e.get("evidence"), list)), None)
    if evidence is None and open_op and isinstance(open_op.get("evidence"), list):
        evidence = open_op["evidence"]
    return {
        "id": oid, "tool": src.get("tool"), "src": src, "state": (open_op or {}).get("state", "closed"),
        "started": _event_time(started) if started else None,
        "last": _event_time(evs[-1]) if evs else None,
        "last_seq": evs[-1]["seq"] if evs else (open_op or {}).get("started_seq") or 0,
        "pre_checkpoint": src.get("pre_checkpoint"),
        "steps": [{"seq": e["seq"], "time": _event_time(e), "kind": e["kind"], "text": summary(e, by_op),
                   "actor": e.get("actor"), "evidence": e.get("evidence") if isinstance(e.get("evidence"), str) else None}
                  for e in evs if e["kind"] != "started"],
        "evidence": [dict(i, at=_at(i)) for i in evidence if isinstance(i, dict)] if evidence else [],
        "declared": (started or {}).get("declared") or [],
        "reason": (open_op or {}).get("reason"),
        "seen_start": started is not None,
    }


def _at(item: dict) -> str:
    return "post-image" if item.get("at_post") else "pre-image" if item.get("at_pre") else "neither"


def summary(ev: dict, by_op: dict | None = None) -> str:
    """One line for an event (the timeline and an operation's steps)."""
    kind = ev.get("kind")
    if kind == "genesis":
        return f"journal {ev.get('journal_id')} created"
    if kind == "started":
        return f"intent: {ev.get('tool')}" + (f" (replay of {str(ev['replay_of'])[:12]})" if ev.get("replay_of") else "")
    if kind == "returned":
        bits = [f"returned {ev.get('status')}"]
        if ev.get("exit_code") is not None:
            bits.append(f"exit code {ev['exit_code']}")
        if ev.get("post_checkpoint"):
            bits.append(f"post-checkpoint {str(ev['post_checkpoint'])[:12]}")
        if ev.get("protected_changed"):
            bits.append(f"CHANGED chronos-git's own files: {', '.join(map(str, ev['protected_changed']))}")
        return ", ".join(bits)
    if kind == "uncertain":
        return f"outcome unknown: {ev.get('reason')}"
    if kind == "recovered":
        return (f"settled by evidence: {ev.get('outcome')}" + (" (replayable once)" if ev.get("replayable") else "")
                + (f"; {ev['note']}" if ev.get("note") else ""))
    if kind == "resolved":
        return f"resolved by {ev.get('actor') or 'an operator'}: {ev.get('outcome')}"
    if kind == "replayed":
        new = str(ev.get("replay_operation_id"))
        after = [e for e in (by_op or {}).get(new, []) if e["kind"] != "started"]
        return f"replayed once as {new[:12]}" + (f" ({summary(after[-1])})" if after else "")
    if kind == "maintenance":
        return f"maintenance: {ev.get('action')}"
    if kind == "refused":
        paths = ", ".join(str(p.get("path")) for p in ev.get("paths") or () if isinstance(p, dict))
        return f"refused before it ran ({ev.get('code')}): {ev.get('tool')} on {paths}"
    return str(kind)


def _workspace(svc, w, n: int) -> dict:
    """The newest `n` checkpoints of one workspace (every line of its timeline), each with its
    diffstat against its parent in the chain (the oldest kept one has none)."""
    cps = svc.log(w.root, n + 1, all=True).checkpoints
    rows = []
    for cp, parent in zip(cps[:n], [*cps[1:], None]):
        row = {"cp": cp.wire(), "diff": None}
        if parent is not None:
            row["diff"] = svc.diff(w.root, parent.id, cp.id, patch=False).wire()
        rows.append(row)
    info = w.wire()
    return {"root": info["root"], "root_b64": info.get("root_b64"), "exists": info["exists"],
            "total": info["checkpoints"], "rows": rows, "error": False}


def _windtunnel(store: Path) -> dict | None:
    """The last wind tunnel run (written by the wind tunnel), shown generically."""
    path = store / WINDTUNNEL
    try:
        with open(path, "rb") as fh:
            raw = fh.read(WINDTUNNEL_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"path": str(path), "error": f"unreadable: {exc}"}
    if len(raw) > WINDTUNNEL_MAX_BYTES:
        return {"path": str(path), "error": f"larger than {WINDTUNNEL_MAX_BYTES} bytes: not read"}
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        return {"path": str(path), "error": f"not valid JSON: {exc}"}
    if not isinstance(doc, dict):
        return {"path": str(path), "error": "not a JSON object"}
    suites = doc.get("suites") if isinstance(doc.get("suites"), dict) else {}
    columns: list[str] = []
    rows = []
    total = 0
    for name, suite in suites.items():
        suite = suite if isinstance(suite, dict) else {"value": suite}
        columns += [k for k, v in suite.items() if k != "breaches" and _scalar(v) and k not in columns]
        breaches = suite.get("breaches") if isinstance(suite.get("breaches"), list) else []
        total += len(breaches)
        rows.append({"name": name, "values": suite, "breaches": breaches[:MAX_BREACHES],
                     "breaches_left_out": max(0, len(breaches) - MAX_BREACHES)})
    return {"path": str(path), "error": None, "columns": columns, "suites": rows, "total_breaches": total,
            "facts": {k: v for k, v in doc.items() if k != "suites" and _scalar(v)}}


def _scalar(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _verdict(ctx: dict) -> dict:
    """(level, word, why): ok, warn (intact, but something needs an operator), bad, none."""
    if not ctx["exists"]:
        return {"level": "none", "word": "NO STORE",
                "why": f"There is no chronos-git store at {ctx['store']}: nothing has been recorded yet."}
    if not ctx["journal"]:
        return {"level": "none", "word": "NO JOURNAL YET",
                "why": "The store holds checkpoints but no journal: no protected call has been recorded, "
                       "so there is nothing to verify yet."}
    v = ctx["verify"]
    if v is None:
        return {"level": "bad", "word": "NOT VERIFIED", "why": "; ".join(ctx["notes"]) or "journal verify failed"}
    trees = (v.get("checkpoint_trees") or {}).get("problems") or []
    if v["integrity"] != "ok" or trees:
        problems = v.get("problems") or []
        return {"level": "bad", "word": "PROBLEMS FOUND",
                "why": v["integrity"] if v["integrity"] != "ok" else f"checkpoint trees: {trees[0]}",
                "count": len(problems) + len(trees)}
    diverged = [r for r in (ctx["health"] or {}).get("remotes") or [] if r.get("diverged")]
    if diverged:
        return {"level": "bad", "word": "REMOTE DIVERGED",
                "why": f"remote {diverged[0]['name']}: {diverged[0]['diverged']} (section 5)"}
    unresolved = (ctx["status"] or {}).get("unresolved") or []
    if unresolved:
        return {"level": "warn", "word": "INTEGRITY OK · ACTION NEEDED",
                "why": f"{plural(len(unresolved), 'unresolved operation')}: the recovery gate is closed until an "
                       "operator reconciles them (section 2)."}
    if ctx["protection"].get("state") not in ("on", "ready"):
        return {"level": "warn", "word": "INTEGRITY OK · PROTECTION " + ctx["protection"]["state"].upper(),
                "why": ctx["protection"].get("reason") or ""}
    return {"level": "ok", "word": "INTEGRITY OK",
            "why": f"{plural(v['events'], 'journal event')} and "
                   f"{plural((v.get('checkpoint_trees') or {}).get('trees', 0), 'checkpoint tree')} "
                   "verified; nothing is unresolved."}


# ------------------------------------------------------------------ render
def render(ctx: dict) -> str:
    import jinja2                              # a Hermes dependency; only the report needs it
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined)
    env.globals.update(clip=clip, exact=exact, short=lambda s: str(s or "")[:12], size=size,
                       event_time=_event_time, plural=plural)
    return env.get_template("report.html.j2").render(**ctx)


def build(svc, *, limit: int = 500, checkpoints: int = 20) -> str:
    """The report of `svc`'s store as one HTML document."""
    return render(gather(svc, limit=limit, checkpoints=checkpoints))


def default_name(ctx: dict) -> str:
    jid = ((ctx.get("verify") or {}).get("journal_id") or "")[:8] or "no-journal"
    stamp = ctx["generated"].replace("-", "").replace(":", "").replace(" ", "T")
    return f"chronos-git-report-{jid}-{stamp}.html"


def default_folder(svc) -> Path:
    """Where a report goes unless told: `chronos-git-reports` beside the store, outside every
    workspace (one written into the current folder, usually the workspace, was deleted by the
    next clean restore).  `/chronos report` writes there too."""
    return Path(svc.store_dir).parent / "chronos-git-reports"


def written(svc, out: Path | None = None, *, workspace: str | os.PathLike | None = None,
            **kw) -> ReportWritten:
    """Render and write; `out` a file or a folder (default: `default_folder`, made if need be).

    Never into the store; never a file a checkpoint would capture: a report's own names
    (chronos-git-report-*.html) are in every workspace's ignore rules, so a folder given as
    `out`, even inside a workspace, is fine, but a file of another name inside one of the
    store's workspaces (or `workspace`) is refused."""
    path = default_folder(svc) if out is None else Path(out)
    if not path.is_absolute():             # the answer says where the file is, in full
        path = Path(current_folder(f"the report path {os.fspath(path)!r} is relative: give an absolute one"),
                    path)
    folder = out is None or path.is_dir()
    store = Path(svc.store_dir).resolve()
    if path.resolve().is_relative_to(store):
        raise ValueError(f"{path} is inside the store {store}: a report is never written there; "
                         "pass --out with a path elsewhere")
    if not folder and not fnmatch.fnmatchcase(path.name, REPORT_NAME_GLOB):
        inside = _workspace_holding(svc, path, workspace)
        if inside is not None:
            raise ValueError(f"{path} is inside the workspace {inside}: its next checkpoint would capture the "
                             "report and a restore could delete it. Name the file "
                             f"{REPORT_NAME_GLOB.replace('*', '<anything>')} (checkpoints never hold those), "
                             "give a folder instead (the report gets such a name), or a path outside the "
                             "workspace; without --out it goes to " + str(default_folder(svc)))
    if out is None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"could not create the report folder {path}: {exc.strerror or exc} "
                             "(pass --out with a path elsewhere)") from None
    ctx = gather(svc, **kw)
    if folder:
        path = path / default_name(ctx)
    try:
        path.write_text(render(ctx), encoding="utf-8")
    except OSError as exc:
        if not path.parent.is_dir():
            raise ValueError(f"could not write the report to {path}: the folder {path.parent} does not exist "
                             "(create it, or pass --out with a path in an existing folder)") from None
        raise ValueError(f"could not write the report to {path}: {exc.strerror or exc} "
                         "(pass --out with a path elsewhere)") from None
    return ReportWritten(path=str(path), verdict=ctx["verdict"]["word"], level=ctx["verdict"]["level"])


def _workspace_holding(svc, path: Path, workspace) -> str | None:
    """The root of the store's workspace (or of `workspace`) that `path` is inside, if any."""
    roots = [os.fspath(workspace)] if workspace else []
    if svc.store_exists():
        roots += [w.root for w in svc.workspaces().workspaces]
    target = path.resolve()
    return next((root for root in roots if target.is_relative_to(Path(root).resolve())), None)


def write(svc, out: Path | None = None, **kw) -> Path:
    """The report written to `out` (default `<beside the store>/chronos-git-reports/chronos-git-report-
    <journal>-<UTC time>.html`)."""
    return Path(written(svc, out, **kw).path)


# ------------------------------------------------------------------ template helpers
_INVISIBLE = {"Cc", "Cf", "Zl", "Zp"}         # controls, bidi overrides, zero-width and line separators


def clip(value, n: int = 300) -> tuple[str, int]:
    """(text to show, characters left out): invisible characters shown as escapes."""
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                                    default=str)
    more = max(0, len(text) - n)
    text = text[:n]
    if any(unicodedata.category(c) in _INVISIBLE for c in text):
        text = "".join("↵" if c == "\n" else f"\\u{ord(c):04x}" if unicodedata.category(c) in _INVISIBLE else c
                       for c in text)
    return text, more


def exact(b64: str | None) -> str | None:
    """A non-UTF-8 name's exact bytes, readable: `caf\\xe9.txt`."""
    if not b64:
        return None
    try:
        return human(from_b64(b64))
    except ValueError:
        return None


def size(n) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _event_time(ev: dict | None) -> str:
    ns = (ev or {}).get("timestamp_ns")
    return _iso(datetime.fromtimestamp(ns / 1e9, timezone.utc)) if isinstance(ns, int) else ""


def _iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M:%SZ")
