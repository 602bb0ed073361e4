"""The one service layer behind every surface (model tools, /chronos, both CLIs,
the HTTP API).

`Chronos` is a small facade over composed parts, each with the dependencies it
declares (docs/design.md has the picture):

    core          settings, the store and its journal (opened lazily)
    gate          the recovery gate (one rule)
    snapshots     checkpoints before/after calls, at turn start, in the background
    calls         protected calls: `protect(call)`, the one transaction
    time          checkpoints, diffs, restores (a restore is a protected call)
    reconcile     crash settlement by evidence, the operator's journal commands
    maintenance   retention and compaction, protection state, health
    remotes       the journal's anchor (and checkpoints) on git remotes; push, fetch

Every public method returns a typed result (service.results); errors are
raised as the exceptions service.errors maps to exit and HTTP statuses.
"""
from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

from .. import settings as settings_mod
from ..engine.fsutil import realpath
from ..engine.store import Store
from ..journal_refs import events
from ..journal_refs.journal import REF as JOURNAL_REF
from ..journal_refs.witness import witness_path_for
from ..settings import Settings, store_location
from . import capture, disk_changes, operators, results, storecheck, watch_limit
from .calls import Call, Declared, Outcome, Ticket
from .core import Core
from .errors import Blocked
from .gate import Gate
from .maintenance import Upkeep
from .operator_key import OperatorKey
from .reconcile import Reconciler
from .remotes import Remotes
from .reverts import Reverts
from .settings_watch import ACCEPT as _ACCEPT, SettingsWatch
from .snapshots import Snapshots
from .startup import Startup
from .timemachine import TimeMachine
from .transaction import ProtectedCalls

NO_OPERATOR_KEY = ("no operator key: operator acts (resolve, recover, settings accept, remote add/remove) are "
                   "told apart from the agent's commands by process ancestry only, which a process handed to a "
                   "scheduler escapes. `ssh-keygen -t ed25519 -f ~/.ssh/chronos-operator` (with a passphrase), "
                   "then `chronos-git operator-key set ~/.ssh/chronos-operator`, from your own terminal, closes that")

__all__ = ["Chronos", "Call", "Declared", "Outcome", "Ticket", "Blocked", "results"]


