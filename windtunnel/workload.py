"""The wind tunnel's victim: a child process doing random protected work on one store.

Runs the service in-process the way Hermes does (protected writes, patches,
multi-file edits, shell calls, restores, snapshots, compactions, replays, a
reader thread; on request a person's edits between calls and the time machine's
agent-only restores, reverts, undos and redos) with a fault point armed through CHRONOS_GIT_FAULT, or until
the parent kills it at a random moment.  After every operation that returned
it appends an acknowledgement (the journal head and sequence number) to the
ack file, fsynced: what it acknowledged must survive any crash.

    python -m chronos_git.windtunnel.workload --store S --ws W --acks F --seed N --ops K
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading

FILES = [f"src/m{i}.py" for i in range(12)] + [f"docs/d{i}.md" for i in range(4)] + ["README", "deep/a/b/c.txt"]
KINDS = ("write", "write", "patch", "multi", "shell", "restore", "snapshot", "compact", "replay", "consolidate")
# not drawn at random (`--first` / `--only`): a person's edit between calls, and the time machine's
# merging operations (service/reverts.py) the crash suite's time-machine cases set up and cut off
TIMEOPS = ("person", "agent_restore", "revert", "undo", "redo")
ATTACK = "CHRONOS_WINDTUNNEL_ATTACK"   # the adversary suite's attack: JSON, carried out as one protected call


def _ack(fh, record: dict) -> None:
    fh.write(json.dumps(record) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _content(rng: random.Random, n: int) -> bytes:
    return ("".join(rng.choice("abcdefghij \n") for _ in range(rng.randint(1, 400))) + f"\n#{n}\n").encode()


def _atomic(path: str, data: bytes) -> None:
    """How Hermes' own tools write: temp file, then rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.hermes-tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def run(store: str, ws: str, acks: str, seed: int, ops: int, *, background: bool, first: list[str],
        only: list[str] | None = None, durable: bool = False, prefix: str = "") -> int:
    from ..service import Call, Chronos, Declared, Outcome
    from ..service.errors import Blocked, envelope
    from ..settings import Settings

    rng = random.Random(seed)
    svc = Chronos.get(store, Settings(max_checkpoints=6, size_budget_mb=0, compact_grace_s=0,
                                      snapshot_budget_s=20, durable_snapshots=durable))
    svc.background = background
    try:
        svc.start()
    except Exception as exc:          # a start that cannot write (full disk) answers like any call
        answer, _exit, _http = envelope(exc, svc.core.store_dir)
        with open(acks, "a") as fh:
            _ack(fh, {"i": -1, "op": "start", "what": "error", "seq": -1, "head": None, "journal_id": None,
                      "error": {"error": answer.error, "code": answer.code, "type": type(exc).__name__}})
        return 0
    stop = threading.Event()

    def reader():                     # concurrent readers: never in the way, never broken by a crash
        other = Chronos(svc.core.store_dir, svc.settings)
        while not stop.wait(0.01):
            try:
                other.log(ws, 5)
                other.journal_status()
            except Exception:
                pass
    threading.Thread(target=reader, daemon=True).start()
    plan = list(first) + [rng.choice(only or KINDS) for _ in range(ops)]
    files = [prefix + f for f in FILES]
    with open(acks, "a") as fh:
        for i, kind in enumerate(plan):
            error = None
            try:
                what = _step(svc, rng, ws, files, kind, i, Call, Declared, Outcome)
            except Blocked:
                what = "blocked"
            except Exception as exc:          # an answer, as every surface gives it; "internal" is a bug
                answer, _exit, _http = envelope(exc, svc.core.store_dir)
                what, error = "error", {"error": answer.error, "code": answer.code,
                                        "type": type(exc).__name__}
            j = svc.core.journal
            _ack(fh, {"i": i, "op": kind, "what": what, "error": error, "seq": j.state.seq, "head": j.head,
                      "journal_id": j.state.journal_id, "integrity": j.integrity})
    stop.set()
    svc.flush()
    return 0


