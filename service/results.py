"""What the service returns: typed results, one model per answer.

These models are the contract every surface shares: the CLI and `/chronos`
render them by type (cli/render.py), `--json` and the model tools print
`wire()`, and every HTTP route declares one as its `response_model`, so the
OpenAPI schema is what the dashboard and Desktop panes may read.

Wire rules (`wire()`): a field whose default is None is left out while it is
None (so optional facts appear only when they exist); required fields always
appear, `null` included.  Names that are not UTF-8 get a `_b64` twin
(engine.codec.jsonable); the path-like ones are declared below so clients
may rely on them.
"""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..deployment import Deployment
from ..engine.codec import jsonable


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_assignment=True)

    def wire(self) -> dict:
        """The JSON document (a dict): what --json prints and HTTP sends."""
        return jsonable(_dump(self))


# a value read back from the journal as written: an edited event's odd value is shown as its JSON
# text, never an error that would hide the rest of an answer
def _as_text(v: Any) -> str | None:
    return v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


_Text = Annotated[str | None, BeforeValidator(_as_text)]


def _dump(obj):
    if isinstance(obj, BaseModel):
        out = {}
        for name, field in type(obj).model_fields.items():
            value = getattr(obj, name)
            if value is None and not field.is_required() and field.default is None:
                continue
            out[field.alias or name] = _dump(value)
        for name, value in (obj.__pydantic_extra__ or {}).items():
            out[name] = _dump(value)
        return out
    if isinstance(obj, list):
        return [_dump(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


class Result(Model):
    """Every answer has a status; `error` says what went wrong when it is "error"."""
    status: Literal["ok", "error"] = "ok"
    error: str | None = None


class ErrorResult(Result):
    status: Literal["error"] = "error"
    error: str
    code: str | None = None


# ------------------------------------------------------------------ checkpoints
class Skipped(Model):
    path: str
    path_b64: str | None = None
    reason: str
    size: int | None = None


class CheckpointInfo(Model):
    id: str
    short_id: str
    time: float
    time_iso: str
    description: str
    kind: str
    tool: str | None
    session_id: str | None
    turn_id: str | None
    tool_call_id: str | None
    files: int
    skipped: list[Skipped]
    nested_repos: list[str]
    nested_repos_b64: list[str | None] | None = None
    added_bytes: int
    note: str | None = None
    index: int | None = Field(None, description="1 = newest, in a listing")
    number: int | None = Field(None, description="its number in the workspace, given once and never changed "
                                                 "(`@N` names it); None only for one off the workspace's chain")
    role: str | None = Field(None, description="what it is for: baseline, before_call, after_call, turn_start, "
                                               "safety, manual, restored, boundary (None: not known)")
    roles: list[str] | None = Field(None, description="in a listing: every role it served, its own and those "
                                                     "the journal gives it (a checkpoint is reused when nothing "
                                                     "changed: one call's after-call is the next one's before-call)")
    restored_from: str | None = Field(None, description="the checkpoint a time-machine operation put back: "
                                                        "this one starts a branch of the timeline there")
    parents: list[str] | None = Field(None, description="in a listing: its parent in the timeline (the "
                                                        "checkpoint before it, or the one it was restored from)")
    damaged: str | None = Field(None, description="why its metadata cannot be trusted (the fields it lacked "
                                                  "are shown at their defaults); its files still restore")


class Damage(Model):
    """Something in a workspace's history that cannot serve, and why (shown, never fatal)."""
    workspace: str | None = None
    workspace_b64: str | None = None
    ref: str | None = Field(None, description="the checkpoint ref, when it is what names nothing usable")
    id: str | None = Field(None, description="the commit (or what the ref names)")
    reason: str


class DamagedTip(Model):
    """A snapshot's ref named no checkpoint that can serve: the new one replaced it."""
    reason: str
    was: str | None = Field(None, description="what the ref named")
    parent: str | None = Field(None, description="the checkpoint it was made on (the workspace's HEAD); "
                                                 "null: it starts a fresh chain")


class IgnoreChange(Model):
    """A snapshot's ignore rules changed since the previous checkpoint (engine/narrowing.py)."""
    sources: list[str] = Field(description="the ignore files that changed: workspace-relative, or absolute "
                                           "(the store's exclude files)")
    sources_b64: list[str | None] | None = None
    count: int = Field(description="paths of the checkpoint the rules now ignore (they stay captured; files "
                                   "created there later are left out)")
    files: int = Field(description="paths in the checkpoint")
    sample: list[str]
    sample_b64: list[str | None] | None = None
    complete: bool = Field(description="false: counting ran out of time, `count` is a floor")
    large: bool = Field(description="reported like a weakening setting (at least 20 paths, or a quarter)")


class NarrowedCapture(Model):
    """A large narrowing of what a workspace's checkpoints capture, not accepted by an operator."""
    workspace: str
    workspace_b64: str | None = None
    checkpoint: str | None
    count: int
    files: int
    sample: list[str]
    sample_b64: list[str | None] | None = None
    sources: list[str]
    sources_b64: list[str | None] | None = None
    complete: bool = True
    since_seq: int | None = Field(None, description="the journal event that recorded it")


class CaptureAccepted(Result):
    """`chronos-git capture accept`: the operator accepted a workspace's narrowing of capture."""
    workspace: str
    workspace_b64: str | None = None
    accepted: bool
    count: int | None = None
    sources: list[str] | None = None
    sources_b64: list[str | None] | None = None
    note: str | None = None


class SnapshotResult(Result):
    workspace: str
    workspace_b64: str | None = None
    checkpoint: str | None
    created: bool
    partial: bool
    tree: str
    skipped: list[Skipped]
    nested_repos: list[str]
    nested_repos_b64: list[str | None] | None = None
    files: int
    kind: str
    scan: str
    fallback: bool | None = None
    checkpoint_info: CheckpointInfo | None
    note: str | None = None          # e.g. a label that was not kept (nothing changed)
    damaged_tip: DamagedTip | None = None
    ignore_change: IgnoreChange | None = Field(
        None, description="the ignore rules changed since the previous checkpoint: what they now ignore")
    ignore_change_error: str | None = Field(
        None, description="the checkpoint is made, but whether its ignore rules changed could not be judged")


class LogResult(Result):
    workspace: str
    workspace_b64: str | None = None
    checkpoints: list[CheckpointInfo]
    all: bool = Field(False, description="every checkpoint (`--all`), not only the current line of the timeline")
    graph: bool = Field(False, description="for people: drawn as the timeline's tree (`--graph`)")
    note: str | None = None
    damaged: list[Damage] | None = Field(None, description="a ref or commit that cannot be read (the listing "
                                                           "ends there); damaged metadata is marked per checkpoint")


class DiffFile(Model):
    path: str
    path_b64: str | None = None
    status: Literal["added", "deleted", "modified", "renamed"]
    old_path: str | None = None
    old_path_b64: str | None = None
    similarity: int | None = None
    mode: str | None = Field(None, description="its git mode's change, e.g. '100644 -> 100755' (null: none)")
    binary: bool | None = None
    additions: int
    deletions: int


class DiffStats(Model):
    files: int
    additions: int
    deletions: int


class DiffResult(Result):
    from_: str = Field(alias="from")
    to: str = Field(description="a checkpoint id, or 'working tree'")
    files: list[DiffFile]
    stats: DiffStats
    patch: str | None = None
    patch_truncated: bool | None = None


class ShowResult(Result):
    checkpoint: CheckpointInfo
    changes: DiffResult | None = Field(None, description="what it recorded against the one before")


class PlanItem(Model):
    path: str
    path_b64: str | None = None
    action: Literal["restore", "create", "delete", "skip", "keep", "failed", "conflict"]
    reason: str | None = None
    agent: str | None = Field(None, description="a conflict: what the agent's call did to it")
    person: str | None = Field(None, description="a conflict: what changed it outside the calls afterwards")
    merged: bool | None = Field(None, description="agent-only restore, revert, undo, redo: its new content keeps "
                                                  "changes made after the calls taken back (merged hunk by hunk); "
                                                  "absent: it goes back to what it was before them")


class RestoreResult(Result):
    restored_checkpoint: str
    target: CheckpointInfo | None = Field(None, description="the checkpoint restored to")
    safety_checkpoint: str | None = Field(description="restore it to undo; null for a dry run")
    dry_run: bool
    clean: bool
    files_changed: int
    untracked_removed: int
    skipped: int
    kept: int
    failed: int
    conflicts: int = Field(0, description="paths left exactly as they are: the agent's change and a later one "
                                          "overlap, or the boundary between them is not known")
    plan: list[PlanItem]
    operation_id: str | None = None
    after_checkpoint: str | None = Field(None, description="the checkpoint of the workspace as the operation "
                                                           "left it (what `redo` puts back)")
    kind: str | None = Field(None, description="a merging operation: agent-only restore, revert, undo, redo")
    calls: list[str] | None = Field(None, description="the operations whose changes it takes back")
    note: str | None = None
    plan_token: str | None = Field(None, description="a dry run's: confirms this same restore (HTTP)")
    undo: str | None = None
    code: str | None = Field(None, description="'plan_changed': refused, the workspace changed since the "
                                               "preview; `plan` and `plan_token` are the new plan to confirm")


class WatcherState(Model):
    """The inotify dirty set of a workspace (engine/watcher.py); more of its counters as extra fields."""
    model_config = ConfigDict(extra="allow")
    enabled: bool
    mode: str | None = Field(None, description="'watching', 'degraded: watch limit' (the unwatched subtrees are "
                                               "walked by every snapshot) or 'off'")
    watches: int | None = None
    unwatched_dirs: int | None = Field(None, description="directories refused a watch (the limit), counted "
                                                         "when refused")
    fix: str | None = Field(None, description="degraded: the command that raises the limit")
    fix_permanent: str | None = Field(None, description="degraded: the same, kept after a reboot")
    process: int | None = Field(None, description="the process whose watcher this is, when not this one")


class BackgroundJob(Model):
    kind: str
    running: bool
    started: float
    finished: float | None
    error: str | None
    progress: dict | None
    runs_in: str | None = None      # "a child process", or "this process: <why no child>"


class WorkspaceInfo(Model):
    root: str
    root_b64: str | None = None
    id: str
    ref: str
    gitdir: str
    exists: bool
    latest: CheckpointInfo | None
    checkpoints: int
    watcher: WatcherState | None = None
    background: BackgroundJob | None = None
    first_snapshot_seconds: dict[str, float] | None = None
    first_snapshot_seed: dict | None = Field(None, description="what the workspace's own git index vouched for")


class WorkspacesResult(Result):
    workspaces: list[WorkspaceInfo]


# -------------------------------------------------------------- calls (CLI run/write)
class CallRecord(Result):
    """A protected call's record: its operation, checkpoints and whether its outcome was recorded."""
    operation_id: str | None = None
    pre_checkpoint: str | None = None
    post_checkpoint: str | None = None
    snapshot: dict[str, Any] | None = None
    recorded: bool | None = None
    outcome: str | None = None
    reason: str | None = None
    outcome_unknown: bool | None = None
    gate_warning: str | None = None
    protected_changed: list[str] | None = Field(
        None, description="chronos-git's own files (its store's config, hooks, refs; the plugin's code) "
                          "this call changed (service/protected.py); also in its outcome event")


class RunResult(CallRecord):
    exit_code: int | None
    journaled: bool | None = None
    read_only: bool | None = None


class WriteResult(CallRecord):
    path: str
    path_b64: str | None = None
    bytes_written: int


# ------------------------------------------------------------------ journal
class Operation(Model):
    """An open operation as the journal's state holds it."""
    operation_id: str
    tool: _Text
    state: Literal["running", "pending", "uncertain"]
    session_id: _Text
    tool_call_id: _Text
    workspace: str | None
    workspace_b64: str | None = None
    pre_checkpoint: str | None
    started_seq: int | None
    owner: dict[str, Any] | None
    reason: str | None = None
    evidence: Any = None
    declared_paths: list[str] | None = None
    declared_paths_b64: list[str | None] | None = None
    boundary_checkpoint: str | None = Field(
        None, description="a crashed call that evidence cannot settle: the workspace as the crash was found")


class Settled(Model):
    operation_id: str
    tool: _Text
    workspace: _Text = Field(None, description="the workspace of the call (its sessions are told)")
    result: Literal["completed", "not_applied", "partial", "needs_operator"]
    evidence: str | None = None
    paths: list[str] | None = None
    paths_b64: list[str | None] | None = None
    why: str | None = None


class Protection(Model):
    state: Literal["on", "ready", "degraded", "off"]
    reason: str | None = None
    fix: str | None = None
    free_bytes: int | None = None

    def degraded(self, reason: str, fix: str | None) -> Protection:
        """This protection made DEGRADED for `reason`; a reason it was DEGRADED for already,
        and its fix, follow ("; also: ..."), so no surface loses one of them."""
        was = self.state == "degraded"
        before = f"; also: {self.reason}" if was and self.reason else ""
        if was and self.fix and self.fix != fix:
            fix = f"{fix}; also: {self.fix}" if fix else self.fix
        return Protection(state="degraded", free_bytes=self.free_bytes, reason=reason + before, fix=fix)


class JournalStatus(Result):
    integrity: str
    head: str | None
    events: int
    journal_id: str | None
    unresolved: list[Operation]
    running: list[Operation]
    replayable: list[str]
    totals: dict[str, int]
    healed: str | None
    checkpoint_file: str
    settled_at_start: list[Settled]
    gate: Literal["open", "closed"]
    protection: Protection
    remotes: list[RemoteInfo] | None = None
    new_store: str | None = None     # this command made the store: none was there (a mistyped path?)
    gate_reason: str | None = None   # why the gate is closed and what reopens it (as a refused call hears)


class TreeCheck(Model):
    checkpoints: int
    trees: int
    problems: list[str]


class TamperFinding(Model):
    """One thing in the store that chronos-git did not write: never honoured, reported."""
    kind: str = Field(description="config, worktree_config, ref, grafts, alternates, hook, file, record or "
                                  "signature (an operator act without the operator key's signature)")
    where: str
    what: str
    why: str
    fix: str


class VerifyResult(Result):
    integrity: str
    problems: list[str]
    events: int
    head: str | None
    journal_id: str | None
    external_checkpoint: str | None
    healed: str | None
    seconds: float
    checkpoint_trees: TreeCheck
    remote: AnchorCheck | None = None
    code: str | None = None        # when it failed: "integrity" (the journal), "unsafe_path" (a tree),
                                   # "store_tampered" (the store audit)
    tampering: list[TamperFinding] | None = Field(
        None, description="what the store holds that chronos-git never writes (engine/store_audit.py); "
                          "null: nothing")


class JournalHead(Model):
    """An exported journal head: keep it elsewhere, verify against it later."""
    model_config = ConfigDict(extra="allow")
    schema_: str = Field(alias="schema")
    journal_id: str | None
    head: str | None
    seq: int
    store: str
    exported_at: str | None = None


class JournalHeadResult(Result):
    checkpoint: JournalHead




class Event(Model):
    """One journal event: the common fields; the rest depend on its kind (docs/design.md)."""
    model_config = ConfigDict(extra="allow")
    schema_: str = Field(alias="schema")
    seq: int
    timestamp_ns: int
    kind: str
    operation_id: str | None
    id: str
    tool: _Text = Field(None, description="the tool called (a call's intent; an outcome names only its operation)")
    session_id: _Text = Field(None, description="the Hermes session of the call")
    subagent_id: _Text = Field(None, description="the subagent that made the call, where the host said")
    workspace: _Text = Field(None, description="the workspace of the call (its intent)")


class DiskChange(Model):
    """One time-machine operation's change on disk, as the conversation is told of it."""
    operation_id: str
    what: str = Field(description="restore, agent-only restore, revert, undo, redo")
    actor: str | None = None
    back_to: str | None = Field(None, description="to which checkpoint, call or turn it went back, in words")
    paths: list[str] = Field(description="the files it changed (the first 20)")
    count: int = Field(description="how many files it changed (-1: not known, a checkpoint is gone)")
    after_checkpoint: str | None = None


class DiskChanges(Result):
    workspace: str
    position: str | None = Field(description="the journal event it read up to: ask again after it to hear only "
                                             "what is new (None: no journal yet)")
    changes: list[DiskChange]


class EventsResult(Result):
    events: list[Event]


class OperationEvents(Result):
    operation_id: str
    events: list[Event]


class ResolveResult(Result):
    operation_id: str
    outcome: str
    event: int
    gate: Literal["open", "closed"]


class Replayed(Model):
    operation_id: str
    replay_operation_id: str
    paths: list[str]
    paths_b64: list[str | None] | None = None
    post_checkpoint: str | None
    outcome: str | None


class NotReplayed(Model):
    """A replayable call `recover --replay` left alone: its paths moved on since it was settled."""
    operation_id: str
    reason: str
    evidence: str            # where each path is now


class RecoverResult(Result):
    settled: list[Settled]
    replayed: list[Replayed] | None = None
    not_replayed: list[NotReplayed] | None = None
    unresolved: list[Operation]
    gate: Literal["open", "closed"]


class RollbackResult(Result):
    operation_id: str
    outcome: Literal["rolled_back"] | None = Field(description="null: a dry run (nothing changed or resolved)")
    evidence: str
    restore: RestoreResult | None
    gate: Literal["open", "closed"]
    dry_run: bool = False
    boundary_checkpoint: str | None = Field(
        None, description="what tells the call's changes from later ones (null: a call from before such "
                          "checkpoints were taken, or one with declared paths)")
    kept: list[str] = Field(default_factory=list,
                            description="paths changed after the crash was found: left as they are")


class Refusal(ErrorResult):
    """The recovery gate is closed: protected calls are refused until an operator reconciles."""
    error: Literal["chronos_blocked"] = "chronos_blocked"
    code: str | None = "chronos_blocked"
    blocked: Literal[True] = True
    operation_ids: list[str]
    operations: list[Operation]
    integrity: str
    message: str
    mode: Literal["block", "warn"]
    recorded: bool | None = None            # the refused call journaled (a `refused` event); None: not asked
    refused_operation_id: str | None = None  # that event's own operation id


# --------------------------------------------------------------- maintenance
class DroppedCheckpoint(Model):
    id: str
    description: str
    time: int


class Dropped(Model):
    workspace: str
    workspace_b64: str | None = None
    workspace_id: str
    kept: int
    boundary: str
    checkpoints: list[DroppedCheckpoint]


class Pruned(Model):
    workspace: str
    workspace_b64: str | None = None
    workspace_id: str
    missing_since: float
    checkpoints: int


class StoreBudget(Model):
    """How much of the profile-wide budget the kept checkpoints use (bytes new in each, before compression)."""
    used_bytes: int
    budget_bytes: int | None = Field(None, description="store_budget_mb; None = unlimited")
    orphans: int = Field(0, description="workspaces whose folder is gone (pruned after orphan_days)")


class CompactResult(Result):
    dropped: list[Dropped]
    pruned: list[Pruned] = []
    store_budget_kept_bytes: int | None = None
    dry_run: bool
    size_before: int
    objects_packed: int | None = None
    loose_removed: int | None = None
    packs_replaced: int | None = None
    packs_kept: int | None = Field(None, description="large, mostly reachable packs left as they are "
                                                     "(geometric packing)")
    size_after: int | None = None
    elapsed_s: float


class ConsolidateResult(Result):
    """What consolidating a first import did (engine/consolidate.py)."""
    packs: int = Field(description="pending packs consolidated (copied out of, then deleted)")
    adopted: int = Field(0, description="linked packs kept as they are (our refs reach most of them)")
    objects: int = Field(description="objects copied into the compressed pack")
    bytes_before: int
    bytes_after: int
    seconds: float


class Consolidation(Model):
    """Packs a first import wrote for speed (or linked from the user's git) and their compression."""
    pending_packs: int
    running: bool = False
    progress: dict | None = None
    last: ConsolidateResult | None = None
    error: str | None = None
    runs_in: str | None = None      # as BackgroundJob.runs_in


class JournalSummary(Model):
    integrity: str
    events: int
    head: str | None
    healed: str | None


class ProtectedChange(Model):
    """A call that changed chronos-git's own files (its outcome event has `protected_changed`)."""
    operation_id: str
    tool: _Text = None
    paths: list[str]
    workspace: _Text = None
    time: float


class HealthResult(Result):
    store: str
    store_exists: bool
    protection: Protection
    deployment: Deployment | None = Field(
        None, description="where the agent's edits happen (Hermes' terminal backend) and what that leaves protected")
    settings: dict[str, Any]
    settings_problems: list[str]
    store_bytes: int | None = None
    journal: JournalSummary | None = None
    gate: Literal["open", "closed"] | None = None
    unresolved: int | None = None
    last_snapshot: dict[str, Any] | None = Field(
        None, description="this process's newest snapshot, else the workspace's newest checkpoint")
    workspaces: int | None = None
    workspace: WorkspaceInfo | None = None
    deferred: str | None = None
    remotes: list[RemoteInfo] | None = None
    consolidation: Consolidation | None = None
    store_budget: StoreBudget | None = None
    protected_changes: list[ProtectedChange] | None = Field(
        None, description="calls of the last 7 days that changed chronos-git's own files (newest last)")
    tampering: list[TamperFinding] | None = Field(
        None, description="what the store holds that chronos-git never writes; null: nothing")
    settings_held: list[HeldSetting] | None = Field(
        None, description="weakening changes of the profile's settings waiting for an operator; null: none")
    jobs: list[BackgroundJob] | None = Field(
        None, description="this process's background work (first snapshots, turn checkpoints, compaction, "
                          "consolidation, the daily verification, the outcome writer, the pusher: "
                          "service/jobs.py); null: none started")
    operator_key: str | None = Field(
        None, description="the fingerprint of the key operator acts are signed with; null: none registered "
                          "(`operator_key_note` says what that leaves open)")
    operator_key_note: str | None = None
    damaged: list[Damage] | None = Field(
        None, description="what in the workspaces' histories cannot serve, and why; null: nothing")
    capture_narrowed: list[NarrowedCapture] | None = Field(
        None, description="workspaces whose ignore rules now leave out much of what was captured; null: none")


class ToolStatus(Result):
    """`chronos_status` for the model: the journal's state and the workspace's, in one answer."""
    protection: Protection
    integrity: str
    gate: Literal["open", "closed"]
    unresolved: list[Operation]
    running: list[Operation]
    events: int
    workspace: WorkspaceInfo | None
    store: str
    store_bytes: int | None
    last_snapshot: dict[str, Any] | None


# ---------------------------------------------------------------------- remotes
class RemoteInfo(Model):
    name: str
    url: str
    snapshots: bool
    last_push: float | None = Field(description="time of the last successful push (null: none yet)")
    last_error: str | None = Field(description="why the last attempt failed (null: it did not)")
    journal_head: str | None = Field(None, description="the journal event the remote holds, as of the last push")
    behind: int | None = Field(None, description="journal events the remote does not have yet")
    failing_since: float | None = Field(None, description="first failed attempt since the last success")
    diverged: str | None = Field(None, description="the remote's journal does not match the local one: "
                                                   "the gate is closed")


class RemoteAdded(Result):
    remote: str
    url: str
    snapshots: bool
    host: str
    created: bool = False
    warning: str | None = None


class RemotesResult(Result):
    host: str
    remotes: list[RemoteInfo]


class RemoteRemoved(Result):
    remote: str


class PushResult(Result):
    remote: str
    host: str
    journal_head: str | None
    refs: list[str]
    updated: list[str] = Field(default_factory=list, description="refs the push moved (the rest were current)")
    excluded: list[str] = Field(default_factory=list, description="workspaces whose snapshots were not pushed, and why")
    seconds: float = 0.0


class FetchedWorkspace(Model):
    id: str
    path: str | None
    path_b64: str | None = None
    checkpoints: int
    latest: str | None


class FetchedHost(Model):
    host: str
    journal_head: str | None
    events: int
    journal_id: str | None = None
    workspaces: list[FetchedWorkspace]


class FetchResult(Result):
    remote: str
    hosts: list[FetchedHost]


class AnchorCheck(Model):
    remote: str
    host: str
    remote_head: str = Field(description="the journal event this host's journal on the remote ends at")
    local_head: str | None
    behind: int = Field(description="local events the remote does not have yet")


class HeldSetting(Model):
    """A weakening change of the profile's settings that waits for an operator (the value in force rules)."""
    key: str
    in_force: Any
    written: Any = Field(description="what the profile's config.yaml says now")
    why: str = Field(description="what the change would weaken")
    since_seq: int | None = Field(None, description="the journal event that first held it")


class SettingsRecord(Result):
    """The journal's record of the settings in force (service/settings_watch.py)."""
    recorded: bool = Field(description="false: no record yet (a store or journal from before this record existed)")
    seq: int | None = None
    fingerprint: str | None = Field(None, description="of the recorded values in force")
    effective_fingerprint: str = Field(description="of what this process runs under (environment overrides included)")
    held: list[HeldSetting]
    accepted: list[str] = Field(default_factory=list, description="the keys this act accepted")
    in_force: dict[str, Any]
    accept_command: str | None = None


VerifyResult.model_rebuild()
JournalStatus.model_rebuild()
HealthResult.model_rebuild()


class GitRun(Result):
    """`chronos-git git ...`: stock git over the store, examined first (its output is git's own)."""
    exit_code: int
    argv: list[str]



class OperatorKeyInfo(Result):
    """The operator key (service/operator_key.py): operator acts are signed with it once registered."""
    registered: bool
    fingerprint: str | None = None
    key_file: str | None = Field(None, description="the private key ssh-keygen signs with (asks its passphrase)")
    since_seq: int | None = Field(None, description="the journal event that registered it")
    changed: bool = Field(False, description="this command registered or replaced it")
    replaced: str | None = Field(None, description="the fingerprint of the key it replaced")
    unsigned_acts: list[TamperFinding] = Field(default_factory=list,
                                               description="operator acts without a valid signature")
    note: str | None = Field(None, description="what having no key leaves open")


class Countersigned(Result):
    """An operator act without a valid signature, countersigned by the operator as theirs."""
    event_seq: int
    event: str
    what: str
    seq: int = Field(description="the countersignature's journal event")
