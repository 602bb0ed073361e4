"""Protected calls: durable intent before dispatch, exactly one outcome after.

Every protected path (the Hermes middleware, `chronos-git run` and `write`,
a replay, a restore) goes through `ProtectedCalls.protect(call)`:

    with calls.protect(call) as t:      # gate, pre-checkpoint, intent (fsynced)
        result = dispatch()             # the call runs exactly once, here
        t.outcome = classify(result)    # else "ok"; an exception: uncertain

The invariant lives here and nowhere else.  Its crash points:
`after_intent` (intent durable, nothing dispatched: a file call settles as not
applied, anything else waits for an operator) and `after_dispatch` (the call
ran, no outcome: a file call settles as completed, anything else waits).
`finish` never raises: if the outcome cannot be recorded the gate closes in
this process (`journal.poisoned`) and the record says so.

Write-behind (`protect(call, write_behind=True)`, the Hermes host): for an
ok outcome, the post-checkpoint and the outcome append run on this process's
outcome writer after the caller has its result: SENT_AFTER_S after the host
releases it (`release_behind`: Hermes is about to send its model request) or
as soon as that request is answered (`answered`); at the release itself when
the model lately answered within SENT_AFTER_S (no wait to hide the writer
in); RELEASE_AFTER_S after it was queued without a release; at once when a
thread settles: the next `begin` (or `flush`) waits for them first, so the
journal's order and the gate are as before.  What it changes for a crash: a
kill between the result reaching Hermes and the outcome being durable
(Hermes' time until its next model request plus SENT_AFTER_S, at most
RELEASE_AFTER_S + SENT_AFTER_S, plus the writer's few milliseconds) leaves the call
where `after_dispatch` leaves it (a file call settles as completed by
evidence, anything else waits for an operator), now also when Hermes had
shown the result to the model (which dies with the same process).
"""
from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import threading
import time
import uuid
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import median

import pygit2

from ..engine import faults, locking, loose, processes, store_audit
from ..engine.confine import split
from ..engine.errors import ChronosError, StoreUnwritable, explain
from ..engine.fsutil import atomic_write
from ..journal_refs import events
from ..journal_refs.carried import SYNC_AFTER_OBJECTS
from ..journal_refs.events import args_hash, fingerprint, sha256_hex
from ..journal_refs.evidence import ABSENT, UNKNOWN, content_id, is_blob_id
from ..settings import hermes_home
from .calls import UNSET, Call, Declared, Outcome, Ticket
from .core import Core
from .errors import ProtectedPath
from .gate import Gate
from .protected import WHAT, Hit, ProtectedSet, compaction_running, plugin_roots
from .results import CallRecord, RunResult, WriteResult
from .snapshots import Snapshots

log = logging.getLogger("chronos_git")

CHANGES_KEPT = 20          # protected-file changes `health` can name (chronos/protected-changes.json)
RELEASE_AFTER_S = 0.2      # an outcome behind waits at most this long for `release_behind`
SENT_AFTER_S = 0.05        # after a release the writer waits this long: the request is on its way


@dataclass
class Transaction:
    """An open protected call: set `outcome` before the block ends."""
    ticket: Ticket
    outcome: Outcome | None = None
    record: CallRecord | None = None       # filled when the block ends