def _step(svc, rng, ws, FILES, kind, n, Call, Declared, Outcome) -> str:
    if kind == "write":
        rel = rng.choice(FILES)
        svc.write_file(ws, rel, _content(rng, n), actor="windtunnel")
        return rel
    if kind == "patch":                               # Hermes' patch: declared, written by the tool
        rel = rng.choice(FILES)
        path = os.path.join(ws, rel)
        new = _content(rng, n)
        with svc.protect(Call(tool="patch", args={"path": path}, workspace=ws,
                              declared=[Declared(path, new)]), write_behind=svc.background) as t:
            _atomic(path, new)
            t.outcome = Outcome(status="ok")
        return rel
    if kind == "multi":                               # a V4A patch over several files
        rels = rng.sample(FILES, 3)
        data = {os.path.join(ws, r): _content(rng, n) for r in rels}
        with svc.protect(Call(tool="patch", args={"files": rels}, workspace=ws,
                              declared=[Declared(p, d) for p, d in data.items()]),
                         write_behind=svc.background) as t:
            for p, d in data.items():
                _atomic(p, d)
            t.outcome = Outcome(status="ok")
        return ",".join(rels)
    if kind == "attack":                              # the adversary suite: the agent's own call attacks
        spec = json.loads(os.environ[ATTACK])
        if spec["kind"] == "write":                   # a file tool aimed at chronos-git's own files
            svc.write_file(ws, spec["path"], spec["content"].encode(), actor="windtunnel")
            return spec["path"]
        res = svc.run_command(ws, spec["argv"])
        return f"attack rc={res.exit_code}"
    if kind == "person":                              # an edit outside the calls: nothing journals it
        rel = rng.choice(FILES)
        path = os.path.join(ws, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(f"a person's line {n}\n".encode())
        return rel
    if kind == "agent_restore":                       # back to the oldest checkpoint of the current line
        cps = svc.log(ws, None).checkpoints
        if not cps:
            return "nothing to restore"
        return _timeop(svc.agent_restore(ws, cps[-1].id, actor="windtunnel"))
    if kind == "revert":                              # one of the agent's calls, at random
        from ..service import call_changes
        root = os.fsdecode(svc.core.store.workspace(ws).root_bytes)
        cs = [c for c in call_changes.calls(svc.core.journal.events(None), root)
              if not c.is_time_machine and c.pre is not None and c.status == "ok"]
        if not cs:
            return "nothing to revert"
        return _timeop(svc.revert(ws, rng.choice(cs).operation_id, actor="windtunnel"))
    if kind == "undo":
        return _timeop(svc.undo(ws, actor="windtunnel"))
    if kind == "redo":
        return _timeop(svc.redo(ws, actor="windtunnel"))
    if kind == "shell":
        rel = rng.choice(FILES)
        res = svc.run_command(ws, ["sh", "-c", f"mkdir -p $(dirname '{rel}') && echo {n} >> '{rel}'"])
        return f"{rel} rc={res.exit_code}"
    if kind == "restore":
        n_cp = svc.log(ws, 6).checkpoints
        if not n_cp:
            return "nothing to restore"
        # #1 is (nearly always) the tree as it is: go back further when there is a further
        res = svc.restore(ws, str(rng.randint(min(2, len(n_cp)), len(n_cp))), actor="windtunnel")
        return f"{res.restored_checkpoint[:8]} {res.status}"
    if kind == "snapshot":
        return svc.snapshot(ws, f"windtunnel {n}").checkpoint or "-"
    if kind == "compact":
        res = svc.compact(grace_s=0)
        return f"dropped {sum(len(d.checkpoints) for d in res.dropped)}"
    if kind == "consolidate":
        res = svc.consolidate()
        return f"consolidated {res.packs} packs"
    if kind == "replay":
        res = svc.recover(replay=True, actor="windtunnel")
        return f"replayed {len(res.replayed or [])}"
    raise ValueError(kind)


def _timeop(res) -> str:
    return (f"{res.status} {res.operation_id}: {res.files_changed} written, {res.untracked_removed} removed, "
            f"{res.conflicts} conflicts")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m chronos_git.windtunnel.workload")
    p.add_argument("--store", required=True)
    p.add_argument("--ws", required=True)
    p.add_argument("--acks", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", type=int, default=20)
    p.add_argument("--background", action="store_true", help="as in Hermes: watcher, background first snapshot")
    p.add_argument("--first", action="append", default=[],
                   choices=sorted(set(KINDS) | set(TIMEOPS) | {"attack"}),
                   help="operations to do first (the rest is random)")
    p.add_argument("--only", action="append", choices=sorted(set(KINDS) | set(TIMEOPS)),
                   help="draw only these operations")
    p.add_argument("--durable", action="store_true", help="durable_snapshots on (fsync every snapshot)")
    p.add_argument("--prefix", default="", help="a folder of the workspace this process writes in")
    a = p.parse_args(argv)
    return run(a.store, a.ws, a.acks, a.seed, a.ops, background=a.background, first=a.first, only=a.only,
               durable=a.durable, prefix=a.prefix)


if __name__ == "__main__":
    sys.exit(main())
