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
outcome writer (a worker of service/jobs.py, in `health`) after the caller
has its result: SENT_AFTER_S after the host releases it (`release_behind`:
Hermes is about to send its model request) or as soon as that request is
answered (`answered`); at the release itself when
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

Around the transaction, in their own modules: chronos-git's own files, refused
before a call and checked after a shell call (service/self_protection.py), and
the calls chronos-git runs itself, `run` and `write` (service/direct_calls.py).
"""
from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import median

import pygit2

from ..engine import faults, locking, loose, processes
from ..engine.errors import StoreUnwritable, explain
from ..journal_refs import events
from ..journal_refs.carried import MAX_BLOB, SYNC_AFTER_OBJECTS
from ..journal_refs.events import call_hashes, fingerprint, sha256_hex
from ..journal_refs.evidence import ABSENT, UNKNOWN, content_id, is_blob_id
from . import direct_calls
from .calls import UNSET, Call, Outcome, Ticket
from .core import Core
from .gate import Gate
from .protected import ProtectedSet
from .results import CallRecord, RunResult, WriteResult
from .self_protection import SelfProtection
from .snapshots import Snapshots

RELEASE_AFTER_S = 0.2      # an outcome behind waits at most this long for `release_behind`
SENT_AFTER_S = 0.05        # after a release the writer waits this long: the request is on its way
WRITER = "outcomes"        # the outcome writer's key and kind in service/jobs.py


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
        self._release = threading.Condition()  # the host waits on the network: write what is behind
        self._generation = 0                    # releases so far; an outcome waits for a later one
        self._settling = 0                      # threads in settle_behind: no outcome waits
        self._released_at = 0.0                 # monotonic time of the newest release
        self._answered = 0                      # the release whose model request was answered
        self._answer_s: deque = deque(maxlen=8)  # how long the model took to answer, lately
        self.own_files = SelfProtection(core, start)   # chronos-git's own files, around each call

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
        self.own_files.mark_changes(tx.ticket, outcome)   # on the caller's thread: its result can say so
        if write_behind and outcome.status == "ok" and not outcome.uncertain_reason:
            tx.record = self._finish_behind(tx.ticket, outcome)
        else:
            tx.record = self.finish(tx.ticket, outcome)

    # --------------------------------------------------------- write-behind
    def _finish_behind(self, ticket: Ticket, outcome: Outcome) -> CallRecord:
        self.core.jobs.worker(WRITER, WRITER, self._next_behind, self._write_behind)
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

    def _next_behind(self) -> tuple[Ticket, Outcome]:
        """The writer's wait: the oldest outcome behind, once it is due (see the module docstring)."""
        ticket, outcome, generation, deadline = self._behind.get()
        with self._release:                       # a host without the middleware: by the deadline
            self._release.wait_for(lambda: self._generation > generation or self._settling,
                                   timeout=max(0.0, deadline - time.monotonic()))
            if self._generation > generation and self._model_is_slow():
                # released as Hermes starts its request, which it still builds and sends in
                # Python: a writer competing for the GIL then delays it by more than its own
                # work; from SENT_AFTER_S on Hermes waits on its model, unless the model has
                # answered already (or a call settles) first
                self._release.wait_for(lambda: self._settling or self._answered >= self._generation,
                                       timeout=max(0.0, self._released_at + SENT_AFTER_S - time.monotonic()))
        return ticket, outcome

    def _write_behind(self, item: tuple[Ticket, Outcome]) -> None:
        try:
            self.finish(*item)                    # never raises; a failure poisons the gate
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
        if self.core.jobs.get(WRITER) is not None and not locking.holding_exclusive():
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
        warning = self.gate.check(call) if gate else None
        store, journal = self.core.store, self.core.journal
        ws = store.workspace(call.workspace)
        if call.snapshots:
            snap = self.snapshots.for_call(call, "before", budget_s)
        else:
            snap = {"kind": "safety" if call.pre_checkpoint else "none", "checkpoint": call.pre_checkpoint}
        try:
            declared, blobs, staged = self._images(call, snap)
        except (pygit2.GitError, OSError) as exc:
            raise StoreUnwritable(f"could not keep the pre- and post-images of this {call.tool} call in "
                                  f"the store {store.root}: {explain(exc, store.root)}; it was "
                                  "not run") from None
        op = uuid.uuid4().hex
        fp, ahash = call_hashes(call.tool, call.args)
        fields = {
            "operation_id": op, "tool": call.tool, "args_hash": ahash,
            "fingerprint": fp, "session_id": call.session_id, "tool_call_id": call.tool_call_id,
            "turn_id": call.turn_id, "owner": journal.me.to_dict(),
            "settings_fingerprint": self.core.settings_fingerprint,
            "workspace": os.fsdecode(ws.root_bytes), "pre_checkpoint": snap.get("checkpoint"),
            "snapshot": {k: snap[k] for k in ("kind", "partial", "created", "error", "skipped_count",
                                              "pending_baseline") if k in snap},
        }
        if call.declared is not None:
            fields["declared"] = declared
            fields["args"] = _file_args(call.args)
        elif self.core.settings.store_args:
            fields["args"] = call.args
        fields.update(call.provenance())
        # published while the call runs, with the post-images it carries
        journal.append(events.Started, fields, blobs=blobs, objects=staged, defer=True)
        ticket = Ticket(op, call, snap.get("checkpoint"), snap, time.time_ns(), fp, declared=declared,
                        gate_warning=warning)
        if call.declared is None:
            ticket.protected_baseline = self.own_files.baseline()
            ticket.since_ticks = processes.now_ticks()     # what it leaves running is named after it
        try:
            faults.hit("after_intent")
        except Exception as exc:
            # nothing was dispatched: record that now, or the operation stays "running" under this
            # live process while later calls change its paths, and a later start finds it torn
            self.finish(ticket, Outcome(status="error", fields={"not_dispatched": str(exc)}))
            raise
        return ticket

    def _images(self, call: Call, snap: dict) -> tuple[list[dict], dict[str, str], dict[str, tuple[int, bytes]]]:
        """Per declared path its pre-image (as this call's checkpoint read it, else read and
        stored now) and post-image (if known: staged for the journal, which carries it in the
        intent's witness record and writes it after: loose.staged_blob).

        Written first instead while the journal's last write failed (and by the journal when
        the disk is nearly full, or into a fan-out folder this process cannot write to), so a
        store known to refuse new files refuses the call before it runs.  One that starts to
        refuse them unseen (a quota statvfs does not show, an I/O error) right at this call lets
        it run; its outcome then cannot be recorded, the gate closes in this process, and the
        next start settles the call by evidence from the witness (docs/design.md)."""
        stage = self.core.journal.unwritable is None
        repo = self.core.store.repo()
        objects = self.core.store.root / "objects"
        ws = self.core.store.workspace(call.workspace) if snap.get("kind") == "declared" else None
        declared: list[dict] = []
        blobs: dict[str, str] = {}
        staged: dict[str, tuple[int, bytes]] = {}
        for i, d in enumerate(call.declared or ()):
            if d.pre_id is not UNSET:
                pre = d.pre_id
            else:       # what the pre-checkpoint just read, else the file as it is now
                pre = (ws.current_blob(d.path) if ws is not None else None) or content_id(d.path, store_in=repo)
            if d.post_id is not UNSET:
                post = d.post_id
            elif isinstance(d.post, bytes) and stage:
                post, raw = loose.staged_blob(objects, d.post, repo=repo, most=MAX_BLOB)
                if raw is not None:
                    staged[post] = (len(d.post), raw)
            elif isinstance(d.post, bytes):
                post = loose.blob(objects, d.post, repo=repo, relist=False)
            else:
                post = d.post
            declared.append({"path": d.path, "pre": pre, "post": post})
            if is_blob_id(pre):
                blobs[f"pre-{i:04d}"] = pre
            if post not in (ABSENT, UNKNOWN):
                blobs[f"post-{i:04d}"] = post   # type: ignore[assignment]  # not ABSENT/UNKNOWN: a blob id
        return declared, blobs, staged

    # ------------------------------------------------------------ outcome
    def finish(self, ticket: Ticket, outcome: Outcome) -> CallRecord:
        """Post-checkpoint and the outcome.  Never raises: a failure poisons the gate instead."""
        self.own_files.mark_changes(ticket, outcome)
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
        """The protected set of this store (service/self_protection.py), resolved once."""
        return self.own_files.protected()

    def check_protected(self, call: Call) -> None:
        """Refuse (ProtectedPath) a call that declares a path in the protected set, before
        anything is snapshotted or run; the refusal is journaled (a `refused` event)."""
        self.own_files.refuse(call)

    def recent_changes(self, max_age_s: float | None = 7 * 86400) -> list[dict]:
        """Calls that changed chronos-git's own files (newest last), kept for `health`."""
        return self.own_files.recent_changes(max_age_s)

    def completed_before(self, session_id: str | None, tool: str, args: dict) -> dict | None:
        """An identical call that already completed in this session (the duplicate guard)."""
        if not session_id:
            return None
        self.settle_behind()
        return self._completed.get((session_id, fingerprint(tool, args)))

    # ------------------------------------------------------ operator calls
    def run_command(self, workspace: str, argv: list[str], *, tool: str = "terminal",
                    stdout=None, stderr=None) -> RunResult:
        """A protected shell call: `chronos-git run -- CMD` (service/direct_calls.py)."""
        return direct_calls.run_command(self, workspace, argv, tool=tool, stdout=stdout, stderr=stderr)

    def write_file(self, workspace: str, path: str, content: bytes, *, tool: str = "write_file",
                   session_id: str | None = None, actor: str | None = "cli") -> WriteResult:
        """A protected write, confined to the workspace (service/direct_calls.py)."""
        return direct_calls.write_file(self, workspace, path, content, tool=tool, session_id=session_id,
                                       actor=actor)


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
