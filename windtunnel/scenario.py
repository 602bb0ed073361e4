"""One wind tunnel run: a fresh store and workspace, a victim process, the next start,
and the invariants checked after it.

The victim (windtunnel/workload.py) acknowledges every operation that returned;
after it dies, `next_start()` opens the store as the next process would (caches
dropped, crashed calls settled, temp names swept) and `check()` counts every
breach of the invariants below.  Nothing here is simulated: real child
processes, real SIGKILLs, a real store on disk, `git fsck` from git itself.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from .workload import FILES

INVARIANTS = ("lost_events", "integrity", "fsck_errors", "torn_paths", "duplicate_effects", "litter",
              "stuck_locks", "resets", "unclear_errors", "escapes", "hangs", "unsettled", "unreached")
LITTER = (b".chronos-tmp-", b".chronos-restore-", b".chronos-bulk")


def _lines(path: Path) -> int:
    """Acknowledgements so far (the victim appends one line per operation)."""
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


@dataclass
class Child:
    rc: int
    killed: bool
    seconds: float
    stderr: str


@dataclass
class Findings:
    """What one run found: a count per invariant, and the breaches in words.

    `unreached` is a breach of the tunnel itself: a case that did not get where it
    was meant to (a fault point never hit) proves nothing and says so."""
    breaches: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=lambda: dict.fromkeys(INVARIANTS, 0))
    reached: bool = True
    note: str = ""

    def breach(self, invariant: str, what: str) -> None:
        self.counts[invariant] += 1
        self.breaches.append(f"{invariant}: {what}")

    def merge(self, other: Findings) -> None:
        for k, v in other.counts.items():
            self.counts[k] += v
        self.breaches += other.breaches


class Scenario:
    def __init__(self, seed: int, root: Path | None = None, *, git: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.root = Path(root or tempfile.mkdtemp(prefix=f"chronos-windtunnel-{seed}-"))
        self.store = self.root / "store"
        self.ws = self.root / "ws"
        self.acks = self.root / "acks.jsonl"
        self.fault_log = self.root / "faults-hit.log"
        self.journal_id: str | None = None
        self.events_seen = 0
        self.witness_head: str | None = None     # the power suite: the head before the cut
        self._seed_tree()
        if git:
            self._commit_tree()

    def _seed_tree(self) -> None:
        self.ws.mkdir(parents=True, exist_ok=True)
        for i, rel in enumerate(FILES[: 8 + self.rng.randint(0, len(FILES) - 8)]):
            p = self.ws / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"file {i} of seed {self.seed}\n" * self.rng.randint(1, 50))
        (self.ws / ".gitignore").write_text("*.log\nbuild/\n")
        (self.ws / "build").mkdir(exist_ok=True)
        (self.ws / "build" / "out.log").write_text("ignored\n")

    def _commit_tree(self) -> None:
        """The workspace as a fresh clone is: every file committed, the index git's own (its
        cache tree complete), so that the first snapshot adopts it (engine/adopt.py); then a
        file changed and a new `.gitignore` that keeps a tracked file out, which the adoption
        finds only after its copy is in place."""
        repo = pygit2.init_repository(str(self.ws))
        index = repo.index
        index.add_all()
        tree = index.write_tree()
        index.write()
        who = pygit2.Signature("windtunnel", "windtunnel@localhost")
        repo.create_commit("HEAD", who, who, "the seeded tree", tree, [])
        repo.pack()                    # a clone's objects are in a pack: the adopted index links it
        with open(self.ws / "src" / "m0.py", "a") as fh:
            fh.write("changed since the commit\n")
        (self.ws / "src" / ".gitignore").write_text("m1.py\n")    # src/m0-m7 are in every seed

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def keep_if(self, breached: bool) -> str | None:
        """A breached case's folder stays for whoever looks into it (its path); any other goes."""
        if breached:
            return str(self.root)
        self.cleanup()
        return None

    # ------------------------------------------------------------ the victim
    def child(self, *, fault: str | None = None, ops: int = 8, first=(), background: bool = False,
              kill_after: float | None = None, kill_at: tuple[int, float] | None = None,
              timeout: float = 120, only=(), durable: bool = False,
              prefix: str = "", acks: Path | None = None, wait: bool = True, env: dict | None = None):
        """Run the victim.  `kill_after`: SIGKILL it after that many seconds; `kill_at=(n, s)`:
        after its n-th acknowledged operation plus s seconds, so the kill lands inside the
        workload however fast this machine runs it (n=0: during its start)."""
        extra = env or {}
        env = {k: v for k, v in os.environ.items() if k not in ("CHRONOS_GIT_FAULT", "CHRONOS_GIT_STORE")}
        env.update(extra)
        if fault:
            env["CHRONOS_GIT_FAULT"] = fault
            env["CHRONOS_GIT_FAULT_LOG"] = str(self.fault_log)
        argv = [sys.executable, "-m", "chronos_git.windtunnel.workload", "--store", str(self.store),
                "--ws", str(self.ws), "--acks", str(self.acks), "--seed", str(self.rng.randint(0, 2**31)),
                "--ops", str(ops), *[a for k in first for a in ("--first", k)],
                *[a for k in only for a in ("--only", k)], "--prefix", prefix]
        if acks is not None:
            argv[argv.index("--acks") + 1] = str(acks)
        if background:
            argv.append("--background")
        if durable:
            argv.append("--durable")
        ack_file = Path(argv[argv.index("--acks") + 1])
        acked = _lines(ack_file)
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if not wait:
            return proc
        killed = False
        try:
            if kill_at is not None:
                n, delay = kill_at
                while proc.poll() is None and _lines(ack_file) < acked + n:
                    if time.monotonic() - t0 > timeout:
                        raise subprocess.TimeoutExpired(argv, timeout)
                    time.sleep(0.002)
                try:
                    proc.wait(delay)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
            elif kill_after is not None:
                try:
                    proc.wait(kill_after)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            return Child(-1, True, time.monotonic() - t0, "timed out (hung): " + err.decode("utf-8", "replace"))
        rc = proc.returncode
        return Child(rc, killed or rc == -signal.SIGKILL, time.monotonic() - t0, err.decode("utf-8", "replace"))

    # ------------------------------------------------------- the next start
    def next_start(self, *, background: bool = False):
        """The store as the next process sees it: fresh caches, start() (settle, sweep);
        `background`: as a long-lived host (Hermes) starts it."""
        from ..service import Chronos
        from ..settings import Settings
        Chronos.forget_instances()
        svc = Chronos.get(self.store, Settings(max_checkpoints=6, size_budget_mb=0, compact_grace_s=0))
        svc.background = background
        svc.start()
        return svc

    def faults_hit(self) -> list[str]:
        """Every armed fault that fired in a victim (engine.faults writes one line each)."""
        try:
            return self.fault_log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def acknowledged(self) -> list[dict]:
        lines = []
        for f in sorted(self.root.glob("acks*.jsonl")):
            lines += f.read_text().splitlines()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass                     # a torn last line is the victim's, not the store's
        return out

    # ------------------------------------------------------------- invariants
    def check(self, svc, *, expect_integrity: bool = True, next_operation: bool = True,
              fsck: bool = True) -> Findings:
        out = Findings()
        j = svc.core.journal
        acks = self.acknowledged()
        # the store is never reset silently; no acknowledged event is lost
        ids = {a["journal_id"] for a in acks if a.get("journal_id")}
        if self.journal_id is None and ids:
            self.journal_id = next(iter(ids))
        if self.journal_id and j.state.journal_id not in (None, self.journal_id) or len(ids) > 1:
            out.breach("resets", f"journal {j.state.journal_id} replaced {self.journal_id}")
        if j.state.seq + 1 < self.events_seen:
            out.breach("resets", f"{self.events_seen} events seen before, {j.state.seq + 1} now")
        self.events_seen = max(self.events_seen, j.state.seq + 1)
        for a in acks:
            if (a.get("error") or {}).get("code") == "internal":
                out.breach("unclear_errors", f"{a['op']} #{a['i']}: {a['error']['error'][:300]}")
        repo = svc.core.store.repo()
        for a in acks:
            head = a.get("head")
            if head is None or j.head is None:
                continue
            if a["seq"] > j.state.seq or not (head == j.head or repo.descendant_of(j.head, head)):
                out.breach("lost_events", f"acknowledged event #{a['seq']} ({head[:12]}) is not in the journal")
        # the chain and the witness verify (or the gate says exactly why not)
        if expect_integrity:
            v = svc.journal_verify()
            if v.status != "ok":
                out.breach("integrity", v.error or v.integrity)
        checked = subprocess.run(["git", f"--git-dir={self.store}", "fsck", "--strict", "--no-progress"],
                                 capture_output=True, text=True)
        if checked.returncode != 0 and fsck:
            out.breach("fsck_errors", (checked.stdout + checked.stderr).strip()[-400:])
        # every declared path of a settled or uncertain call is at its pre- or post-image
        for ev in j.events(40):
            for item in ev.get("evidence") or ():
                if isinstance(item, dict) and not (item.get("at_pre") or item.get("at_post")):
                    out.breach("torn_paths", f"{ev['kind']} {str(ev.get('operation_id'))[:12]}: "
                                             f"{item.get('path')} is at neither image")
        # no effect applied twice: one closing event per operation, one replay at most
        closed: dict[str, int] = {}
        replays: dict[str, int] = {}
        for ev in j.events(None):
            op = ev.get("operation_id")
            if ev["kind"] in ("returned", "recovered", "resolved"):
                closed[op] = closed.get(op, 0) + 1
            if ev["kind"] == "replayed":
                replays[op] = replays.get(op, 0) + 1
        for op, n in list(closed.items()) + list(replays.items()):
            if n > 1:
                out.breach("duplicate_effects", f"operation {op[:12]} closed or replayed {n} times")
        # no temp name left in the workspace
        for dirpath, _dirs, files in os.walk(os.fsencode(self.ws)):
            for name in files:
                if any(m in name for m in LITTER):
                    out.breach("litter", os.fsdecode(os.path.join(dirpath, name)))
        # no stale lock blocks the next operation (an operator resolves what waits for one)
        if not next_operation:
            return out
        done = threading.Event()
        failure: list[str] = []

        def next_operation():
            try:
                for op in svc.core.journal.unresolved():
                    svc.resolve(op.operation_id, "not_applied", "windtunnel: the victim was killed")
                svc.recover(replay=True, actor="windtunnel")
                svc.snapshot(str(self.ws), "after the crash")
                svc.write_file(str(self.ws), "after-crash.txt", f"seed {self.seed}\n".encode())
            except Exception as exc:
                failure.append(f"{type(exc).__name__}: {exc}")
            finally:
                done.set()
        threading.Thread(target=next_operation, daemon=True).start()
        if not done.wait(30):
            out.breach("stuck_locks", "the next operation did not finish within 30 s")
        elif failure:
            out.breach("stuck_locks" if "lock" in failure[0].lower() else "integrity",
                       f"the next operation failed: {failure[0]}")
        self.events_seen = max(self.events_seen, svc.core.journal.state.seq + 1)
        return out
