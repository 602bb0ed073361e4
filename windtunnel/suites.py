"""The seven suites: what each case does to a store, and which invariants it checks.

Every case is a plain `Case` (suite, name, seed, spec) so that a breach can be
replayed alone (`--suite crash --seed S`); `run_case` runs one in a worker
process and returns its outcome as a dict.
"""
from __future__ import annotations

import os
import random
import subprocess
import time
from dataclasses import asdict, dataclass, field

from ..engine.faults import POINTS
from .scenario import Findings, Scenario

SUITES = ("crash", "power", "io", "tamper", "concurrency", "input", "adversary")


@dataclass
class Case:
    suite: str
    name: str
    seed: int
    spec: dict = field(default_factory=dict)


# ------------------------------------------------------------------ crash
_WRITES8 = ["write"] * 8
# how a victim reaches each point: operations first, a prior crash to recover from,
# the largest n of `point@n` worth drawing (points hit on most calls)
RECIPES: dict[str, dict] = {
    "bulk_mid_pack": {}, "bulk_before_idx": {}, "bulk_before_index": {}, "bulk_before_ref": {},
    "adopt_placed": {"git": True},     # the workspace a git clone: its index adopted
    "mid_snapshot": {"nth": 6}, "snapshot_index_written": {"first": ["shell", "shell"], "nth": 3},
    "snapshot_after_commit": {"nth": 6},
    "watcher_handoff": {"background": True, "first": ["write", "shell", "shell"], "nth": 2},
    "after_intent": {"nth": 6}, "after_dispatch": {"nth": 6},
    "mid_append": {"nth": 10}, "after_witness": {"nth": 10}, "mid_publish": {"nth": 10},
    "witness_half_written": {"nth": 10},
    "witness_temp_written": {},
    # the outcome writer syncs what the witness carries every ~8 file calls (background: as in Hermes)
    "journal_sync_mid_pack": {"background": True, "first": _WRITES8 * 2, "nth": 2},
    "journal_sync_before_idx": {"background": True, "first": _WRITES8 * 2, "nth": 2},
    "journal_sync_packed": {"background": True, "first": _WRITES8 * 2, "nth": 2},
    "merge_target_written": {"first": ["multi", "person", "multi", "agent_restore"]},
    "restore_after_safety": {"first": ["multi", "multi", "restore"]},
    "inflight_manifest_written": {"first": ["multi", "multi", "restore"], "nth": 3},
    "mid_restore": {"first": ["multi", "multi", "restore"], "nth": 2},
    "mid_restore_file": {"first": ["multi", "multi", "restore"], "nth": 3},
    "file_before_rename": {"first": ["multi", "multi", "restore"], "nth": 3},
    "after_restore_files": {"first": ["multi", "multi", "restore"]},
    "after_timeop_files": {"first": ["multi", "multi", "restore"]},
    "settle_before_append": {"prep": ("after_intent", ["write"])},
    "replay_after_marker": {"prep": ("after_intent", ["multi"]), "first": ["replay"]},
    "replay_mid_write": {"prep": ("after_intent", ["multi"]), "first": ["replay"]},
    "compact_decided": {"first": _WRITES8 + ["compact"]},
    "retention_after_shallow": {"first": _WRITES8 + ["compact"]},
    "compact_pack_before_idx": {"first": _WRITES8 + ["compact"]},
    "mid_compact": {"first": _WRITES8 + ["compact"]},
    "compact_mid_delete": {"first": _WRITES8 + ["compact"]},
    "consolidate_mid_copy": {"first": ["write", "consolidate"]},
    "consolidate_before_delete": {"first": ["write", "consolidate"]},
    "consolidate_mid_delete": {"first": ["write", "consolidate"]},
}
assert set(RECIPES) == set(POINTS), set(POINTS) ^ set(RECIPES)