class ProtectedCalls:
    def __init__(self, core: Core, gate: Gate, snapshots: Snapshots, start):
        self.core = core
        self.gate = gate
        self.snapshots = snapshots
        self._start = start
        self._completed: dict[tuple[str, str], dict] = {}   # (session, fingerprint) -> op info
        self._behind: queue.Queue = queue.Queue()              # write-behind outcomes, in order
        self._writer: threading.Thread | None = None
        self._writer_guard = threading.Lock()
        self._release = threading.Condition()  # the host waits on the network: write what is behind
        self._generation = 0                    # releases so far; an outcome waits for a later one
        self._settling = 0                      # threads in settle_behind: no outcome waits
        self._released_at = 0.0                 # monotonic time of the newest release
        self._answered = 0                      # the release whose model request was answered
        self._answer_s: deque = deque(maxlen=8)  # how long the model took to answer, lately
        self._protected: ProtectedSet | None = None
        self._protected_guard = threading.Lock()

    @contextmanager
    def protect(self, call: Call, *, gate: bool = True, budget_s: float | None = None,
                write_behind: bool = False):
        """The one transaction for protected work (see the module docstring)."""
        tx = Transaction(self.begin(call, gate=gate, budget_s=budget_s))
        try:
            yield tx
        except BaseException as exc:
            tx.record = self.finish(tx.ticket, tx.outcome or Outcome(
                status="error", uncertain_reason=f"exception: {type(exc).__name__}"))
            raise
        outcome = tx.outcome or Outcome(status="ok")
        self._mark_changes(tx.ticket, outcome)     # on the caller's thread: its result can say so
        if write_behind and outcome.status == "ok" and not outcome.uncertain_reason:
            tx.record = self._finish_behind(tx.ticket, outcome)
        else:
            tx.record = self.finish(tx.ticket, outcome)

    # --------------------------------------------------------- write-behind
    def _finish_behind(self, ticket: Ticket, outcome: Outcome) -> CallRecord:
        with self._writer_guard:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._write_outcomes, name="chronos-git-outcomes",
                                                daemon=True)
                self._writer.start()
        with self._release:
            generation = self._generation
        self._behind.put((ticket, outcome, generation, time.monotonic() + RELEASE_AFTER_S))
        return CallRecord(operation_id=ticket.operation_id, pre_checkpoint=ticket.pre_checkpoint,
                          post_checkpoint=None, snapshot=ticket.snapshot, recorded=True,
                          gate_warning=ticket.gate_warning, outcome="returned", status="ok",
                          protected_changed=outcome.fields.get("protected_changed"))

    def release_behind(self) -> None:
        """The host is about to send its model request (Hermes' `llm_execution` middleware):
        the outcomes behind are written while its thread waits on the model (SENT_AFTER_S on,
        for a slow model), instead of competing with it for the GIL while it builds that
        request."""
        with self._release:
            self._generation += 1
            self._released_at = time.monotonic()
            self._release.notify_all()

    def answered(self) -> None:
        """The host's model request (the one released last) has been answered: what is behind
        is written now, beside Hermes' handling of the answer, without waiting SENT_AFTER_S."""
        with self._release:
            if self._answered < self._generation:
                self._answer_s.append(time.monotonic() - self._released_at)
            self._answered = self._generation
            self._release.notify_all()

    def _model_is_slow(self) -> bool:
        """Whether the model lately took longer than SENT_AFTER_S to answer (unknown: yes, as
        real models do).  A model that answers faster (a local or scripted one) leaves no wait
        to hide the writer in: it starts at the release instead."""
        return not self._answer_s or median(self._answer_s) >= SENT_AFTER_S

    def _write_outcomes(self) -> None:
        while True:
            ticket, outcome, generation, deadline = self._behind.get()
            with self._release:                       # a host without the middleware: by the deadline
                self._release.wait_for(lambda: self._generation > generation or self._settling,   # noqa: B023 (called here only)
                                       timeout=max(0.0, deadline - time.monotonic()))
                if self._generation > generation and self._model_is_slow():
                    # released as Hermes starts its request, which it still builds and sends in
                    # Python: a writer competing for the GIL then delays it by more than its own
                    # work; from SENT_AFTER_S on Hermes waits on its model, unless the model has
                    # answered already (or a call settles) first
                    self._release.wait_for(lambda: self._settling or self._answered >= self._generation,
                                           timeout=max(0.0, self._released_at + SENT_AFTER_S - time.monotonic()))
            try:
                self.finish(ticket, outcome)          # never raises; a failure poisons the gate
            finally:
                self._behind.task_done()
            if self._behind.unfinished_tasks == 0:
                # idle: make what the witness carries durable (one pack), off the call's path
                # (the next call's gate check and snapshot need not wait for it)
                try:
                    self.core.journal.sync(min_objects=SYNC_AFTER_OBJECTS)
                except Exception:                   # noqa: BLE001 (an append past the cap syncs instead)
                    pass

    def settle_behind(self) -> None:
        """Wait until every write-behind outcome of this process is recorded.  Not while this
        thread holds a lock: the writer's post-snapshot may need it (a restore settles before
        it takes its workspace's lock)."""
        if self._writer is not None and not locking.holding_exclusive():
            with self._release:
                self._settling += 1
                self._release.notify_all()
            try:
                self._behind.join()
            finally:
                with self._release:
                    self._settling -= 1

    # ------------------------------------------------------------- intent
    def begin(self, call: Call, *, gate: bool = True, budget_s: float | None = None) -> Ticket:
        """Gate, pre-checkpoint, durable intent.  After this returns the call may run once."""
        self._start()
        self.settle_behind()            # the previous call's outcome first: journal order, gate
        self.check_protected(call)      # chronos-git's own files: refused (and journaled), gate or not
        warning = self.gate.check() if gate else None
        store, journal = self.core.store, self.core.journal
        ws = store.workspace(call.workspace)
        if call.snapshots:
            snap = self.snapshots.for_call(call, "before", budget_s)
        else:
            snap = {"kind": "safety" if call.pre_checkpoint else "none", "checkpoint": call.pre_checkpoint}
        try:
            declared, blobs = self._images(call)
        except (pygit2.GitError, OSError) as exc:
            raise StoreUnwritable(f"could not keep the pre- and post-images of this {call.tool} call in "
                                  f"the store {store.root}: {explain(exc, store.root)}; it was "
                                  "not run") from None
        op = uuid.uuid4().hex
        fp = fingerprint(call.tool, call.args)
        fields = {
            "operation_id": op, "tool": call.tool, "args_hash": args_hash(call.args),
            "fingerprint": fp, "session_id": call.session_id, "tool_call_id": call.tool_call_id,
            "turn_id": call.turn_id, "owner": journal.me.to_dict(),
            "settings_fingerprint": self.core.settings_fingerprint,
            "workspace": os.fsdecode(ws.root_bytes), "pre_checkpoint": snap.get("checkpoint"),
            "snapshot": {k: snap[k] for k in ("kind", "partial", "created", "error", "skipped_count")
                         if k in snap},
        }
        if call.declared is not None:
            fields["declared"] = declared
            fields["args"] = _file_args(call.args)
        elif self.core.settings.store_args:
            fields["args"] = call.args
        if call.replay_of:
            fields["replay_of"] = call.replay_of
        if call.actor:
            fields["actor"] = call.actor
        journal.append(events.Started, fields, blobs=blobs)
        ticket = Ticket(op, call, snap.get("checkpoint"), snap, time.time_ns(), fp, declared=declared,
                        gate_warning=warning)
        if call.declared is None:
            ticket.protected_baseline = self._baseline()
            ticket.since_ticks = processes.now_ticks()     # what it leaves running is named after it
        try:
            faults.hit("after_intent")
        except Exception as exc:
            # nothing was dispatched: record that now, or the operation stays "running" under this
            # live process while later calls change its paths, and a later start finds it torn
            self.finish(ticket, Outcome(status="error", fields={"not_dispatched": str(exc)}))
            raise
        return ticket

    def _images(self, call: Call) -> tuple[list[dict], dict[str, str]]:
        """Per declared path its pre-image (read and stored now) and post-image (stored if known)."""
        repo = self.core.store.repo()
        objects = self.core.store.root / "objects"
        declared: list[dict] = []
        blobs: dict[str, str] = {}
        for i, d in enumerate(call.declared or ()):
            pre = content_id(d.path, store_in=repo) if d.pre_id is UNSET else d.pre_id
            if d.post_id is not UNSET:
                post = d.post_id
            else:
                post = loose.blob(objects, d.post, repo=repo) if isinstance(d.post, bytes) else d.post
            declared.append({"path": d.path, "pre": pre, "post": post})
            if is_blob_id(pre):
                blobs[f"pre-{i:04d}"] = pre
            if post not in (ABSENT, UNKNOWN):
                blobs[f"post-{i:04d}"] = post   # type: ignore[assignment]  # not ABSENT/UNKNOWN: a blob id
        return declared, blobs

    # ------------------------------------------------------------ outcome
    def finish(self, ticket: Ticket, outcome: Outcome) -> CallRecord:
        """Post-checkpoint and the outcome.  Never raises: a failure poisons the gate instead."""
        self._mark_changes(ticket, outcome)
        self._mark_left_running(ticket, outcome)
        try:
            faults.hit("after_dispatch")
        except Exception:
            pass        # the call ran: its outcome is recorded below, or that append's own failure poisons
        call = ticket.call
        journal = self.core.journal
        post: dict = {"checkpoint": outcome.post_checkpoint}
        if call.snapshots and outcome.post_checkpoint is None:
            try:
                post = self.snapshots.for_call(call, "after", None)
            except Exception as exc:      # the outcome must still be recorded
                post = {"error": str(exc)}
        rec = CallRecord(operation_id=ticket.operation_id, pre_checkpoint=ticket.pre_checkpoint,
                         post_checkpoint=post.get("checkpoint"), snapshot=ticket.snapshot, recorded=True,
                         gate_warning=ticket.gate_warning,
                         protected_changed=outcome.fields.get("protected_changed"))
        try:
            strict = self.core.settings.strict_errors and outcome.status == "error"
            if outcome.uncertain_reason or strict:
                rec.reason = outcome.uncertain_reason or "error result (strict_errors)"
                journal.append(events.Uncertain, {"operation_id": ticket.operation_id, "reason": rec.reason,
                                                  "post_checkpoint": post.get("checkpoint"), **outcome.fields})
                rec.outcome = "uncertain"
            else:
                fields = {"operation_id": ticket.operation_id, "status": outcome.status,
                          "result_hash": outcome.result_hash, "post_checkpoint": post.get("checkpoint"),
                          "duration_ms": round((time.time_ns() - ticket.started_ns) / 1e6, 3),
                          **outcome.fields}
                if outcome.exit_code is not None:
                    fields["exit_code"] = outcome.exit_code
                journal.append(events.Returned, fields)
                rec.outcome = "returned"
                rec.status = "ok" if outcome.status == "ok" else "error"
                if outcome.status == "ok" and call.session_id:
                    self._completed[(call.session_id, ticket.fingerprint)] = {
                        "operation_id": ticket.operation_id, "post_checkpoint": post.get("checkpoint"),
                        "tool": call.tool}
        except Exception as exc:
            journal.poisoned = (f"recording the outcome of {ticket.operation_id[:12]} "
                                f"({call.tool}) failed: {exc}")
            rec.recorded, rec.outcome_unknown, rec.error = False, True, journal.poisoned
        return rec

    @staticmethod
    def _mark_left_running(ticket: Ticket, outcome: Outcome) -> None:
        """A shell call's processes still alive when it returned (pid, start time, name): an
        operator act from one of them is refused (service/operators.py).  Read on the thread
        that writes the outcome (the writer's, off the call's path, for a write-behind)."""
        if ticket.since_ticks is None:
            return
        try:
            left = processes.left_running(os.getpid(), ticket.since_ticks)
        except OSError:
            return
        if left:
            outcome.fields["left_running"] = [[p.pid, p.start, p.comm] for p in left[:64]]

    # ------------------------------------------------------ protected paths
    def protected(self) -> ProtectedSet:
        """The protected set of this store (service/protected.py), resolved once."""
        with self._protected_guard:
            if self._protected is None:
                try:
                    home = hermes_home()
                except Exception:          # noqa: BLE001 (no Hermes here: the package folder only)
                    home = None
                self._protected = ProtectedSet(self.core.store_dir, self.core.journal.witness_path,
                                               plugin_roots(home), watch=self.core.background)
            return self._protected

    def check_protected(self, call: Call) -> None:
        """Refuse (ProtectedPath) a call that declares a path in the protected set, before
        anything is snapshotted or run; the refusal is journaled (a `refused` event)."""
        if not call.declared:
            return
        hits = self.protected().hits(d.path for d in call.declared)
        if not hits:
            return
        op = uuid.uuid4().hex
        paths = [{"path": h.path, "resolved": h.resolved, "what": h.what} for h in hits]
        fields: dict[str, object] = {
            "operation_id": op, "tool": call.tool, "code": ProtectedPath.code, "paths": paths,
            "args_hash": args_hash(call.args), "session_id": call.session_id, "tool_call_id": call.tool_call_id,
            "turn_id": call.turn_id, "workspace": call.workspace}
        if call.replay_of:
            fields["replay_of"] = call.replay_of
        if call.actor:
            fields["actor"] = call.actor
        recorded = True
        try:
            self._start()                     # the journal opened (a CLI `write` checks before `begin`)
            fields["owner"] = self.core.journal.me.to_dict()
            self.core.journal.append(events.Refused, fields)
        except Exception as exc:          # noqa: BLE001 (refused all the same)
            recorded = False
            log.warning("chronos-git: the refusal of a %s call could not be journaled: %s", call.tool, exc)
        raise ProtectedPath(_refusal(call.tool, hits, op, recorded), operation_id=op, paths=paths,
                            recorded=recorded)

    def _baseline(self) -> tuple[int, bool, dict] | None:
        """The fingerprint of the protected set after a shell call's intent, with the number of
        maintenance events so far and then whether a compaction is running (in that order).  A
        compaction holds its lock from before its decision (journaled: `retention`,
        `prune_orphans`) to after its cut: one that was not running at the probe and cuts during
        the call journals its decision after the count was read; one running then may cut
        during the call with its decision journaled before."""
        try:
            ps = self.protected()
            count = self.core.journal.state.totals.get("maintenance", 0)
            return count, compaction_running(ps.store), ps.fingerprint()
        except Exception as exc:          # noqa: BLE001 (the call runs; only this check is lost)
            log.info("chronos-git: no fingerprint of the protected files: %s", exc)
            return None

    def _mark_changes(self, ticket: Ticket, outcome: Outcome) -> None:
        """Compare the protected set with the call's baseline (once) and record what changed
        in its outcome (`protected_changed`) and for `health`."""
        base, ticket.protected_baseline = ticket.protected_baseline, None
        if base is None:
            return
        try:
            count, compacting, before = base
            ps = self.protected()
            changed, maintained = ps.changed(before, ps.fingerprint())
            if maintained and not compacting:
                try:
                    self.core.journal.refresh()
                except Exception:         # noqa: BLE001 (a journal in doubt: the gate says so)
                    pass
                compacting = self.core.journal.state.totals.get("maintenance", 0) > count
            if compacting:
                # chronos-git's own, journaled; but never a config that now holds what chronos-git
                # does not write: holding the compaction lock must not hide a planted setting
                planted = {f.where for f in store_audit.audit(ps.store)
                           if f.kind == "config" and not f.what.lower().startswith("remote.")}
                changed = [p for p in changed if p not in maintained or p in planted]
        except Exception as exc:          # noqa: BLE001 (the outcome must still be recorded)
            log.info("chronos-git: the protected files could not be compared: %s", exc)
            return
        if not changed:
            return
        outcome.fields["protected_changed"] = changed
        log.warning("chronos-git: %s call %s changed chronos-git's own files: %s", ticket.call.tool,
                    ticket.operation_id[:12], ", ".join(changed))
        try:
            self._keep_change(ticket, changed)
        except Exception as exc:          # noqa: BLE001 (the journal event has it)
            log.info("chronos-git: protected-file change not kept for health: %s", exc)

    def _changes_path(self):
        return self.core.store.meta_dir / "protected-changes.json"

    def _keep_change(self, ticket: Ticket, changed: list[str]) -> None:
        with self.core.store.lock("protected-changes"):
            cur = self.recent_changes(max_age_s=None)
            cur.append({"operation_id": ticket.operation_id, "tool": ticket.call.tool, "paths": changed,
                        "workspace": ticket.call.workspace, "time": time.time()})
            atomic_write(self._changes_path(), events.canonical(cur[-CHANGES_KEPT:]).encode(), mode=0o600)

    def recent_changes(self, max_age_s: float | None = 7 * 86400) -> list[dict]:
        """Calls that changed chronos-git's own files (newest last), kept for `health`; the
        journal's outcome events are the record."""
        try:
            cur = json.loads(self._changes_path().read_text())
        except (OSError, ValueError):
            return []
        now = time.time()
        return [c for c in cur if isinstance(c, dict) and isinstance(c.get("time"), (int, float))
                and (max_age_s is None or now - c["time"] <= max_age_s)]

    def completed_before(self, session_id: str | None, tool: str, args: dict) -> dict | None:
        """An identical call that already completed in this session (the duplicate guard)."""
        if not session_id:
            return None
        self.settle_behind()
        return self._completed.get((session_id, fingerprint(tool, args)))

    # ------------------------------------------------------ operator calls
    def run_command(self, workspace: str, argv: list[str], *, tool: str = "terminal",
                    stdout=None, stderr=None) -> RunResult:
        """A protected shell call: `chronos-git run -- CMD`."""
        call = Call(tool=tool, args={"argv": argv, "cwd": workspace}, workspace=workspace,
                    session_id=os.environ.get("CHRONOS_GIT_SESSION"), actor="cli")
        rc: int | None
        if self.core.settings.is_read_only(tool):
            rc = subprocess.call(argv, cwd=workspace, stdout=stdout, stderr=stderr)
            return _exited(RunResult(journaled=False, read_only=True, exit_code=rc))
        failure = None
        with self.protect(call) as t:
            try:
                rc = subprocess.call(argv, cwd=workspace, stdout=stdout, stderr=stderr)
            except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
                # exec failed: the command never ran, a known outcome (the gate stays open)
                rc, failure = None, f"could not run {argv[0]}: {exc.strerror or exc}"
                t.outcome = Outcome(status="error", result_hash=sha256_hex(failure))
            except (OSError, subprocess.SubprocessError) as exc:    # it may have started: unknown
                rc, failure = None, f"could not run {argv[0]}: {exc}"
                t.outcome = Outcome(status="error", uncertain_reason=f"exception: {type(exc).__name__}")
            else:
                t.outcome = Outcome(status="ok" if rc == 0 else "error", result_hash=sha256_hex(str(rc)),
                                    exit_code=rc)
        if failure:
            return RunResult(**t.record.model_dump(exclude={"status", "error"}), status="error",
                             exit_code=None, error=failure)
        return _exited(RunResult(**t.record.model_dump(), exit_code=rc))

    def write_file(self, workspace: str, path: str, content: bytes, *, tool: str = "write_file",
                   session_id: str | None = None, actor: str | None = "cli") -> WriteResult:
        """A protected write with write_file semantics (parents created, replaced whole),
        confined to the workspace: never through a symlink, never into a `.git`."""
        ws = self.core.store.workspace(workspace)
        abspath = os.path.normpath(path if os.path.isabs(path) else os.path.join(workspace, path))
        if os.fsencode(abspath) == ws.root_bytes:
            raise ValueError(f"{path!r} names the workspace folder itself: write needs the path of a file "
                             "(nothing was written)")
        call = Call(tool=tool, args={"path": abspath, "content": content.decode("utf-8", "replace")},
                    workspace=workspace, session_id=session_id, declared=[Declared(abspath, content)],
                    actor=actor)
        self.check_protected(call)            # chronos-git's own files: refused and journaled, wherever
        split(ws.rel(abspath))                # outside the workspace or into a .git: refused now
        if path.endswith(("/", os.sep)) or os.path.isdir(abspath):
            raise ValueError(f"{path} names a folder: write needs the path of a file (nothing was written)")
        failure = None
        with self.protect(call) as t:
            try:
                ws.write_files([(abspath, content)])
            except (OSError, ChronosError) as exc:
                failure = exc
                t.outcome = failed_write(t.ticket, exc)
            else:
                t.outcome = Outcome(status="ok", result_hash=sha256_hex(str(len(content))))
        if failure is not None:
            raise ChronosError(f"could not write {abspath}: {explain(failure, ws.root)}")
        return WriteResult(**t.record.model_dump(), path=abspath, bytes_written=len(content))


