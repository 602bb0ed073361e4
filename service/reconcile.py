"""Reconciling the journal with the world: calls cut off by a crash settled by
evidence, the alerts the next model session is told, and the operator's
journal commands (status, verify, export, resolve, recover by replay or
rollback)."""
from __future__ import annotations

import shlex

import pygit2

from ..engine import faults, treecheck
from ..engine.checkpoint import CheckpointMeta
from ..engine.errors import ChronosError
from ..engine.layout import canonical_root
from ..engine.state_file import StateFile
from ..engine.wording import plural
from ..journal_refs import IntegrityError, JournalError, TransitionError, anchor, events, evidence as evidence_of
from ..journal_refs.evidence import UNKNOWN, describe
from ..journal_refs.state import CRASH_BOUNDARY
from . import operators
from .calls import Call, Declared, Outcome
from .core import Core
from .direct_calls import failed_write
from .errors import ProtectedPath, StaleReplay
from .gate import Gate
from .results import (
    EventsResult,
    JournalHeadResult,
    JournalStatus,
    NotReplayed,
    OperationEvents,
    RecoverResult,
    Replayed,
    ResolveResult,
    RollbackResult,
    Settled,
    TreeCheck,
    VerifyResult,
)
from .timemachine import TimeMachine
from .transaction import ProtectedCalls