# The time machine's merging operations (service/reverts.py), each cut off at every point it
# passes: a first, unarmed victim sets the workspace up (the agent's calls, a person's edits
# between them, the operation an undo or redo takes back); a second runs the operation alone,
# armed, so the n-th hit is inside it.
TIMEOPS: dict[str, tuple[str, list[str]]] = {
    "agent_restore": ("chronos.agent_restore", ["multi", "person", "multi", "person"]),
    "revert": ("chronos.revert", ["multi", "person", "multi", "person"]),
    "undo": ("chronos.undo", ["multi", "person", "multi", "agent_restore", "person"]),
    "redo": ("chronos.redo", ["multi", "person", "multi", "agent_restore", "undo", "person"]),
}
# each point the operation passes, in its order, with what the next start must make of it:
# `None` before the intent (nothing journaled, every path at its pre-image), else the
# settlement, or "evidence" (completed, not_applied or uncertain, as the paths are)
TIMEOP_POINTS: dict[str, str | None] = {
    "merge_target_written": None, "restore_after_safety": None,
    "after_intent": "not_applied", "inflight_manifest_written": "not_applied",
    "mid_restore": "evidence", "mid_restore_file": "evidence", "file_before_rename": "evidence",
    "after_restore_files": "completed", "after_timeop_files": "completed", "after_dispatch": "completed",
}
# points hit once per written path: the largest n worth drawing
_PER_PATH = {"mid_restore": 3, "mid_restore_file": 3, "file_before_rename": 3}
TIMEOP_QUICK = ("merge_target_written", "restore_after_safety", "mid_restore", "after_restore_files",
                "after_timeop_files")
assert set(TIMEOP_POINTS) <= set(POINTS)


def crash_cases(seeds: range, kills: int, quick: bool = False) -> list[Case]:
    out = [Case("crash", point, seed, {"point": point}) for point in POINTS for seed in seeds]
    out += [Case("crash", f"{op} at {point}", seed, {"point": point, "timeop": op})
            for op in TIMEOPS for point in (TIMEOP_QUICK if quick else TIMEOP_POINTS) for seed in seeds]
    out += [Case("crash", "random kill", 10_000 + i, {"random": True}) for i in range(kills)]
    return out


def run_crash(case: Case, s: Scenario) -> Findings:
    rng = random.Random(case.seed)
    if case.spec.get("random"):
        # a random operation, then a random moment inside it (ops take a few to tens of ms);
        # 0: somewhere in the victim's start (imports, settling, the store's creation)
        n = rng.randint(0, 39)
        c = s.child(ops=40, kill_at=(n, rng.uniform(0.05, 0.8) if n == 0 else rng.uniform(0.0, 0.03)))
        out = s.check(s.next_start())
        out.note = (f"killed after operation {n}, {c.seconds:.2f} s in" if c.killed
                    else "finished before the kill")
        out.reached = c.killed
        return out
    if case.spec.get("timeop"):
        return run_timeop_crash(case, s, rng)
    point = case.spec["point"]
    r = RECIPES[point]
    if r.get("prep"):
        fault, first = r["prep"]
        prep = s.child(fault=fault, first=first, ops=0)
        if not prep.killed:
            out = Findings()
            out.breach("unreached", f"the preparing crash at {fault} did not happen (rc {prep.rc})")
            return out
    nth = 1 if case.seed == 0 else rng.randint(1, r.get("nth", 1))    # seed 0 (--quick): the first hit
    c = s.child(fault=f"{point}@{nth}", first=r.get("first", ()), ops=r.get("ops", 6),
                background=r.get("background", False))
    if c.rc == -1:
        out = Findings()
        out.breach("stuck_locks", f"the victim hung: {c.stderr[-300:]}")
        return out
    out = s.check(s.next_start())
    out.reached = c.killed
    out.note = f"{point}@{nth}"
    if not c.killed:
        out.note += f" not reached (victim exit {c.rc})"
        if c.rc not in (0, None):
            out.breach("unclear_errors", f"the victim failed: {c.stderr.strip()[-300:]}")
    return out


def _disk(ws) -> dict[str, str | None]:
    """Every file and symlink of the workspace: relative path -> its blob id (as evidence reads it)."""
    from ..journal_refs.evidence import content_id
    out = {}
    root = os.fsencode(ws)
    for dirpath, dirs, files in os.walk(root):
        names = files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.fsdecode(os.path.relpath(path, root))] = content_id(path)
    return out