def _refusal(tool: str, hits: list[Hit], op: str, recorded: bool) -> str:
    """Why a call was refused, and how to proceed."""
    where = "; ".join(h.path + (f" (which is {h.resolved})" if h.resolved != os.path.normpath(h.path) else "")
                      + f": {WHAT[h.what]}" for h in hits)
    msg = (f"refused: this {tool} call would write {where}. chronos-git never lets a call it records change "
           "its own store, journal or code; nothing was run"
           + (f" (journaled as refused, operation {op[:12]})." if recorded else
              " (the refusal could not be journaled)."))
    if any(h.what == "plugin" for h in hits):
        msg += (" To let an agent edit chronos-git itself, run that agent with a separate install of "
                "chronos-git (another checkout, or `hermes plugins install` into another HERMES_HOME), "
                "or start the host with CHRONOS_GIT_ALLOW_PLUGIN_EDITS=1.")
    if any(h.what != "plugin" for h in hits):
        msg += (" The store is changed only by chronos-git's own commands (`chronos-git journal ...`, "
                "`restore`, `compact`), run by a person.")
    return msg


def _exited(res: RunResult) -> RunResult:
    """A command that did not exit 0 has the error shape every surface shows."""
    rc = res.exit_code
    if rc:
        res.status = "error"
        res.error = res.error or (f"the command was killed by signal {-rc}" if rc < 0
                                  else f"the command exited with status {rc}")
    return res


def failed_write(ticket: Ticket, exc: BaseException) -> Outcome:
    """A write that raised: a known error when every path is still at its pre-image
    (temp + rename never half-replaces a file), else an unknown outcome."""
    untouched = all(content_id(d["path"]) == d["pre"] for d in ticket.declared)
    return Outcome(status="error", result_hash=sha256_hex(str(exc)),
                   uncertain_reason=None if untouched else f"exception: {type(exc).__name__}")


def _file_args(args: dict) -> dict:
    """File-tool args as journaled: the content lives in the post-image blob; long strings
    (old/new strings, patches) are kept as hashes."""
    out = {}
    for k, v in args.items():
        if k == "content" and isinstance(v, str):
            out[k] = {"sha256": sha256_hex(v), "chars": len(v), "stored_as": "post-image blob"}
        elif isinstance(v, str) and len(v) > 512:
            out[k] = {"sha256": sha256_hex(v), "chars": len(v)}
        else:
            out[k] = v
    return out
