"""Reconciling the journal with the world: settling crashed file operations by
evidence, the pending-alert queue, and the operator's journal commands
(status, verify, resolve, recover with replay or rollback).

A mixin of service.Chronos: it uses the service's journal, store, gate,
protected-call (begin/finish) and restore machinery.
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from .calls import Call, Declared, Outcome
from .engine import treecheck
from .engine.errors import ChronosError
from .engine.fsutil import atomic_write
from .journal_refs import IntegrityError, TransitionError, recovery
from .journal_refs.recovery import UNKNOWN


class Reconciliation:
    # ------------------------------------------------------ crash settlement
    def settle_by_evidence(self, operation_id: str | None = None) -> list[dict]:
        """Crashed file operations: completed / not applied / uncertain by comparing disk with images."""
        out = []
        for op in self.journal.unresolved():
            if operation_id and op["operation_id"] != operation_id:
                continue
            if op["state"] != "pending":
                continue
            info = self.journal.state.open[op["operation_id"]]
            declared = info.get("declared")
            if not declared:
                out.append({"operation_id": op["operation_id"], "tool": op["tool"],
                            "result": "needs_operator",
                            "why": "no declared paths: a shell command or external effect cannot be "
                                   "settled by evidence"})
                continue
            verdict, items = recovery.evidence(declared)
            text = recovery.describe(items)
            try:
                if verdict == "completed":
                    self.journal.append("recovered", {
                        "operation_id": op["operation_id"], "outcome": "completed", "evidence": items,
                        "actor": "chronos-git recovery", "note": "all declared paths at their post-image"})
                elif verdict == "not_applied":
                    replayable = all(d.get("post", UNKNOWN) != UNKNOWN for d in declared)
                    self.journal.append("recovered", {
                        "operation_id": op["operation_id"], "outcome": "not_applied", "evidence": items,
                        "replayable": replayable, "actor": "chronos-git recovery",
                        "note": "all declared paths at their pre-image"})
                else:
                    self.journal.append("uncertain", {
                        "operation_id": op["operation_id"], "reason": "partial", "evidence": items})
            except TransitionError:
                continue        # another process settled it between our look and our append
            out.append({"operation_id": op["operation_id"], "tool": op["tool"], "result": verdict,
                        "evidence": text, "paths": [i["path"] for i in items]})
        self._queue_alerts(out)
        return out

    # alerts survive the process that settled them: the next model session reads them once
    def _alerts_path(self) -> Path:
        return self.store.meta_dir / "pending-alerts.json"

    def _queue_alerts(self, settled: list[dict]) -> None:
        if not settled:
            return
        with self.store.lock("alerts"):
            try:
                cur = json.loads(self._alerts_path().read_text())
            except (FileNotFoundError, ValueError):
                cur = []
            known = {a["operation_id"] for a in cur}
            cur += [s for s in settled if s["operation_id"] not in known]
            atomic_write(self._alerts_path(), json.dumps(cur).encode())

    def take_alerts(self) -> list[dict]:
        """Settlements no model session has been told about yet (read once)."""
        with self.store.lock("alerts"):
            try:
                cur = json.loads(self._alerts_path().read_text())
            except (FileNotFoundError, ValueError):
                return []
            self._alerts_path().unlink(missing_ok=True)
            return cur

    # ----------------------------------------------------------------- journal
    def journal_status(self) -> dict:
        self.start()
        st = self.journal.status()
        st["settled_at_start"] = self.startup.get("settled", [])
        st["gate"] = "open" if self.gate() is None else "closed"
        st["protection"] = self.protection()
        return {"status": "ok", **st}

    def journal_verify(self, checkpoint: dict | None = None) -> dict:
        """The journal's chain and witness, and every checkpoint tree's entry names."""
        self.start()
        res = self.journal.verify(checkpoint)
        trees = treecheck.check_checkpoints(self.store)
        out = {"status": "ok", **res, "checkpoint_trees": trees}
        if res["integrity"] != "ok":
            out.update(status="error", error=res["integrity"])
        elif trees["problems"]:
            out.update(status="error", error="checkpoints hold entries that git's fsck rejects (a restore "
                                             "refuses them): " + "; ".join(trees["problems"][:5]))
        return out

    def journal_checkpoint(self) -> dict:
        self.start()
        if self.journal.integrity != "ok":
            raise IntegrityError(f"refusing to export a checkpoint of a journal in doubt: {self.journal.integrity}")
        return {"status": "ok", "checkpoint": self.journal.export_checkpoint()}

    def journal_log(self, limit: int | None = 50) -> dict:
        self.start()
        return {"status": "ok", "events": self.journal.events(limit)}

    def journal_show(self, operation_id: str) -> dict:
        self.start()
        op = self._match_op(operation_id, include_closed=True)
        evs = [e for e in self.journal.events(None) if e.get("operation_id") == op]
        return {"status": "ok", "operation_id": op, "events": list(reversed(evs))}

    def _match_op(self, prefix: str, *, include_closed: bool = False) -> str:
        prefix = (prefix or "").strip().lower()
        if len(prefix) < 6:
            raise ChronosError("give at least 6 characters of the operation id")
        candidates = set(self.journal.state.open) | set(self.journal.state.replayable)
        matches = [o for o in candidates if o.startswith(prefix)]
        if not matches and include_closed:
            matches = sorted({e["operation_id"] for e in self.journal.events(None, kinds={"started"})
                              if e["operation_id"].startswith(prefix)})
        if not matches:
            raise ChronosError(f"no operation {prefix!r} is open" + ("" if include_closed else
                               " (it may be closed already: see `journal log`)"))
        if len(matches) > 1:
            raise ChronosError(f"operation prefix {prefix!r} is ambiguous")
        return matches[0]

    def resolve(self, operation_id: str, outcome: str, evidence: str, *, actor: str = "operator") -> dict:
        self.start()
        if outcome not in ("completed", "not_applied"):
            raise ChronosError("outcome must be 'completed' or 'not_applied' (use recover --rollback to roll back)")
        if not (evidence or "").strip():
            raise ChronosError("resolving needs non-empty --evidence: what shows the outcome?")
        op = self._require_unresolved(operation_id)
        ev = self.journal.append("resolved", {"operation_id": op, "outcome": outcome,
                                              "evidence": evidence.strip(), "actor": actor})
        return {"status": "ok", "operation_id": op, "outcome": outcome, "event": ev["seq"],
                "gate": "open" if self.gate() is None else "closed"}

    def _require_unresolved(self, prefix: str) -> str:
        op = self._match_op(prefix)
        unresolved = {o["operation_id"]: o for o in self.journal.unresolved()}
        if op not in unresolved:
            if op in self.journal.state.open:
                owner = self.journal.state.open[op].get("owner") or {}
                raise ChronosError(f"operation {op[:12]} is still running (pid {owner.get('pid')} is alive); "
                                   "stop that process first")
            raise ChronosError(f"operation {op[:12]} is not unresolved")
        return op

    def recover(self, operation_id: str | None = None, *, replay: bool = False,
                rollback: bool = False, actor: str = "operator") -> dict:
        self.start()
        if replay and rollback:
            raise ChronosError("choose --replay or --rollback, not both")
        if rollback:
            if not operation_id:
                raise ChronosError("--rollback needs an operation id")
            return self._rollback(operation_id, actor)
        settled = self.settle_by_evidence(self._match_op(operation_id) if operation_id else None)
        out = {"status": "ok", "settled": settled}
        if replay:
            targets = ([self._match_op(operation_id)] if operation_id else sorted(self.journal.state.replayable))
            out["replayed"] = [self._replay(op, actor) for op in targets]
        out["unresolved"] = self.journal.unresolved()
        out["gate"] = "open" if self.gate() is None else "closed"
        return out

    def _replay(self, op: str, actor: str) -> dict:
        info = self.journal.state.replayable.get(op)
        if info is None:
            raise ChronosError(f"operation {op[:12]} is not replayable (not settled as not applied, "
                               "or replayed already)")
        declared = info["declared"]
        verdict, items = recovery.evidence(declared)
        if verdict != "not_applied":
            raise ChronosError(f"refusing to replay {op[:12]}: its paths no longer equal their pre-image "
                               f"({recovery.describe(items)})")
        workspace = info.get("workspace")
        ws = self.store.workspace(workspace) if workspace else None
        outside = [d for d in declared if ws is None or not ws.contains(d["path"])]
        if outside:
            raise ChronosError(
                f"refusing to replay {op[:12]}: it writes outside the workspace {workspace}, and a replay "
                "only writes inside it. Apply it by hand: "
                + "; ".join(_manual_recipe(self.store.root, {"path": d["path"], "pre": d["post"]})
                            for d in outside))
        repo = self.store.repo()
        calls = [Declared(d["path"], None if d["post"] is None else repo[d["post"]].data) for d in declared]
        ticket = self.begin(Call(tool=info.get("tool") or "replay", args={"replay_of": op},
                                 workspace=workspace, session_id=info.get("session_id"), declared=calls,
                                 replay_of=op, actor=actor), gate=False)
        self.journal.append("replayed", {"operation_id": op, "replay_operation_id": ticket.operation_id,
                                         "actor": actor})
        try:
            ws.write_files([(d.path, d.post) for d in calls])
        except (OSError, ChronosError) as exc:
            self.finish(ticket, self._failed_write(ticket, exc))
            raise ChronosError(f"replay of {op[:12]} failed: {exc}") from None
        fin = self.finish(ticket, Outcome(status="ok"))
        return {"operation_id": op, "replay_operation_id": ticket.operation_id,
                "paths": [d.path for d in calls], **{k: fin[k] for k in ("post_checkpoint", "outcome")}}

    def _rollback(self, prefix: str, actor: str) -> dict:
        op = self._require_unresolved(prefix)
        info = self.journal.state.open[op]
        pre = info.get("pre_checkpoint")
        workspace = info.get("workspace")
        restored_outside: list[str] = []           # a rollback never writes there any more
        paths_in = []
        if info.get("declared"):
            ws = self.store.workspace(workspace) if workspace else None
            outside = [d for d in info["declared"] if ws is None or not ws.contains(d["path"]) or not pre]
            if outside:
                raise ChronosError(
                    f"operation {op[:12]} changed paths outside the workspace {workspace}, and a rollback "
                    "only writes inside it. Put the pre-images back by hand, then resolve the operation: "
                    + "; ".join(_manual_recipe(self.store.root, d) for d in outside)
                    + f"; then `chronos-git journal resolve {op[:12]} --outcome not_applied --evidence ...`")
            paths_in = [d["path"] for d in info["declared"]]
        elif pre and workspace:
            changed = self.diff(workspace, pre, None, patch=False)["files"]
            paths_in = sorted({f["path"] for f in changed} | {f.get("old_path") for f in changed if f.get("old_path")})
        else:
            raise ChronosError(f"operation {op[:12]} has no pre-checkpoint to roll back to")
        res = None
        if paths_in:
            res = self.restore(workspace, pre, paths=paths_in, clean=True, gate=False, actor=actor,
                               tool="chronos.rollback")
        evidence = (f"rolled back to pre-checkpoint {str(pre)[:12]}: {len(paths_in) + len(restored_outside)} "
                    f"path(s) restored" + (f"; safety checkpoint {res['safety_checkpoint'][:12]}" if res else ""))
        self.journal.append("resolved", {"operation_id": op, "outcome": "rolled_back", "evidence": evidence,
                                         "actor": actor,
                                         "rollback": {"pre_checkpoint": pre,
                                                      "safety_checkpoint": res["safety_checkpoint"] if res else None,
                                                      "paths": paths_in + restored_outside}})
        return {"status": "ok", "operation_id": op, "outcome": "rolled_back", "evidence": evidence,
                "restore": res, "gate": "open" if self.gate() is None else "closed"}


def _manual_recipe(store_root, d: dict) -> str:
    if d.get("pre") is None:
        return f"`rm -- {shlex.quote(d['path'])}` (it did not exist before)"
    return (f"`git --git-dir {shlex.quote(str(store_root))} cat-file blob {d['pre']} > "
            f"{shlex.quote(d['path'])}`")