def run_timeop_crash(case: Case, s: Scenario, rng: random.Random) -> Findings:
    """An agent-only restore, a revert, an undo or a redo SIGKILLed at one point: every path of
    the workspace at its image before the operation or, for the paths it declared, after it; at
    the next start the operation is unjournaled (cut off before its intent) or settled as the
    paths say (completed, not_applied; uncertain with the gate closed), never left pending."""
    from ..engine.paths import same
    from ..journal_refs import evidence as evidence_of
    op, point = case.spec["timeop"], case.spec["point"]
    tool, setup = TIMEOPS[op]
    expect = TIMEOP_POINTS[point]
    out = Findings()
    prep = s.child(first=setup, ops=0)
    failed = [f"{a['op']}: {a['what']} {(a.get('error') or {}).get('error', '')}" for a in s.acknowledged()
              if a.get("error") or a["what"] in ("blocked", "nothing to restore", "nothing to revert")]
    if prep.rc != 0 or failed:
        out.reached = False
        out.breach("unreached", f"setting up {op} failed (rc {prep.rc}): {'; '.join(failed)[:300]} "
                                f"{prep.stderr.strip()[-300:]}")
        return out
    before = _disk(s.ws)
    t0 = time.time_ns()
    nth = 1 if case.seed == 0 else rng.randint(1, _PER_PATH.get(point, 1))
    c = s.child(fault=f"{point}@{nth}", first=[op], ops=0)
    out.note = f"{op} at {point}@{nth}"
    if c.rc == -1:
        out.breach("stuck_locks", f"the victim hung: {c.stderr[-300:]}")
        return out
    hit = [line for line in s.faults_hit() if line.split()[:1] == [point]]
    out.reached = c.killed and bool(hit)
    if not out.reached:
        acks = [a for a in s.acknowledged() if a["op"] == op]
        said = f"{acks[-1]['what']} {(acks[-1].get('error') or {}).get('error') or ''}".strip() if acks else "no answer"
        out.note += f" not reached (victim exit {c.rc}: {said[:300]})"
        if c.rc not in (0, None):
            out.breach("unclear_errors", f"the victim failed: {c.stderr.strip()[-300:]}")
        out.merge(s.check(s.next_start()))
        return out
    try:
        svc = s.next_start()
    except Exception as exc:                      # the next start must answer, not crash
        out.breach("unclear_errors", f"the next start failed: {type(exc).__name__}: {exc}")
        return out
    after = _disk(s.ws)
    journal = svc.core.journal
    evs = journal.events(None)
    started = [e for e in evs if e.get("kind") == "started" and e.get("tool") == tool
               and int(e.get("timestamp_ns") or 0) >= t0]
    root = os.path.realpath(s.ws)
    declared = {os.path.relpath(os.path.realpath(d["path"]), root): d
                for e in started for d in e.get("declared") or ()}
    # every path at its pre-image, or (declared) at its post-image
    for rel in sorted(set(before) | set(after)):
        now, was, d = after.get(rel), before.get(rel), declared.get(rel)
        if d is None:
            if not same(now, was):
                out.breach("torn_paths", f"{rel}: changed by the {op}, which did not declare it "
                                         f"({str(was)[:12]} -> {str(now)[:12]})")
            continue
        if not same(d["pre"], was):
            out.breach("torn_paths", f"{rel}: the {op} declared pre-image {str(d['pre'])[:12]}, the path held "
                                     f"{str(was)[:12]}")
        if not (same(now, d["pre"]) or same(now, d["post"])):
            out.breach("torn_paths", f"{rel}: at neither image after the {op} was cut off at {point} "
                                     f"(now {str(now)[:12]}, pre {str(d['pre'])[:12]}, post {str(d['post'])[:12]})")
    # the operation's journal: nothing before its intent; after it, settled as the paths are
    if expect is None:
        if started:
            out.breach("unsettled", f"the {op} was journaled though it was cut off before its intent")
    elif len(started) != 1:
        out.breach("lost_events", f"{len(started)} intents of the {op} in the journal, 1 was durable")
    else:
        op_id = started[0]["operation_id"]
        closing = [e for e in evs if e.get("operation_id") == op_id
                   and e.get("kind") in ("returned", "recovered", "uncertain", "resolved")]
        pending = [o for o in journal.unresolved() if o.operation_id == op_id and o.state != "uncertain"]
        verdict, _items = evidence_of.evidence(started[0].get("declared") or [])
        verdict = "uncertain" if verdict == "partial" else verdict      # a partial call is settled uncertain
        settled = (closing[0].get("outcome") if closing[0]["kind"] == "recovered" else closing[0]["kind"]) \
            if closing else None
        refusal = svc.gate.state()
        closed_for = set(refusal.operation_ids) if refusal is not None else set()
        if pending or settled is None:
            out.breach("unsettled", f"the {op} ({op_id[:12]}) was left pending by the next start")
        elif settled != verdict:
            out.breach("unsettled", f"the {op} ({op_id[:12]}) was settled {settled}, its paths say {verdict}")
        elif expect != "evidence" and settled != expect:
            out.breach("unsettled", f"the {op} ({op_id[:12]}) cut off at {point} was settled {settled}, "
                                    f"not {expect}")
        elif settled == "uncertain" and op_id not in closed_for:
            out.breach("unsettled", f"the {op} ({op_id[:12]}) is uncertain, but the gate does not wait for it")
        elif settled != "uncertain" and refusal is not None:
            out.breach("unsettled", f"the {op} ({op_id[:12]}) was settled {settled}, but the gate is closed: "
                                    f"{refusal.message[:200]}")
        out.note += f": {op_id[:12]} settled {settled}, {len(declared)} declared path(s)"
    out.merge(s.check(svc))
    # the time machine still answers after it (its history read from the journal the crash left)
    from ..service.errors import envelope
    for name in ("undo", "redo"):
        try:
            getattr(svc, name)(str(s.ws), dry_run=True, actor="windtunnel")
        except Exception as exc:
            answer, _exit, _http = envelope(exc, svc.core.store_dir)
            if answer.code == "internal":
                out.breach("unclear_errors", f"a dry run of {name} after the crash: {answer.error[:300]}")
    return out