class Reconciler:
    def __init__(self, core: Core, gate: Gate, calls: ProtectedCalls, time_machine: TimeMachine,
                 protection, startup):
        self.core = core
        self.gate = gate
        self.calls = calls
        self.time = time_machine
        self._protection = protection      # () -> Protection
        self._startup = startup            # () -> the once-per-process start record

    # ------------------------------------------------------ crash settlement
    def settle_by_evidence(self, operation_id: str | None = None) -> list[Settled]:
        """Crashed file calls: completed, not applied, or uncertain, by comparing disk with images."""
        journal = self.core.journal
        out: list[Settled] = []
        for op in journal.unresolved():
            if (operation_id and op.operation_id != operation_id) or op.state != "pending":
                continue
            if not op.declared:
                boundary = self._crash_boundary(op)
                out.append(Settled(operation_id=op.operation_id, tool=op.tool, workspace=op.workspace,
                                   result="needs_operator",
                                   why="no declared paths: a shell command or external effect cannot be "
                                       "settled by evidence"
                                       + (f"; checkpoint {boundary[:12]} holds the workspace as the crash was "
                                          "found" if boundary else "")))
                continue
            verdict, items = evidence_of.evidence(op.declared)
            faults.hit("settle_before_append")
            try:
                if verdict == "completed":
                    journal.append(events.Recovered, {
                        "operation_id": op.operation_id, "outcome": "completed", "evidence": items,
                        "actor": "chronos-git recovery", "note": "all declared paths at their post-image"})
                elif verdict == "not_applied":
                    replayable = all(d.get("post", UNKNOWN) != UNKNOWN for d in op.declared)
                    journal.append(events.Recovered, {
                        "operation_id": op.operation_id, "outcome": "not_applied", "evidence": items,
                        "replayable": replayable, "actor": "chronos-git recovery",
                        "note": "all declared paths at their pre-image"})
                else:
                    journal.append(events.Uncertain, {
                        "operation_id": op.operation_id, "reason": "partial", "evidence": items},
                        while_running=True)
            except TransitionError:
                continue        # another process settled it between our look and our append
            out.append(Settled(operation_id=op.operation_id, tool=op.tool, workspace=op.workspace, result=verdict,
                               evidence=describe(items), paths=[i["path"] for i in items]))
        self._queue_alerts(out)
        return out

    def _crash_boundary(self, op) -> str | None:
        """A crashed call that cannot be settled by evidence: its workspace is checkpointed when
        the crash is found, once (journaled as `crash_boundary`), so that what the call did
        (pre-checkpoint to there) is told apart from what anyone does later (`recover --rollback`)."""
        info = self.core.journal.state.open.get(op.operation_id) or {}
        if "boundary_checkpoint" in info:
            return info["boundary_checkpoint"]
        if not (op.workspace and op.pre_checkpoint):
            return None              # nothing to tell apart: no checkpoint before it either
        cid, error = None, None
        try:
            ws = self.core.store.workspace(op.workspace)
            res = ws.snapshot(CheckpointMeta(description=f"as the crash of operation {op.operation_id[:12]} "
                                                         f"({op.tool}) was found", kind="boundary",
                                                         role="boundary"))
            self.time.snapshots.taken(ws, res)
            cid = res.checkpoint.id if res.checkpoint is not None else None
        except (ChronosError, OSError, ValueError, pygit2.GitError) as exc:
            error = str(exc)
        fields: dict[str, object] = {"operation_id": op.operation_id, "action": CRASH_BOUNDARY, "checkpoint": cid}
        if error:
            fields["error"] = error
        try:
            self.core.journal.append(events.Maintenance, fields, while_running=True)
        except (TransitionError, JournalError):
            return None              # another process recorded it meanwhile, or the journal cannot
        return cid

    # alerts survive the process that settled them: the next model session reads them once
    # (a missing or damaged list is empty; an unreadable one raises: nothing is dropped unseen)
    def _alerts(self) -> StateFile:
        return StateFile(self.core.store.meta_dir, "pending-alerts.json")

    def _queue_alerts(self, settled: list[Settled]) -> None:
        if not settled:
            return

        def add(cur: list) -> list:
            known = {a["operation_id"] for a in cur}
            return cur + [s.model_dump(exclude_none=True) for s in settled if s.operation_id not in known]
        self._alerts().update(add, [], raise_unreadable=True)

    def take_alerts(self, workspace: str | None = None) -> list[Settled]:
        """Settlements no model session has been told about yet (read once); with `workspace`,
        only those of calls in it (or of no known workspace): a session in another project is
        not told to leave alone a file it has never seen, and that project's next one is."""
        alerts = self._alerts()
        root = None if workspace is None else str(canonical_root(workspace))
        with alerts.locked():
            got = alerts.load()
            got.raise_if_unreadable()
            if got.state != "ok":
                return []            # a damaged list stays where it is
            mine: list[dict] = []
            rest: list[dict] = []
            for a in got.doc:
                if isinstance(a, dict):
                    (mine if root is None or a.get("workspace") in (None, root) else rest).append(a)
            if rest:
                alerts.write(rest)
            else:
                alerts.remove()
        return [Settled(**a) for a in mine]

    # ----------------------------------------------------------------- journal
    def status(self) -> JournalStatus:
        startup = self._startup()
        st = self.core.journal.status()
        closed = self.gate.state()
        return JournalStatus(**st, settled_at_start=startup.get("settled", []),
                             gate="open" if closed is None else "closed",
                             gate_reason=closed.message if closed is not None else None,
                             protection=self._protection())

    def verify(self, checkpoint: dict | None = None) -> VerifyResult:
        """The journal's chain and witness, and every checkpoint tree's entry names."""
        self._startup()
        res = self.core.journal.verify(checkpoint, anchored=anchor.mirrored(self.core.store))
        out = VerifyResult(**res, checkpoint_trees=TreeCheck(**treecheck.check_checkpoints(self.core.store)))
        if res["integrity"] != "ok":
            out.status, out.error, out.code = "error", res["integrity"], "integrity"
        elif out.checkpoint_trees.problems:
            out.status, out.code = "error", "unsafe_path"
            out.error = ("checkpoints hold entries that git's fsck rejects (a restore refuses them): "
                         + "; ".join(out.checkpoint_trees.problems[:5]))
        return out

    def export_head(self) -> JournalHeadResult:
        self._startup()
        journal = self.core.journal
        if journal.integrity != "ok":
            raise IntegrityError(f"refusing to export the head of a journal in doubt: {journal.integrity}")
        return JournalHeadResult(checkpoint=journal.export_head())

    def log(self, limit: int | None = 50) -> EventsResult:
        if limit is not None and limit < 1:
            raise ValueError(f"the limit must be at least 1, not {limit}")
        self._startup()
        return EventsResult(events=self.core.journal.events(limit))

    def show(self, operation_id: str) -> OperationEvents:
        self._startup()
        op = self._match_op(operation_id, include_closed=True)
        evs = [e for e in self.core.journal.events(None) if e.get("operation_id") == op]
        return OperationEvents(operation_id=op, events=list(reversed(evs)))

    def _match_op(self, prefix: str, *, include_closed: bool = False) -> str:
        journal = self.core.journal
        prefix = (prefix or "").strip().lower()
        if len(prefix) < 6:
            raise ChronosError("give at least 6 characters of the operation id")
        candidates = set(journal.state.open) | set(journal.state.replayable)
        matches = [o for o in candidates if o.startswith(prefix)]
        if not matches and include_closed:
            matches = sorted({e["operation_id"] for e in journal.events(None, kinds={events.Started, events.Refused})
                              if e["operation_id"].startswith(prefix)})
        if not matches:
            raise ChronosError(f"no operation {prefix!r} in the journal" if include_closed else
                               f"no operation {prefix!r} is open (it may be closed already: see `journal log`)")
        if len(matches) > 1:
            raise ChronosError(f"operation prefix {prefix!r} is ambiguous")
        return matches[0]

    def _require_unresolved(self, prefix: str):
        op_id = self._match_op(prefix)
        journal = self.core.journal
        for op in journal.operations():
            if op.operation_id != op_id:
                continue
            if op.state == "running":
                raise ChronosError(f"operation {op_id[:12]} is still running (pid "
                                   f"{(op.owner or {}).get('pid')} is alive); stop that process first")
            return op
        raise ChronosError(f"operation {op_id[:12]} is not unresolved")

    # ------------------------------------------------------------- operator
    def resolve(self, operation_id: str, outcome: str, evidence_text: str, *,
                actor: str = "operator") -> ResolveResult:
        self._startup()
        if outcome not in ("completed", "not_applied"):
            raise ChronosError("outcome must be 'completed' or 'not_applied' (use recover --rollback to roll back)")
        if not (evidence_text or "").strip():
            raise ChronosError("resolving needs non-empty --evidence: what shows the outcome?")
        op = self._require_unresolved(operation_id)
        who = operators.check(self.core, "journal resolve", op.operation_id)
        signed = operators.authorize(self.core, "journal resolve", {
            "kind": events.Resolved.kind, "operation_id": op.operation_id, "outcome": outcome}, op.operation_id)
        ev = self.core.journal.append(events.Resolved, {"operation_id": op.operation_id, "outcome": outcome,
                                                        "evidence": evidence_text.strip(), "actor": actor,
                                                        "operator": who, **signed})
        return ResolveResult(operation_id=op.operation_id, outcome=outcome, event=ev["seq"],
                             gate="open" if self.gate.is_open() else "closed")

    def recover(self, operation_id: str | None = None, *, replay: bool = False,
                rollback: bool = False, dry_run: bool = False,
                actor: str = "operator") -> RecoverResult | RollbackResult:
        self._startup()
        if replay and rollback:
            raise ChronosError("choose --replay or --rollback, not both")
        if dry_run and not rollback:
            raise ChronosError("--dry-run previews a rollback: use it with --rollback")
        if (replay or rollback) and not dry_run:
            operators.check(self.core, "journal recover --" + ("replay" if replay else "rollback"), operation_id)
        if rollback:
            if not operation_id:
                raise ChronosError("--rollback needs an operation id")
            return self._rollback(operation_id, actor, dry_run=dry_run)
        settled = self.settle_by_evidence(self._match_op(operation_id) if operation_id else None)
        out = RecoverResult(settled=settled, unresolved=[], gate="open")
        if replay and operation_id:
            out.replayed = [self._replay(self._match_op(operation_id), actor)]
        elif replay:
            # every replayable call whose paths are still at their pre-image; one that later calls
            # moved on from is left alone and named (replaying it would overwrite their work)
            out.replayed, out.not_replayed = [], []
            for op in sorted(self.core.journal.state.replayable):
                try:
                    out.replayed.append(self._replay(op, actor))
                except StaleReplay as exc:
                    out.not_replayed.append(NotReplayed(operation_id=op, reason=str(exc),
                                                        evidence=exc.details["evidence"]))
                except ProtectedPath as exc:          # its target is chronos-git's own: never replayed
                    out.not_replayed.append(NotReplayed(operation_id=op, reason=str(exc),
                                                        evidence=", ".join(p["path"] for p in exc.paths)))
        out.unresolved = [o.to_dict() for o in self.core.journal.unresolved()]   # type: ignore[misc]  # validate_assignment builds the models
        out.gate = "open" if self.gate.is_open() else "closed"
        return out

    def _replay(self, op: str, actor: str) -> Replayed:
        store, journal = self.core.store, self.core.journal
        info = journal.state.replayable.get(op)
        if info is None:
            raise ChronosError(f"operation {op[:12]} is not replayable (not settled as not applied, "
                               "or replayed already)")
        declared = info["declared"]
        verdict, items = evidence_of.evidence(declared)
        if verdict != "not_applied":
            raise StaleReplay(f"refusing to replay {op[:12]}: its paths no longer equal their pre-image "
                              f"({describe(items)})", evidence=describe(items))
        workspace = info.get("workspace")
        ws = store.workspace(workspace) if workspace else None
        outside = [d for d in declared if ws is None or not ws.contains(d["path"])]
        if outside:
            raise ChronosError(
                f"refusing to replay {op[:12]}: it writes outside the workspace {workspace}, and a replay "
                "only writes inside it. Apply it by hand: "
                + "; ".join(_manual_recipe(store.root, {"path": d["path"], "pre": d["post"]}) for d in outside))
        signed = operators.authorize(self.core, "journal recover --replay",
                                     {"kind": events.ReplayedEvent.kind, "operation_id": op}, op)
        repo = store.repo()
        files = [Declared(d["path"], None if d["post"] is None else repo[d["post"]].data)   # type: ignore[attr-defined]  # a blob id
                 for d in declared]
        failure = None
        with self.calls.protect(Call(tool=info.get("tool") or "replay", args={"replay_of": op},
                                     workspace=workspace, session_id=info.get("session_id"), declared=files,
                                     replay_of=op, actor=actor), gate=False) as t:
            journal.append(events.ReplayedEvent, {"operation_id": op, "replay_operation_id": t.ticket.operation_id,
                                             "actor": actor, **signed})
            faults.hit("replay_after_marker")
            try:
                ws.write_files([(d.path, d.post) for d in files],   # type: ignore[union-attr]  # no workspace: all outside, refused above
                               fault="replay_mid_write")
            except (OSError, ChronosError) as exc:
                failure = exc
                t.outcome = failed_write(t.ticket, exc)
            else:
                t.outcome = Outcome(status="ok")
        if failure is not None:
            raise ChronosError(f"replay of {op[:12]} failed: {failure}")
        return Replayed(operation_id=op, replay_operation_id=t.ticket.operation_id,
                        paths=[d.path for d in files], post_checkpoint=t.record.post_checkpoint,
                        outcome=t.record.outcome)

    def _rollback(self, prefix: str, actor: str, *, dry_run: bool = False) -> RollbackResult:
        op = self._require_unresolved(prefix)
        store = self.core.store
        pre, workspace = op.pre_checkpoint, op.workspace
        boundary, kept = op.boundary_checkpoint, []
        if op.declared:
            ws = store.workspace(workspace) if workspace else None
            outside = [d for d in op.declared if ws is None or not ws.contains(d["path"]) or not pre]
            if outside:
                raise ChronosError(
                    f"operation {op.operation_id[:12]} changed paths outside the workspace {workspace}, and a "
                    "rollback only writes inside it. Put the pre-images back by hand, then resolve the "
                    "operation: " + "; ".join(_manual_recipe(store.root, d) for d in outside)
                    + f"; then `chronos-git journal resolve {op.operation_id[:12]} --outcome not_applied "
                      "--evidence ...`")
            paths = op.declared_paths
        elif pre and workspace:
            # what the call did: pre-checkpoint to the checkpoint taken when its crash was found;
            # what differs from that since is later work, kept (without one: everything since)
            paths = self._changed(workspace, pre, boundary)
            if boundary:
                kept = self._changed(workspace, boundary, None)
                paths = [p for p in paths if p not in set(kept)]
        else:
            raise ChronosError(f"operation {op.operation_id[:12]} has no pre-checkpoint to roll back to")
        signed = {} if dry_run else operators.authorize(self.core, "journal recover --rollback", {
            "kind": events.Resolved.kind, "operation_id": op.operation_id, "outcome": "rolled_back"},
            op.operation_id)                  # signed before anything is put back
        res = None
        if paths:
            res = self.time.restore(workspace, pre, paths=paths, clean=True, gate=False, actor=actor,
                                    tool="chronos.rollback", paths_must_exist=False, dry_run=dry_run,
                                    foreign_ok=True)      # the journal names it for this workspace
        scope = (f"the paths it changed up to checkpoint {boundary[:12]} (taken when its crash was found)"
                 if boundary else "every path that differs from it now")
        later = f"; {plural(len(kept), 'path')} changed later kept as they are" if kept else ""
        if dry_run:
            return RollbackResult(operation_id=op.operation_id, outcome=None, dry_run=True, restore=res,
                                  evidence=f"would roll back to pre-checkpoint {str(pre)[:12]} "
                                           f"{plural(len(paths), 'path')}, {scope}{later}",
                                  boundary_checkpoint=boundary, kept=kept,
                                  gate="open" if self.gate.is_open() else "closed")
        safety = res.safety_checkpoint if res else None
        text = (f"rolled back to pre-checkpoint {str(pre)[:12]}: {plural(len(paths), 'path')} restored, "
                f"{scope}{later}" + (f"; safety checkpoint {safety[:12]}" if safety else ""))
        self.core.journal.append(events.Resolved, {
            "operation_id": op.operation_id, "outcome": "rolled_back", "evidence": text, "actor": actor,
            "operator": operators.actor_record(), **signed,
            "rollback": {"pre_checkpoint": pre, "safety_checkpoint": safety, "paths": paths,
                         "boundary_checkpoint": boundary, "kept": kept}})
        return RollbackResult(operation_id=op.operation_id, outcome="rolled_back", evidence=text, restore=res,
                              boundary_checkpoint=boundary, kept=kept,
                              gate="open" if self.gate.is_open() else "closed")

    def _changed(self, workspace: str, a: str, b: str | None) -> list[str]:
        """Paths that differ between checkpoint `a` and `b` (None: the working tree), renames both sides."""
        changed = self.time.diff(workspace, a, b, patch=False).files
        return sorted({f.path for f in changed} | {f.old_path for f in changed if f.old_path})


def _manual_recipe(store_root, d: dict) -> str:
    if d.get("pre") is None:
        return f"`rm -- {shlex.quote(d['path'])}` (it did not exist before)"
    return (f"`git --git-dir {shlex.quote(str(store_root))} cat-file blob {d['pre']} > "
            f"{shlex.quote(d['path'])}`")
