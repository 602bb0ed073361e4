"""What a process does once before anything reads the store: the check after a reboot, the
journal opened (healed, verified from its last verified head), the profile's settings against
the record, the checkpoints the journal names, the store audit and the operator acts'
signatures, crashed file calls settled by evidence, temp names swept; and, in a long-lived
host, the whole chain re-verified in the background at most once a day.
"""
from __future__ import annotations

import threading

import pygit2

from ..engine import inflight, powercut
from ..engine.errors import ChronosError, explain
from ..journal_refs import JournalError, checkpoints, events
from . import storecheck
from .core import Core
from .maintenance import Upkeep
from .operator_key import Key, OperatorKey
from .reconcile import Reconciler
from .remotes import Remotes
from .settings_watch import SettingsWatch


class Startup:
    def __init__(self, core: Core, settings_watch: SettingsWatch, reconcile: Reconciler,
                 maintenance: Upkeep, remotes: Remotes):
        self.core = core
        self._settings_watch, self._reconcile = settings_watch, reconcile
        self._maintenance, self._remotes = maintenance, remotes
        self._lock = threading.Lock()
        self._started = False
        self.report: dict = {}

    @property
    def started(self) -> bool:
        return self._started

    def run(self) -> dict:
        """Open the journal, settle crashed file calls by evidence and sweep temp names left by
        dead restores (once per process); a full or read-only store defers the writes."""
        with self._lock:
            if self._started:
                return self.report
            journal = self.core.journal
            power = self._after_reboot()
            journal.open()
            settled, deferred = [], None
            if power and power.get("refused"):
                journal.alarm([power["refused"]])      # no reboot: tampering, not a power cut
            elif power is not None:
                moved = {r.get("workspace") for r in power.get("refs_repaired") or ()}
                lost = [e for e in self._lost_in_power_cut() if e["workspace"] not in moved] \
                    if journal.integrity == "ok" and not power.get("same_boot") else []
                if lost:
                    power["checkpoints_lost"] = lost
                if not (powercut.repaired(power) or lost or power.get("error")):
                    power = None          # swept, nothing to say
            if power and not power.get("refused") and journal.integrity == "ok":
                try:
                    journal.append(events.Maintenance, {"operation_id": None, "action": "power_cut_repair",
                                                        "boot_id": powercut.current_boot(), **power})
                except (JournalError, OSError):
                    pass                 # the repair stands; startup and health still say so
            if journal.integrity == "ok":
                self._settings_watch.check(force=True)     # the profile's settings against the record
            trust = self._check_checkpoints() if journal.integrity == "ok" else None
            if journal.integrity == "ok":
                self.check_store()
            if journal.integrity == "ok":
                try:
                    settled = self._reconcile.settle_by_evidence()
                except (JournalError, ChronosError, OSError) as exc:
                    deferred = f"crashed calls could not be settled now: {exc}"
            try:
                swept = inflight.sweep(self.core.store)
            except OSError:
                swept = 0
            self.report = {"integrity": journal.integrity, "healed": journal.healed, "settled": settled}
            if deferred:
                self.report["deferred"] = deferred
            if swept:
                self.report["temp_files_removed"] = swept
            if power:
                self.report["power_cut_repair"] = power
            if trust is not None:
                self.report["checkpoints_checked"] = {"events": trust.events, "full": trust.full,
                                                       "seconds": trust.seconds}
            if self.core.background and journal.integrity == "ok" and (
                    journal.full_verify_due() or checkpoints.full_check_due(self.core.store)):
                # a long-lived host re-verifies the whole chain at most once a day, off every
                # call's path: damage below the last verified head is found without an operator
                self.core.jobs.start("verify", "verify", self._full_verify)
            if self.core.background and journal.integrity == "ok":
                self._maintenance.consolidate_in_background()     # what a previous process left
            self._started = True
            return self.report

    def after_import(self) -> None:
        """A long-lived host consolidates a first import in the background (the CLI's
        `snapshot` does it in the foreground, with progress)."""
        if self.core.background:
            self._maintenance.consolidate_in_background()

    def _after_reboot(self) -> dict | None:
        """Once per boot, before anything reads the store: what a power cut broke (engine.powercut)."""
        if not self.core.store_exists():
            return None

        def known() -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            self.core.journal.open()
            for ev in self.core.journal.events(None):
                for key in ("post_checkpoint", "pre_checkpoint", "safety_checkpoint"):
                    if ev.get(key) and ev.get("workspace"):
                        out.setdefault(ev["workspace"], []).append(ev[key])
            return out

        def same_boot() -> str | None:
            # the record of this boot's check is gone, yet the journal last wrote in this boot
            try:
                self.core.journal.open()
                boot, seq = self.core.journal.last_boot()
            except (JournalError, OSError, ValueError, KeyError, pygit2.GitError):
                return None          # unknown (an old or damaged journal): repaired as before
            now = powercut.current_boot()
            if boot is None or boot != now:
                return None
            return (f"{self.core.store.meta_dir / powercut.MARKER} (the record of this boot's power-cut "
                    f"check) is missing, yet the journal last recorded this very boot (boot id {now}, at "
                    f"journal seq {seq}): no reboot happened since, so the damage found is not a power "
                    "cut's and is not repaired as one")
        try:
            return powercut.after_reboot(self.core.store, journal_checkpoints=known, same_boot=same_boot,
                                         always=True)
        except (OSError, pygit2.GitError) as exc:
            return {"error": f"the check after a reboot could not run: {explain(exc, self.core.store_dir)}"}

    def _lost_in_power_cut(self) -> list[dict]:
        """After a reboot: the checkpoints the journal names that the cut took (never synced),
        as entries of the power_cut_repair event, which makes those moves legitimate."""
        try:
            return checkpoints.lost_in_power_cut(checkpoints.check(self.core.journal))
        except (JournalError, OSError, ValueError, KeyError, pygit2.GitError):
            return []

    def check_store(self, *, full: bool = False) -> None:
        """What the store holds that chronos-git never writes (a planted pager, a replace ref, a
        rewritten URL ...) closes this process's gate at its start, until a verify finds it gone.
        Not the journal alarm: the journal is intact, and a call in flight in another process
        must still record its outcome."""
        try:
            found, _key = self.tampering(full=full)
        except (OSError, ValueError, pygit2.GitError):
            return                   # unreadable: health and verify say what
        self.core.tampered = storecheck.summary(found) if found else None

    def tampering(self, *, full: bool = False) -> tuple[list, Key | None]:
        """What the store audit finds and the operator acts without a valid signature (one walk,
        which also names the operator key in force)."""
        key, unsigned = self._acts(full=full)
        return storecheck.findings(self.core, self._remotes) + unsigned, key

    def _acts(self, *, full: bool = False) -> tuple[Key | None, list]:
        try:
            return OperatorKey(self.core).check(full=full)
        except (JournalError, pygit2.GitError, OSError, ValueError, KeyError):
            # the chain itself unreadable (a damaged event): the journal's own checks say so and
            # close the gate; an event the walk cannot judge is a finding of its own (operator_key)
            return None, []

    def _check_checkpoints(self):
        """What the journal names against the checkpoint refs, from the last checked head on
        (journal_refs/checkpoints.py); a problem is the journal alarm (the gate closes)."""
        journal = self.core.journal
        try:
            res = checkpoints.check(journal)
        except (JournalError, OSError, ValueError, KeyError, pygit2.GitError):
            return None              # unreadable: the full verification says what
        if res.problems:
            journal.alarm(res.problems)
        else:
            checkpoints.note_checked(self.core.store, res)
        return res

    def wait_for_full_verify(self, timeout: float | None = None) -> bool:
        """Wait for the background full verification start() began; True when none is running."""
        return self.core.jobs.wait("verify", timeout)

    def _full_verify(self, job) -> None:
        """The whole chain, and every operator act's signature, not only the newest (what it
        finds is in the journal's state and the gate; the job records nothing else)."""
        try:
            self._reconcile.verify()
        finally:                     # the signatures are checked even when the chain's verify failed
            self.check_store(full=True)