# ------------------------------------------------------------------ power
POWER_TARGETS = {
    # durable_snapshots off: snapshot objects, refs and caches are not fsynced
    False: ("loose_truncate", "loose_zero", "pack_truncate", "pack_zero", "ref_truncate", "ref_zero",
            "index_truncate", "index_zero", "journal_truncate", "journal_zero", "stale_truncate",
            "stale_zero", "witness_truncate", "witness_zero", "unpublished_lost"),
    # on: every snapshot object and ref is; the stat cache, what the witness carries and the
    # witness itself are what is left to break
    True: ("index_truncate", "index_zero", "journal_truncate", "journal_zero", "stale_truncate",
           "stale_zero", "witness_truncate", "witness_zero", "unpublished_lost"),
}


def power_cases(seeds: range) -> list[Case]:
    return [Case("power", f"{t} (durable {'on' if d else 'off'})", seed, {"target": t, "durable": d})
            for d, targets in POWER_TARGETS.items() for t in targets for seed in seeds]


def run_power(case: Case, s: Scenario) -> Findings:
    from . import power
    if case.spec["target"].startswith("pack"):     # no file call links (and so fsyncs) the bulk pack
        s.child(ops=6, first=["shell"], only=("shell", "snapshot"), durable=case.spec["durable"])
    elif case.spec["target"].startswith("stale"):  # enough file calls for the journal's sync to pack
        s.child(ops=4, first=["write"] * 16, background=True, durable=case.spec["durable"])
    else:
        s.child(ops=8, first=["write", "multi"], durable=case.spec["durable"])
        # end on fresh snapshot objects (a random compaction last would leave nothing loose)
        s.child(ops=0, first=["shell", "write"], durable=case.spec["durable"])
    damaged = power.cut(s, case.spec["target"], random.Random(case.seed))
    out = Findings()
    out.note = f"damaged {len(damaged)} file(s)"
    if not damaged:
        out.breach("unreached", f"nothing to damage for {case.spec['target']}")
        return out
    witness = case.spec["target"].startswith("witness")
    try:
        svc = s.next_start()
    except Exception as exc:                      # the next start must answer, not crash
        out.breach("unclear_errors", f"the next start failed: {type(exc).__name__}: {exc}")
        return out
    if witness:
        # the witness is fsynced, so damage to it is not a power cut but evidence of one
        # (or of tampering): the gate must close and say so, never start a new journal
        found = svc.core.journal.integrity != "ok"
        # or harmless: the damage took only a superseded record, and the one that survived
        # names the head the journal had (the witness keeps two: journal_refs/witness.py)
        survived = power.witness_head(s.store)
        absorbed = not found and survived == s.witness_head == svc.core.journal.head
        out.reached = found or absorbed
        if absorbed:
            out.note += "; absorbed: the witness record that survived names the journal's head"
        elif not found:
            out.breach("integrity", "a damaged witness went unnoticed at the next start")
        out.merge(s.check(svc, expect_integrity=False, next_operation=False))
        return out
    out.reached = True
    if case.spec["target"].startswith("unpublished") and svc.core.journal.head != s.witness_head:
        out.breach("lost", f"the journal is at {str(svc.core.journal.head)[:12]} after the cut, not at the "
                           f"witnessed event {str(s.witness_head)[:12]} that was never published")
    repair = svc.startup.get("power_cut_repair") or {}
    out.note += "; repaired at the next start: " + ", ".join(
        f"{k} {len(v) if isinstance(v, list) else v}" for k, v in repair.items() if v and k != "seconds") \
        if repair else "; nothing needed repair"
    out.merge(s.check(svc))
    return out


