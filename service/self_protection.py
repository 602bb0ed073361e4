"""chronos-git protecting its own files from the calls it records.

The protected set (service/protected.py: the store, the journal's witness, the plugin's
code) is guarded twice around a protected call: a call that declares a path in it is
refused before anything is snapshotted or run (journaled as `refused`), and a shell call,
whose paths nobody declares, is caught afterwards: the set's fingerprint taken after its
intent is compared with the one after it returned, and a change (not chronos-git's own
journaled maintenance) is named in its outcome (`protected_changed`) and kept for health.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from ..engine import store_audit
from ..engine.state_file import StateFile
from ..settings import hermes_home
from . import refusals
from .calls import Call, Outcome, Ticket
from .core import Core
from .errors import ProtectedPath
from .protected import WHAT, Hit, ProtectedSet, compaction_running, plugin_roots

log = logging.getLogger("chronos_git")

CHANGES_KEPT = 20          # protected-file changes `health` can name (chronos/protected-changes.json)


class SelfProtection:
    """The protected set of one store, and what calls did to it."""

    def __init__(self, core: Core, start):
        self.core = core
        self.start = start                 # the service's start: the journal opened
        self._protected: ProtectedSet | None = None
        self._guard = threading.Lock()

    def protected(self) -> ProtectedSet:
        """The protected set of this store (service/protected.py), resolved once."""
        with self._guard:
            if self._protected is None:
                try:
                    home = hermes_home()
                except Exception:          # noqa: BLE001 (no Hermes here: the package folder only)
                    home = None
                self._protected = ProtectedSet(self.core.store_dir, self.core.journal.witness_path,
                                               plugin_roots(home), watch=self.core.background)
            return self._protected

    def refuse(self, call: Call) -> None:
        """Refuse (ProtectedPath) a call that declares a path in the protected set, before
        anything is snapshotted or run; the refusal is journaled (a `refused` event)."""
        if not call.declared:
            return
        hits = self.protected().hits(d.path for d in call.declared)
        if not hits:
            return
        paths = [{"path": h.path, "resolved": h.resolved, "what": h.what} for h in hits]
        op, recorded = refusals.record(self.core, self.start, call, ProtectedPath.code, paths=paths)
        raise ProtectedPath(_refusal(call.tool, hits, op, recorded), operation_id=op, paths=paths,
                            recorded=recorded)

    def baseline(self) -> tuple[int, bool, dict] | None:
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

    def mark_changes(self, ticket: Ticket, outcome: Outcome) -> None:
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

    def _changes(self) -> StateFile:
        return StateFile(self.core.store.meta_dir, "protected-changes.json")

    def _keep_change(self, ticket: Ticket, changed: list[str]) -> None:
        def add(cur) -> list[dict]:
            kept = _recent(cur, None)
            kept.append({"operation_id": ticket.operation_id, "tool": ticket.call.tool, "paths": changed,
                         "workspace": ticket.call.workspace, "time": time.time()})
            return kept[-CHANGES_KEPT:]
        self._changes().update(add, [])

    def recent_changes(self, max_age_s: float | None = 7 * 86400) -> list[dict]:
        """Calls that changed chronos-git's own files (newest last), kept for `health`; the
        journal's outcome events are the record.  A missing or damaged list: none."""
        return _recent(self._changes().read([]), max_age_s)


def _recent(cur, max_age_s: float | None) -> list[dict]:
    now = time.time()
    return [c for c in cur if isinstance(c, dict) and isinstance(c.get("time"), (int, float))
            and (max_age_s is None or now - c["time"] <= max_age_s)]


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