class Chronos:
    _instances: dict[str, Chronos] = {}
    _guard = threading.Lock()

    def __init__(self, store_dir: Path, settings: Settings, *, create: bool = True,
                 problems: list[str] | None = None):
        self.core = Core(store_dir, settings, create=create, problems=problems)
        self.gate = Gate(self.core, self.start)
        self.snapshots = Snapshots(self.core)
        self.calls = ProtectedCalls(self.core, self.gate, self.snapshots, self.start)
        self.maintenance = Upkeep(self.core, self.start)
        self.time = TimeMachine(self.core, self.gate, self.calls, self.snapshots, self.start,
                                self.maintenance.maybe_compact)
        self.reverts = Reverts(self.core, self.time)
        self.reconcile = Reconciler(self.core, self.gate, self.calls, self.time, self.protection, self.start)
        self.remotes = Remotes(self.core, self.start)
        self.settings_watch = SettingsWatch(self.core)
        self._startup = Startup(self.core, self.settings_watch, self.reconcile, self.maintenance, self.remotes)
        self.snapshots.after_import = self._startup.after_import

    @classmethod
    def get(cls, store_dir: os.PathLike | str | None = None, settings: Settings | None = None, *,
            create: bool = True, problems: list[str] | None = None, reads_only: bool = False) -> Chronos:
        """The service of one store (cached per process).  `create=False` (read-only
        commands) never makes a store where there is none; `reads_only` (reading journal
        commands) makes one only where a store was: its journal checkpoint file is left, and
        opening it is how its deletion is found (a mistyped path gets "no store there")."""
        settings = settings or Settings()
        store_dir = Path(os.path.abspath(store_location(settings, store_dir)))
        if reads_only and not (Store.exists_at(store_dir) or witness_path_for(store_dir).exists()):
            create = False
        with cls._guard:
            inst = cls._instances.get(str(store_dir))
            if inst is None or inst.core.given != settings:
                inst = cls(store_dir, settings, create=create, problems=problems)
                cls._instances[str(store_dir)] = inst
            inst.core.create = inst.core.create or create
            if problems is not None:
                inst.core.settings_problems = list(problems)
            return inst

    @classmethod
    def forget_instances(cls) -> None:
        """Drop every cached service and store: what follows sees the store as a fresh process."""
        with cls._guard:
            cls._instances.clear()
        Store.forget_instances()

    # ------------------------------------------------------------- shared state
    @property
    def settings(self) -> Settings:
        return self.core.settings

    @property
    def background(self) -> bool:
        return self.core.background

    @background.setter
    def background(self, value: bool) -> None:
        self.core.background = value

    def store_exists(self) -> bool:
        return self.core.store_exists()

    def start(self) -> dict:
        """Once per process, before anything reads the store (service/startup.py)."""
        return self._startup.run()

    @property
    def startup(self) -> dict:
        """What this process's start found (settled calls, a power-cut repair, ...)."""
        return self._startup.report

    def wait_for_full_verify(self, timeout: float | None = None) -> bool:
        """Wait for the background full verification start() began; True when none is running."""
        return self._startup.wait_for_full_verify(timeout)

    # --------------------------------------------------------------- settings
    def watch_settings(self, reader, config_path: Path | None, *, env_overrides: bool = False) -> None:
        """A surface that reads the profile's settings: weakening changes are held for an operator
        (service/settings_watch.py); `env_overrides`: CHRONOS_GIT_SETTINGS rules this process too."""
        if self.settings_watch.reader is not None:
            self.settings_check()        # watched already (a surface asks per request): a stat
            return
        self.core.env_overrides = env_overrides
        self.settings_watch.watch(reader, config_path)
        if self._startup.started:
            self.settings_watch.check(force=True)
        elif self.store_exists() or (self.core.create and self.settings_watch.earlier_stores()):
            # before anything reads a setting: the record's values rule (a profile that had another
            # store makes this one now, so that an edit making every tool read-only is recorded too)
            self.start()

    def watch_profile(self, *, env_overrides: bool = False) -> None:
        """`watch_settings` for a surface outside Hermes (the CLI, the API, the dashboard), but
        only where this store is the profile's own: a command pointed at another store
        (--store, CHRONOS_GIT_STORE) reads no profile of its."""
        if self.settings_watch.reader is not None:
            self.settings_check()        # watched already (the dashboard asks per request): a stat
            return
        block = settings_mod.load(env=False)
        if block.problems or realpath(settings_mod.profile_store(block.settings)) != \
                realpath(self.core.store_dir):
            return
        self.watch_settings(lambda: settings_mod.load(env=False), settings_mod.hermes_home() / "config.yaml",
                            env_overrides=env_overrides)

    def settings_check(self) -> None:
        """Before any tool call: a changed config file is compared with the record (a stat when not)."""
        if self.store_exists():
            self.start()
            self.settings_watch.check()

    def settings_show(self) -> results.SettingsRecord:
        if self.store_exists():
            self.start()
        return self.settings_watch.describe()

    def settings_accept(self, keys: list[str], *, actor: str) -> results.SettingsRecord:
        self.start()
        self.settings_watch.check(force=True)
        return self.settings_watch.accept(keys, actor=actor)

    # ------------------------------------------------------------ operator key
    def operator_key_show(self) -> results.OperatorKeyInfo:
        if not self.store_exists():
            return results.OperatorKeyInfo(registered=False, note=NO_OPERATOR_KEY)
        self.start()
        key, found = OperatorKey(self.core).check()
        unsigned = storecheck.as_results(found) or []
        if key is None:
            return results.OperatorKeyInfo(registered=False, unsigned_acts=unsigned, note=NO_OPERATOR_KEY)
        return results.OperatorKeyInfo(registered=True, fingerprint=key.fingerprint, key_file=key.key_file,
                                       since_seq=key.seq, unsigned_acts=unsigned)

    def operator_key_set(self, key_file: str, *, actor: str) -> results.OperatorKeyInfo:
        """Register (or, signed by the old one, replace) the operator key: the operator's act."""
        self.start()
        who = operators.check(self.core, "operator-key set")
        done = OperatorKey(self.core).register(Path(key_file), who, actor=actor)
        return results.OperatorKeyInfo(registered=True, fingerprint=done["fingerprint"], key_file=done["key_file"],
                                       since_seq=done.get("event"), changed=done["changed"],
                                       replaced=done["replaced"])

    def capture_accept(self, workspace: str, *, actor: str) -> results.CaptureAccepted:
        """The operator accepts a workspace's reported narrowing of what is captured."""
        self.start()
        return capture.accept(self.core, workspace, actor=actor)

    def journal_countersign(self, seq: int, *, actor: str) -> results.Countersigned:
        """The operator owns an act that carries no valid signature (their own, made before the key
        could sign it, say): its finding clears.  Signed, and refused from the agent's tree."""
        self.start()
        who = operators.check(self.core, "journal countersign")
        fields = OperatorKey(self.core).countersign_fields(seq, who, actor=actor)
        signed = operators.authorize(self.core, "journal countersign", {"kind": events.Maintenance.kind, **fields})
        ev = self.core.journal.append(events.Maintenance, {**fields, **signed})
        self._startup.check_store()
        return results.Countersigned(event_seq=seq, event=fields["event"], what=fields["what"], seq=ev["seq"])

    # ------------------------------------------------------------------ calls
    def protect(self, call: Call, **kw):
        return self.calls.protect(call, **kw)

    def begin(self, call: Call, **kw) -> Ticket:
        return self.calls.begin(call, **kw)

    def finish(self, ticket: Ticket, outcome: Outcome) -> results.CallRecord:
        return self.calls.finish(ticket, outcome)

    def refusal(self, call: Call | None = None) -> results.Refusal | None:
        """What a protected call gets now instead of running, or None; given the `call`, a
        refusal is journaled."""
        return self.gate.refusal(call)

    def run_command(self, workspace: str, argv: list[str], **kw) -> results.RunResult:
        return self.calls.run_command(workspace, argv, **kw)

    def write_file(self, workspace: str, path: str, content: bytes, **kw) -> results.WriteResult:
        return self.calls.write_file(workspace, path, content, **kw)

    # ------------------------------------------------------------ time machine
    def snapshot(self, workspace: str, message: str = "manual checkpoint", **kw) -> results.SnapshotResult:
        return self.time.snapshot(workspace, message, **kw)

    def log(self, workspace: str, limit: int | None = 20, **kw) -> results.LogResult:
        return self.time.log(workspace, limit, **kw)

    def show(self, workspace: str, spec: str) -> results.ShowResult:
        return self.time.show(workspace, spec)

    def diff(self, workspace: str, from_spec: str | None = None, to_spec: str | None = None,
             **kw) -> results.DiffResult:
        return self.time.diff(workspace, from_spec, to_spec, **kw)

    def restore(self, workspace: str, spec: str, **kw) -> results.RestoreResult:
        return self.time.restore(workspace, spec, **kw)

    def agent_restore(self, workspace: str, spec: str, **kw) -> results.RestoreResult:
        """Take back what protected calls changed since `spec`; keep every other change."""
        return self._journaled(lambda: self.reverts.agent_restore(workspace, spec, **kw))

    def revert(self, workspace: str, operation: str | None = None, **kw) -> results.RestoreResult:
        return self._journaled(lambda: self.reverts.revert(workspace, operation, **kw))

    def undo(self, workspace: str, **kw) -> results.RestoreResult:
        return self._journaled(lambda: self.reverts.undo(workspace, **kw))

    def redo(self, workspace: str, **kw) -> results.RestoreResult:
        return self._journaled(lambda: self.reverts.redo(workspace, **kw))

    def _journaled(self, fn):
        """A merging operation reads the journal: this process's last outcomes first."""
        self.start()
        self.calls.settle_behind()
        return fn()

    def workspaces(self) -> results.WorkspacesResult:
        return self.time.workspaces()

    def known_workspace(self, path: str) -> str:
        return self.time.known_workspace(path)

    def turn_checkpoint(self, workspace: str, **kw) -> dict:
        return self.snapshots.turn_checkpoint(workspace, **kw)

    def flush(self) -> None:
        """At exit: write-behind outcomes, then stat caches kept in memory."""
        self.calls.settle_behind()
        self.snapshots.flush()

    # ---------------------------------------------------------------- journal
    def journal_status(self) -> results.JournalStatus:
        self.calls.settle_behind()            # this process's last call is in the answer
        existed = self.store_exists()
        res = self.reconcile.status()
        if not existed and self.store_exists():
            res.new_store = str(self.core.store_dir)
        res.remotes = self.remotes.list().remotes or None
        return res

    def journal_verify(self, checkpoint: dict | None = None, *, remote: str | None = None) -> results.VerifyResult:
        """The whole chain; with `remote`, also that this host's journal there is ours or an ancestor."""
        self.calls.settle_behind()
        res = self.reconcile.verify(checkpoint)
        found, _key = self._startup.tampering(full=True)         # the store is examined, never obeyed
        found += storecheck.record_findings(self.core, self.remotes)
        if found:
            res.tampering = storecheck.as_results(found)
            if res.status == "ok":
                res.status, res.code, res.error = "error", "store_tampered", storecheck.summary(found)
        self.core.tampered = storecheck.summary(found) if found else None
        if remote is not None and res.status == "ok":
            res.remote = self.remotes.verify(remote)
        return res

    def journal_export(self) -> results.JournalHeadResult:
        self.calls.settle_behind()            # every journal read sees this process's last outcome
        return self.reconcile.export_head()

    def disk_changes(self, workspace: str, after: str | None) -> results.DiskChanges:
        """Restores, reverts, undos and redos of the workspace journaled after event `after`."""
        self.calls.settle_behind()
        return disk_changes.since(self.core, self.reverts.events, self.time, workspace, after)

    def journal_log(self, limit: int | None = 50) -> results.EventsResult:
        self.calls.settle_behind()
        return self.reconcile.log(limit)

    def journal_show(self, operation_id: str) -> results.OperationEvents:
        self.calls.settle_behind()
        return self.reconcile.show(operation_id)

    def resolve(self, operation_id: str, outcome: str, evidence: str, **kw) -> results.ResolveResult:
        self.calls.settle_behind()
        return self.reconcile.resolve(operation_id, outcome, evidence, **kw)

    def recover(self, operation_id: str | None = None, **kw):
        self.calls.settle_behind()
        return self.reconcile.recover(operation_id, **kw)

    # ---------------------------------------------------------- for the host
    # what a surface needs beyond the commands, so that none reaches into the parts
    @property
    def store_dir(self) -> Path:
        return self.core.store_dir

    def journal_exists(self) -> bool:
        """A journal was ever written here (its witness or its ref): a report of a store whose
        journal went says so instead of showing an empty one."""
        if not self.store_exists():
            return False
        return self.core.journal.witness_path.exists() or self.core.store.repo().references.get(
            JOURNAL_REF) is not None

    def recovery_state(self) -> tuple[list[results.Operation], str]:
        """(the unresolved operations, the journal's integrity): what the model's alert says."""
        journal = self.core.journal
        ops = journal.unresolved() if journal.integrity == "ok" else []
        return [results.Operation(**o.to_dict()) for o in ops], journal.integrity

    def gate_state(self) -> results.Refusal | None:
        return self.gate.state()

    def settings_held(self) -> list[results.HeldSetting]:
        return self.settings_watch.held() if self.store_exists() else []

    def capture_narrowed(self) -> list[results.NarrowedCapture]:
        """Large narrowings of what is captured that nobody accepted (service/capture.py)."""
        if not self.store_exists():
            return []
        self.start()
        return capture.reported(self.core)

    def record_refusal(self, tool: str, code: str, reason: str, *, session_id: str | None = None,
                       tool_call_id: str | None = None, workspace: str | None = None) -> None:
        """Journal a call refused before it ran (e.g. a rollback denied at the approval prompt)."""
        self.start()
        self.core.journal.append(events.Refused, {
            "operation_id": uuid.uuid4().hex, "tool": tool, "code": code, "reason": reason,
            "session_id": session_id, "tool_call_id": tool_call_id, "workspace": workspace,
            "owner": self.core.journal.me.to_dict()})

    def check_protected(self, call: Call) -> None:
        """ProtectedPath when a file call targets chronos-git's own files (journaled as refused)."""
        self.calls.check_protected(call)

    def completed_before(self, session_id: str | None, tool: str, args: dict) -> dict | None:
        """An identical call that already completed in this session (duplicate_guard)."""
        return self.calls.completed_before(session_id, tool, args)

    def release_behind(self) -> None:
        """Write-behind outcomes, once the model request is on its way."""
        self.calls.release_behind()

    def answered(self) -> None:
        """Write-behind outcomes, once the model answered."""
        self.calls.answered()

    def after_turn(self) -> None:
        """A turn ended: its outcomes are durable, the journal's push starts in the background."""
        self.calls.settle_behind()
        self.remotes.kick()

    def compact_in_background_if_due(self) -> None:
        self.maintenance.compact_in_background_if_due()

    def drain_pushes(self, timeout: float) -> None:
        self.remotes.drain(timeout)

    def consolidation_due(self) -> bool:
        """A first import written for speed waits to be compressed."""
        return bool(self.maintenance.consolidation())

    def take_alerts(self, workspace: str | None = None) -> list[results.Settled]:
        return self.reconcile.take_alerts(workspace)

    # ---------------------------------------------------------------- remotes
    def remote_add(self, name: str, url: str, *, snapshots: bool = False) -> results.RemoteAdded:
        who = operators.check(self.core, "remote add")
        return self.remotes.add(name, url, snapshots=snapshots,
                                authorize=lambda claim: {**operators.authorize(self.core, "remote add", claim),
                                                         "operator": who})

    def remote_list(self) -> results.RemotesResult:
        return self.remotes.list()

    def remote_remove(self, name: str) -> results.RemoteRemoved:
        who = operators.check(self.core, "remote remove")
        return self.remotes.remove(name, authorize=lambda claim: {
            **operators.authorize(self.core, "remote remove", claim), "operator": who})

    def push(self, name: str | None = None, **kw) -> results.PushResult:
        return self.remotes.push(name, **kw)

    def fetch(self, name: str) -> results.FetchResult:
        return self.remotes.fetch(name)

    # ------------------------------------------------------------ maintenance
    def compact(self, **kw) -> results.CompactResult:
        return self.maintenance.compact(**kw)

    def consolidate(self, **kw) -> results.ConsolidateResult:
        return self.maintenance.consolidate(**kw)

    def protection(self, *, held: bool = True) -> results.Protection:
        """`held`: a held settings change makes it DEGRADED (the model's notice leaves it out: it is
        told apart, without the command that accepts it)."""
        p = watch_limit.degraded(self.maintenance.protection(self.snapshots.last), self.snapshots.watch.found())
        tampered = self.core.tampered            # found at this process's start or verify (the gate's reason)
        if tampered and p.state != "off":
            p = p.degraded(tampered, "remove what `chronos-git health` lists, then `chronos-git journal verify`")
        if not held:
            return p
        if self.store_exists() and self.core.journal_opened() is not None:
            p = capture.degraded(p, capture.reported(self.core))
        return self._with_held(p, self.settings_watch.held() if self.store_exists() else [])

    @staticmethod
    def _with_held(p: results.Protection, held: list[results.HeldSetting]) -> results.Protection:
        """A weakening settings change held for the operator makes protection DEGRADED on every surface."""
        if not held or p.state == "off":
            return p
        return p.degraded(
            f"a weakening change of chronos-git's settings ({', '.join(h.key for h in held)}) waits for "
            "the operator; the previous values stay in force",
            f"if you made it: `{_ACCEPT} {' '.join(h.key for h in held)}`; if not, undo it in config.yaml")

    def health(self, workspace: str | None = None) -> results.HealthResult:
        self.calls.settle_behind()
        info = None
        if self.store_exists():
            self.start()
            if workspace:
                info = self.time.describe(self.core.store.workspace(workspace), detail=True)
        limited = watch_limit.shown(info, self.snapshots.watch.found())
        out = self.maintenance.health(info, gate_open=self.gate.is_open, last_snapshot=self.snapshots.last,
                                      deferred=self.startup.get("deferred"))
        out.protection = watch_limit.degraded(out.protection, limited)
        out.jobs = self.core.jobs.states() or None
        if self.store_exists():
            remotes = self.remotes.list().remotes
            out.remotes = remotes or None
            found, key = self._startup.tampering()
            out.operator_key, out.operator_key_note = (key.fingerprint, None) if key else (None, NO_OPERATOR_KEY)
            if found:
                out.tampering = storecheck.as_results(found)
                if out.protection.state != "off":
                    out.protection = out.protection.degraded(
                        storecheck.summary(found, detail=False),
                        "remove each one (listed below, with its fix), then `chronos-git journal verify`")
            held = self.settings_watch.held()
            if held:
                out.settings_held = held
                out.protection = self._with_held(out.protection, held)
            changes = self.calls.recent_changes()         # calls that changed chronos-git's own files
            if changes:
                out.protected_changes = [results.ProtectedChange(**c) for c in changes]
        return out

    def git_passthrough(self, argv: list[str]) -> results.GitRun:
        """`chronos-git git ARGS…`: stock git over the store, refused while the store audit
        finds anything (service/storecheck.py)."""
        return storecheck.git_passthrough(self.core, self.remotes, argv)