# --------------------------------------------------------------------- io
IO_QUICK = ("bulk_mid_pack", "mid_snapshot", "after_intent", "after_dispatch", "mid_append",
            "witness_half_written", "witness_temp_written", "mid_restore_file", "file_before_rename",
            "replay_mid_write", "mid_compact")


def io_cases(seeds: range, quick: bool) -> list[Case]:
    points = IO_QUICK if quick else tuple(POINTS)
    out = [Case("io", f"{p}:{a}", seed, {"point": p, "action": a})
           for p in points for a in ("enospc", "eio") for seed in seeds]
    if os.geteuid() == 0:
        out += [Case("io", "tmpfs full", seed, {"tmpfs": True}) for seed in seeds]
    from .slowremote import KINDS
    out += [Case("io", f"slow_remote:{kind}", seed, {"slow_remote": kind}) for kind in KINDS for seed in seeds[:1]]
    return out


def run_io(case: Case, s: Scenario) -> Findings:
    if case.spec.get("slow_remote"):
        from . import slowremote
        return slowremote.run(s, case.spec["slow_remote"])
    if case.spec.get("tmpfs"):
        from . import power
        return power.full_tmpfs(s, random.Random(case.seed))
    point, action = case.spec["point"], case.spec["action"]
    r = RECIPES[point]
    if r.get("prep"):
        s.child(fault=r["prep"][0], first=r["prep"][1], ops=0)
    c = s.child(fault=f"{point}:{action}", first=r.get("first", ()), ops=4, background=r.get("background", False))
    out = s.check(s.next_start())
    acks = s.acknowledged()
    injected = [a for a in acks if a.get("error") and ("injected at" in a["error"]["error"])]
    out.reached = any(line.split()[1:2] == [action] for line in s.faults_hit())
    out.note = (f"{len(injected)} operation(s) answered with the injected error"
                + ("" if injected or not out.reached else "; the failed write was absorbed and retried"))
    if c.rc not in (0,):
        out.breach("unclear_errors", f"the victim died on an injected {action}: {c.stderr.strip()[-300:]}")
    return out


# ----------------------------------------------------------------- tamper
def tamper_cases(seeds: range) -> list[Case]:
    from .tamper import KINDS
    return [Case("tamper", kind, seed, {"kind": kind}) for kind in KINDS for seed in seeds]


def run_tamper(case: Case, s: Scenario) -> Findings:
    from . import tamper
    return tamper.run(s, case.spec["kind"], random.Random(case.seed))


# ------------------------------------------------------------ concurrency
def concurrency_cases(quick: bool) -> list[Case]:
    calls = 40 if quick else 500
    deadline = 180 if quick else 1800          # 4 x 500 calls take minutes on two cores
    return [Case("concurrency", f"4 processes x {calls} protected calls", 1,
                 {"kind": "calls", "calls": calls, "deadline": deadline}),
            Case("concurrency", "2 processes snapshotting one workspace", 2,
                 {"kind": "snapshots", "calls": calls // 4, "deadline": deadline}),
            Case("concurrency", "restore vs snapshot vs compaction", 3,
                 {"kind": "race", "calls": calls // 4, "deadline": deadline})]


def run_concurrency(case: Case, s: Scenario) -> Findings:
    n, kind = case.spec["calls"], case.spec["kind"]
    s.child(ops=0, first=["write"])                     # the baseline, so nobody races the bulk import
    if kind == "calls":
        plans = [dict(only=("write", "patch", "multi", "shell"), prefix=f"p{k}/") for k in range(4)]
    elif kind == "snapshots":
        plans = [dict(only=("snapshot", "write")), dict(only=("snapshot", "shell"))]
    else:
        plans = [dict(only=("restore", "write")), dict(only=("snapshot", "write")), dict(only=("compact",))]
    procs = [s.child(ops=n, wait=False, acks=s.root / f"acks-{k}.jsonl", **p) for k, p in enumerate(plans)]
    out = Findings()
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=1800)
        except subprocess.TimeoutExpired:
            proc.kill()
            out.breach("stuck_locks", "a concurrent process hung")
            continue
        if proc.returncode != 0:
            out.breach("unclear_errors", f"a concurrent process failed: {err.decode(errors='replace')[-300:]}")
    acks = s.acknowledged()
    out.reached = True
    out.note = f"{len(acks)} calls acknowledged, {sum(1 for a in acks if a.get('error'))} answered with an error"
    out.merge(s.check(s.next_start()))
    return out


# ------------------------------------------------------------------ input
def input_cases() -> list[Case]:
    from .hostile import CLASSES
    return [Case("input", name, 1, {"class": name}) for name in CLASSES]


def run_input(case: Case, s: Scenario) -> Findings:
    from . import hostile
    return hostile.run(s, case.spec["class"])


# ---------------------------------------------------------------- adversary
def adversary_cases(seeds: range) -> list[Case]:
    from .adversary import KINDS
    return [Case("adversary", kind, seed, {"kind": kind}) for kind in KINDS for seed in seeds]


def run_adversary(case: Case, s: Scenario) -> Findings:
    from . import adversary
    return adversary.run(s, case.spec["kind"], random.Random(case.seed))


_RUN = {"crash": run_crash, "power": run_power, "io": run_io, "tamper": run_tamper,
        "concurrency": run_concurrency, "input": run_input, "adversary": run_adversary}


def build(suites, *, quick: bool, seeds: int, only_seed: int | None = None,
          kills: int | None = None) -> list[Case]:
    seed_range = range(seeds)
    cases: list[Case] = []
    for suite in suites:
        if suite == "crash":
            cases += crash_cases(seed_range, kills if kills is not None else (8 if quick else 500), quick)
        elif suite == "power":
            cases += power_cases(seed_range)
        elif suite == "io":
            cases += io_cases(range(1) if quick else seed_range, quick)
        elif suite == "tamper":
            cases += tamper_cases(seed_range)
        elif suite == "concurrency":
            cases += concurrency_cases(quick)
        elif suite == "input":
            cases += input_cases()
        elif suite == "adversary":
            cases += adversary_cases(range(1) if quick else seed_range)
    if only_seed is not None:
        cases = [c for c in cases if c.seed == only_seed]
    return cases


def run_case(case: Case) -> dict:
    """One case in a fresh scenario (run in a worker process)."""
    t0 = time.monotonic()
    s = Scenario(case.seed, git=RECIPES.get(case.spec.get("point", ""), {}).get("git", False))   # crash and io
    try:
        out = _RUN[case.suite](case, s)
    except Exception as exc:                 # a bug of the wind tunnel or of chronos-git: a breach either way
        out = Findings()
        out.breach("unclear_errors", f"the case raised {type(exc).__name__}: {exc}")
    except BaseException:
        s.cleanup()
        raise
    kept = s.keep_if(bool(out.breaches))
    result = {"case": asdict(case), "reached": out.reached, "note": out.note, "counts": out.counts,
              "breaches": out.breaches, "seconds": round(time.monotonic() - t0, 2)}
    if kept:              # a breach's evidence: the store, the workspace, the acks, where the fault hit
        result["kept"] = kept
        result["fault_hits"] = s.faults_hit()[-3:]
    return result
