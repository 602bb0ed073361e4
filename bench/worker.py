"""Worker processes: one comparator each, driven call by call over a pipe.

    python -m bench.worker chronos|gitcli|hermes      (JSON lines on stdin/stdout)
    python -m bench.worker build-journal STORE N     (P4 fixture builder)

Each figure gets fresh workers, so `exit` can report the peak RSS of exactly
that figure: VmHWM of the worker itself (chronos and Hermes run in-process,
as they do inside the agent) and ru_maxrss of its children (the git
processes of the git CLI and of Hermes).

Timings are taken inside the worker around the measured call only; the pipe
round trip is not part of any number.  After every measured chronos call the
worker checks its effect (journal event, checkpoint content) outside the
timed region and fails the run if it is missing.
"""
from __future__ import annotations

import base64
import json
import os
import resource
import sys
import time
import traceback
import uuid
from pathlib import Path

from .gitcli import blob_id, dir_bytes, git, git_env, init_shadow
from .scale import ScaleOps
from .timemachine import TimeMachineOps

REGULAR_MODES = (0o100644, 0o100755)


class BenchCheck(AssertionError):
    """A measured call did not have the effect it claims: the number would be a lie."""


def _now() -> float:
    return time.perf_counter()


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def reset_peak_rss() -> None:
    """VmHWM starts again from the current RSS (Linux: clear_refs 5), so a peak read later
    belongs to what ran in between."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def rss_stats() -> dict:
    out = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("VmHWM:", "VmRSS:")):
                k, v = line.split(":", 1)
                out[k.lower() + "_mb"] = round(int(v.split()[0]) / 1024, 1)
    except OSError:
        pass
    out["ru_maxrss_self_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["ru_maxrss_children_mb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    return out


def _profiled(fn, kwargs: dict, top: int = 30) -> dict:
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    try:
        res = fn(**kwargs)
    finally:
        pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(top)
    return {"result": res, "profile": s.getvalue()}


def _ls_tree_entries(out: str) -> dict:
    """`git ls-tree -z` output -> {path: (mode, oid)}."""
    res = {}
    for rec in out.split("\0"):
        if not rec:
            continue
        meta, path = rec.split("\t", 1)
        mode, _typ, oid = meta.split()
        res[path] = (int(mode, 8), oid)
    return res


def _check_git_tree(env, cwd, rev: str, expect: dict, who: str) -> None:
    if not expect:
        return
    got = _ls_tree_entries(git(["ls-tree", "-z", rev, "--", *expect], env, cwd=cwd))
    for rel, want in expect.items():
        have = got.get(rel, (None, None))[1]
        if have != want:
            raise BenchCheck(f"{who}: {rev} has {rel} = {have}, expected {want}")


# ============================================================== chronos-git
class ChronosHandler(TimeMachineOps, ScaleOps):
    def __init__(self):
        from chronos_git.journal_refs import events
        from chronos_git.service import Call, Chronos, Declared, Outcome
        from chronos_git.settings import Settings
        self.Chronos, self.Call, self.Declared, self.Outcome, self.Settings, self.events = (
            Chronos, Call, Declared, Outcome, Settings, events)
        self.c = None
        self.ws = None
        self.pending = None
        self.n = 0

    # ------------------------------------------------------------ helpers
    def _get(self, store_dir: str, settings: dict):
        return self.Chronos.get(store_dir, self.Settings(**settings))

    def _check_event(self, kind: str, op: str) -> None:
        j = self.c.core.journal
        ev = j.event(j.head)
        if ev.get("kind") != kind or ev.get("operation_id") != op:
            raise BenchCheck(f"chronos: journal head is {ev.get('kind')} {str(ev.get('operation_id'))[:12]}, "
                             f"expected {kind} {op[:12]}")

    def _check_tree(self, cp: str | None, expect: dict) -> None:
        if not cp:
            raise BenchCheck("chronos: no pre-call checkpoint was recorded")
        repo = self.c.core.store.repo()
        try:
            tree = repo[cp].tree
        except (KeyError, ValueError) as exc:
            raise BenchCheck(f"chronos: checkpoint {cp} is not in the store ({exc})") from None
        for rel, want in expect.items():
            try:
                have = str(tree[rel].id)
            except KeyError:
                have = None
            if have != want:
                raise BenchCheck(f"chronos: checkpoint {cp[:12]} has {rel} = {have}, expected {want}")

    def _check_snapshot(self, ticket, expect: dict) -> dict:
        snap = ticket.snapshot or {}
        if snap.get("kind") in ("failed", "none") or snap.get("error"):
            raise BenchCheck(f"chronos: pre-call snapshot did not happen: {snap}")
        self._check_event("started", ticket.operation_id)
        if snap.get("partial"):
            return {"partial": True}
        self._check_tree(ticket.pre_checkpoint, expect)
        return {"partial": False}

    def _files_in(self, cp: str) -> list[str]:
        repo = self.c.core.store.repo()
        out: list[str] = []
        stack = [(repo[cp].tree, "")]
        while stack:
            tree, prefix = stack.pop()
            for e in tree:
                if e.filemode == 0o040000:
                    stack.append((repo[e.id], prefix + e.name + "/"))
                elif e.filemode in REGULAR_MODES:
                    out.append(prefix + e.name)
        return out

    # ---------------------------------------------------------------- ops
    def op_open(self, store_dir: str, ws: str, settings: dict, host: str = "cli") -> dict:
        t0 = _now()
        self.c = self._get(store_dir, settings)
        st = self.c.start()
        self.ws = ws
        out = {"open_ms": _ms(t0), "integrity": st.get("integrity"), "host": "cli"}
        if host == "hermes":
            out.update(self._as_in_hermes())
        return out

    def _as_in_hermes(self) -> dict:
        """Run the service the way hermes_glue does: `background = True` (inotify watcher,
        background first snapshot) and a turn checkpoint at the start of the turn."""
        if not hasattr(self.c, "background"):
            return {"host": "cli", "host_note": "this service has no background mode: measured as cli"}
        self.c.background = True
        t0 = _now()
        if hasattr(self.c, "turn_checkpoint"):
            self.c.turn_checkpoint(self.ws, session_id="bench")
        wsobj = self.c.core.store.workspace(self.ws)
        # the service has it on .snapshots (a getattr on the service itself never waited)
        state = getattr(getattr(self.c, "snapshots", None), "background_state", lambda _ws: None)
        deadline = time.monotonic() + 600
        while (st := state(wsobj)) and st.get("running") and time.monotonic() < deadline:
            time.sleep(0.05)            # the turn checkpoint runs in the background: let it finish
        if st and st.get("error"):
            raise BenchCheck(f"chronos: background turn checkpoint failed: {st['error']}")
        watcher = wsobj.watcher_state() if hasattr(wsobj, "watcher_state") else None
        return {"host": "hermes", "turn_checkpoint_ms": _ms(t0), "watcher": watcher}

    def op_watcher(self) -> dict | None:
        wsobj = self.c.core.store.workspace(self.ws)
        return wsobj.watcher_state() if hasattr(wsobj, "watcher_state") else None

    def shutdown(self) -> None:
        """What hermes_glue registers with atexit: write stat caches kept in memory."""
        if self.c is not None and hasattr(self.c, "flush"):
            self.c.flush()

    def op_first(self, store_dir: str, ws: str, settings: dict) -> dict:
        """P3: the first snapshot into an empty store (Chronos.snapshot, no budget)."""
        t0 = _now()
        self.c = self._get(store_dir, settings)
        self.c.start()
        init_ms = _ms(t0)
        self.ws = ws
        t0 = _now()
        r = self.c.snapshot(ws, "bench: first snapshot").wire()
        ms = _ms(t0)
        cp = r.get("checkpoint")
        if not cp or r.get("partial"):
            raise BenchCheck(f"chronos: first snapshot incomplete: { {k: r.get(k) for k in ('checkpoint', 'partial', 'kind')} }")
        files = self._files_in(cp)
        out = {"ms": ms, "init_ms": init_ms, "checkpoint": cp, "files": len(files),
               "kind": r.get("kind"), "skipped": len(r.get("skipped") or ())}
        wsobj = self.c.core.store.workspace(ws)
        out["seed"] = getattr(wsobj, "last_seed", None)
        out["phases_s"] = getattr(wsobj, "last_bulk", None)       # the import's own phase times
        if hasattr(self.c, "consolidate"):
            # the background work the first import starts (the CLI runs it in the foreground)
            out["store_bytes_fast"] = dir_bytes(store_dir)
            t0 = _now()
            out["consolidate"] = self.c.consolidate().wire()
            out["consolidate_ms"] = _ms(t0)
        return out

    def op_tracked(self, checkpoint: str) -> list[str]:
        return self._files_in(checkpoint)

    def op_pre_write(self, path: str, content_b64: str, expect: dict) -> dict:
        """P1: begin() of a write_file call declaring `path` (gate + snapshot + intent)."""
        data = base64.b64decode(content_b64)
        self.n += 1
        call = self.Call(tool="write_file", args={"path": path, "content": data.decode("utf-8", "replace")},
                         workspace=self.ws, session_id="bench", tool_call_id=f"bench-w{self.n}",
                         declared=[self.Declared(path, data)])
        return self._timed_begin(call, expect, pending=(path, data))

    def _timed_begin(self, call, expect: dict, pending=(None, None)) -> dict:
        """begin() under the timer, then (untimed) the checks of what it recorded."""
        t0 = _now()
        ticket = self.c.begin(call)
        ms = _ms(t0)
        chk = self._check_snapshot(ticket, expect)
        self.pending = (ticket, *pending)
        return {"ms": ms, "checkpoint": ticket.pre_checkpoint, "created": ticket.snapshot.get("created"),
                "kind": ticket.snapshot.get("kind"), "scan": ticket.snapshot.get("scan"), **chk}

    def op_post_write(self) -> dict:
        """The write itself, then finish() (timed separately: post-call work)."""
        ticket, path, data = self.pending
        self.pending = None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        t0 = _now()
        info = self.c.finish(ticket, self.Outcome(status="ok", result_hash=blob_id(data))).wire()
        ms = _ms(t0)
        if not info.get("recorded") or info.get("outcome") != "returned":
            raise BenchCheck(f"chronos: finish() did not record the outcome: {info}")
        self._check_event("returned", ticket.operation_id)
        self._idle_sync()
        return {"ms": ms, "post_checkpoint": info.get("post_checkpoint")}

    def _idle_sync(self) -> None:
        """What Hermes' outcome writer does once idle (service/transaction.py `_write_behind`):
        what the witness carries is synced once it is due, so the next call's intent does not
        carry it (untimed; a finish() called directly, as here, does not)."""
        from chronos_git.journal_refs.carried import SYNC_AFTER_OBJECTS
        self.c.core.journal.sync(min_objects=SYNC_AFTER_OBJECTS)

    def op_pre_terminal(self, expect: dict) -> dict:
        """P2: begin() of a terminal call (no declared paths: full scan)."""
        self.n += 1
        call = self.Call(tool="terminal", args={"command": f"make -j2  # bench call {self.n}"},
                         workspace=self.ws, session_id="bench", tool_call_id=f"bench-t{self.n}")
        return self._timed_begin(call, expect)

    def op_post_terminal(self) -> dict:
        ticket = self.pending[0]
        self.pending = None
        t0 = _now()
        info = self.c.finish(ticket, self.Outcome(status="ok", exit_code=0, result_hash="0")).wire()
        ms = _ms(t0)
        if not info.get("recorded") or info.get("outcome") != "returned":
            raise BenchCheck(f"chronos: finish() did not record the outcome: {info}")
        self._check_event("returned", ticket.operation_id)
        self._idle_sync()
        return {"ms": ms}

    def op_checkpoint(self) -> str:
        r = self.c.snapshot(self.ws, "bench: restore target").wire()
        if not r.get("checkpoint") or r.get("partial"):
            raise BenchCheck(f"chronos: snapshot failed: {r}")
        return r["checkpoint"]

    def op_restore(self, checkpoint: str, paths: list[str] | None, expect_changed: int) -> dict:
        """P5: restore (safety checkpoint + plan + writes + journal)."""
        t0 = _now()
        r = self.c.restore(self.ws, checkpoint, paths=paths, actor="bench").wire()
        ms = _ms(t0)
        if r.get("status") != "ok":
            raise BenchCheck(f"chronos: restore failed: {r}")
        safety = r.get("safety_checkpoint")
        try:
            self.c.core.store.repo()[safety]
        except (KeyError, ValueError, TypeError):
            raise BenchCheck(f"chronos: restore's safety checkpoint {safety} is not in the store") from None
        if not r.get("operation_id"):
            raise BenchCheck("chronos: restore was not journaled")
        self._check_event("returned", r["operation_id"])
        if r.get("files_changed") != expect_changed:
            raise BenchCheck(f"chronos: restore changed {r.get('files_changed')} files, expected {expect_changed}")
        return {"ms": ms, "safety_checkpoint": safety}

    # P4 ----------------------------------------------------------------
    def op_journal_open(self, store_dir: str, ws: str, settings: dict, seed_events: int = 0) -> dict:
        t0 = _now()
        self.c = self._get(store_dir, settings)
        st = self.c.start()
        self.ws = ws
        open_ms = _ms(t0)
        if st.get("integrity") != "ok":
            raise BenchCheck(f"chronos: journal integrity {st.get('integrity')}")
        while self.c.journal_status().events < seed_events:
            self._append_pair()
        return {"open_ms": open_ms, "events": self.c.journal_status().events}

    def _intent_fields(self) -> dict:
        self.n += 1
        return {"operation_id": uuid.uuid4().hex, "tool": "terminal", "args_hash": "0" * 64,
                "fingerprint": f"{self.n:064x}", "session_id": "bench", "tool_call_id": f"bench-j{self.n}",
                "turn_id": None, "owner": self.c.core.journal.me.to_dict(), "workspace": self.ws,
                "pre_checkpoint": None, "snapshot": {"kind": "none", "note": "bench: journal only"}}

    def _append_pair(self) -> None:
        f = self._intent_fields()
        self.c.core.journal.append(self.events.Started, f)
        self.c.core.journal.append(self.events.Returned, {"operation_id": f["operation_id"], "status": "ok",
                                           "result_hash": None, "post_checkpoint": None, "duration_ms": 0.0})

    def op_append(self) -> dict:
        """P4 append: one durable `started` event (the `returned` after it is untimed)."""
        f = self._intent_fields()
        t0 = _now()
        ev = self.c.core.journal.append(self.events.Started, f, defer=True)   # as begin() appends it
        ms = _ms(t0)
        # durable when it returns; visible to git once the background publisher moved the ref
        from chronos_git.journal_refs.publish import PUBLISHER
        if not PUBLISHER.wait(self.c.core.journal, 30):
            raise BenchCheck("chronos: the intent was not published within 30 s")
        visible_ms = _ms(t0)
        if ev.get("id") != self.c.core.journal.head:
            raise BenchCheck("chronos: append did not move the journal head")
        self._check_event("started", f["operation_id"])
        self.c.core.journal.append(self.events.Returned, {"operation_id": f["operation_id"], "status": "ok",
                                           "result_hash": None, "post_checkpoint": None, "duration_ms": 0.0})
        self._check_event("returned", f["operation_id"])
        self._idle_sync()
        return {"ms": ms, "visible_ms": visible_ms}

    def op_gate(self) -> dict:
        """P4 admission: Chronos.gate()."""
        t0 = _now()
        g = self.c.gate.state()
        ms = _ms(t0)
        if g is not None:
            raise BenchCheck(f"chronos: gate closed: {g.message}")
        return {"ms": ms}

    def op_begin_nosnap(self) -> dict:
        """begin() with auto_snapshot off: gate + durable intent, no snapshot."""
        self.n += 1
        call = self.Call(tool="terminal", args={"command": f"true  # bench {self.n}"}, workspace=self.ws,
                         session_id="bench", tool_call_id=f"bench-b{self.n}")
        t0 = _now()
        ticket = self.c.begin(call)
        ms = _ms(t0)
        self._check_event("started", ticket.operation_id)
        info = self.c.finish(ticket, self.Outcome(status="ok", exit_code=0)).wire()
        if not info.get("recorded"):
            raise BenchCheck(f"chronos: finish() did not record the outcome: {info}")
        return {"ms": ms}

    def op_events(self) -> int:
        return self.c.journal_status().events

    # P6 ----------------------------------------------------------------
    def op_compact(self, store_dir: str) -> dict:
        before, obj_before = dir_bytes(store_dir), dir_bytes(store_dir, "objects")
        tip = self.c.core.store.workspace(self.ws).tip()
        reset_peak_rss()
        t0 = _now()
        rep = self.c.compact(grace_s=0).wire()
        ms = _ms(t0)
        peak = rss_stats().get("vmhwm_mb")     # before the checks below map the whole store
        after, obj_after = dir_bytes(store_dir), dir_bytes(store_dir, "objects")
        if rep.get("dropped"):
            raise BenchCheck(f"chronos: compaction dropped checkpoints although retention is unlimited: "
                             f"{[d['workspace'] for d in rep['dropped']]}")
        # everything the newest checkpoint needs must still be there
        repo = self.c.core.store.repo()
        missing = 0
        stack = [repo[tip.id].tree]
        while stack:
            tree = stack.pop()
            for e in tree:
                if e.filemode == 0o040000:
                    stack.append(repo[e.id])
                elif e.id not in repo:
                    missing += 1
        if missing:
            raise BenchCheck(f"chronos: {missing} objects of the newest checkpoint vanished in compaction")
        v = self.c.journal_verify().wire()
        if v.get("status") != "ok":
            raise BenchCheck(f"chronos: journal verify after compaction: {v.get('integrity')}")
        return {"ms": ms, "bytes_before": before, "bytes_after": after, "objects_bytes_before": obj_before,
                "objects_bytes_after": obj_after, "objects_packed": rep.get("objects_packed"),
                "journal_events": v.get("events"), "compact_peak_rss_mb": peak}


# ================================================================== git CLI
class GitHandler:
    """A shadow-git plugin: persistent index in <shadow>/index, `add -A` + `commit`."""

    JREF = "refs/bench/journal"

    def __init__(self):
        self.env = None
        self.ws = None
        self.git_dir = None
        self.n = 0

    def _bind(self, git_dir: str, ws: str) -> None:
        self.git_dir, self.ws = git_dir, ws
        self.env = git_env(git_dir, ws)

    def _commit(self) -> None:
        self.n += 1
        git(["add", "-A"], self.env, cwd=self.ws)
        git(["commit", "-q", "--allow-empty", "--no-verify", "-m", f"checkpoint {self.n}"], self.env, cwd=self.ws)

    def _head(self) -> str:
        return git(["rev-parse", "HEAD"], self.env, cwd=self.ws).strip()

    def op_open(self, git_dir: str, ws: str) -> dict:
        self._bind(git_dir, ws)
        return {"head": self._head()}

    def op_first(self, git_dir: str, ws: str) -> dict:
        init_shadow(Path(git_dir))
        self._bind(git_dir, ws)
        t0 = _now()
        self._commit()
        ms = _ms(t0)
        files = len(self.op_ls_files())
        return {"ms": ms, "files": files, "head": self._head()}

    def op_ls_files(self) -> list[str]:
        out = git(["ls-files", "-s", "-z"], self.env, cwd=self.ws)
        res = []
        for rec in out.split("\0"):
            if rec:
                meta, path = rec.split("\t", 1)
                if int(meta.split()[0], 8) in REGULAR_MODES:
                    res.append(path)
        return res

    def op_snapshot(self, expect: dict) -> dict:
        before = self._head()
        t0 = _now()
        self._commit()
        ms = _ms(t0)
        head = self._head()
        if head == before:
            raise BenchCheck("gitcli: commit did not move HEAD")
        _check_git_tree(self.env, self.ws, head, expect, "gitcli")
        return {"ms": ms}

    def op_checkpoint(self) -> str:
        self._commit()
        return self._head()

    def op_restore(self, commit: str, rels: list[str] | None) -> dict:
        """Safety commit (`add -A` + commit), then checkout of the paths or read-tree -u of the tree."""
        t0 = _now()
        self._commit()
        if rels:
            git(["checkout", commit, "--", *rels], self.env, cwd=self.ws)
        else:
            git(["read-tree", "-u", "--reset", commit], self.env, cwd=self.ws)
        return {"ms": _ms(t0)}

    def op_gc(self) -> dict:
        before, obj_before = dir_bytes(self.git_dir), dir_bytes(self.git_dir, "objects")
        t0 = _now()
        git(["gc", "--prune=now", "--quiet"], self.env, cwd=self.ws)
        ms = _ms(t0)
        git(["fsck", "--connectivity-only", "--no-progress"], self.env, cwd=self.ws)
        return {"ms": ms, "bytes_before": before, "bytes_after": dir_bytes(self.git_dir),
                "objects_bytes_before": obj_before, "objects_bytes_after": dir_bytes(self.git_dir, "objects")}

    # P4: a journal as git-CLI commits (hash-object + mktree + commit-tree + update-ref)
    def op_journal_open(self, git_dir: str, seed_events: int = 0) -> dict:
        if not Path(git_dir, "HEAD").exists():
            init_shadow(Path(git_dir))
        self.git_dir = git_dir
        self.jenv = git_env(git_dir)
        tip = git(["rev-parse", "-q", "--verify", self.JREF], self.jenv, check=False).strip()
        self.jtip = tip or None
        self.jseq = json.loads(git(["cat-file", "blob", f"{self.JREF}:state.json"], self.jenv))["seq"] if tip else -1
        while self.jseq + 1 < seed_events:
            self._jappend({"kind": "seed"})
        return {"events": self.jseq + 1}

    def _jappend(self, event: dict, open_ops: dict | None = None) -> str:
        seq = self.jseq + 1
        state = json.dumps({"seq": seq, "open": open_ops or {}}, sort_keys=True).encode()
        blob = git(["hash-object", "-w", "--stdin"], self.jenv, input=state).strip()
        tree = git(["mktree"], self.jenv, input=f"100644 blob {blob}\tstate.json\n".encode()).strip()
        args = ["commit-tree", tree, "-m", json.dumps({"seq": seq, **event}, sort_keys=True)]
        if self.jtip:
            args[2:2] = ["-p", self.jtip]
        commit = git(args, self.jenv).strip()
        git(["update-ref", self.JREF, commit] + ([self.jtip] if self.jtip else [""]), self.jenv)
        self.jtip, self.jseq = commit, seq
        return commit

    def op_jappend(self) -> dict:
        op = uuid.uuid4().hex
        t0 = _now()
        commit = self._jappend({"kind": "started", "operation_id": op, "tool": "terminal"}, {op: {"tool": "terminal"}})
        ms = _ms(t0)
        if git(["rev-parse", self.JREF], self.jenv).strip() != commit:
            raise BenchCheck("gitcli: journal ref did not move")
        self._jappend({"kind": "returned", "operation_id": op})
        return {"ms": ms}

    def op_jadmit(self) -> dict:
        t0 = _now()
        state = json.loads(git(["cat-file", "blob", f"{self.JREF}:state.json"], self.jenv))
        ms = _ms(t0)
        if state.get("open"):
            raise BenchCheck("gitcli: journal has open operations")
        return {"ms": ms}


# =================================================================== Hermes
class HermesHandler:
    """Hermes' built-in tools.checkpoint_manager.CheckpointManager, in-process."""

    def __init__(self):
        import tools.checkpoint_manager as cm   # HERMES_HOME points into the run dir
        self.cm = cm
        self.mgr = None
        self.ws = None

    def _store(self) -> Path:
        return self.cm._store_path(self.cm.CHECKPOINT_BASE)

    def _ref(self) -> str:
        return self.cm._ref_name(self.cm._project_hash(self.ws))

    def _env(self) -> dict:
        return git_env(self._store(), self.ws)

    def _tip(self) -> str | None:
        return git(["rev-parse", "-q", "--verify", self._ref()], self._env(), cwd=self.ws, check=False).strip() or None

    def op_setup(self, base: str, ws: str, max_snapshots: int) -> dict:
        cm = self.cm
        cm.CHECKPOINT_BASE = Path(base)
        self.mgr = cm.CheckpointManager(enabled=True, max_snapshots=max_snapshots)
        self.ws = ws
        t0 = _now()
        count = cm._dir_file_count(ws)
        return {"count": count, "count_ms": _ms(t0), "limit": cm._MAX_FILES,
                "refused": (f"more than {cm._MAX_FILES:,} files and directories "
                            f"(tools.checkpoint_manager._MAX_FILES): ensure_checkpoint() skips the directory"
                            if count > cm._MAX_FILES else None)}

    def op_first(self, base: str, ws: str, max_snapshots: int) -> dict:
        info = self.op_setup(base, ws, max_snapshots)
        self.mgr.new_turn()
        t0 = _now()
        taken = self.mgr.ensure_checkpoint(ws, "bench: first checkpoint")
        ms = _ms(t0)
        files = len(self.op_ls_files()) if taken else 0
        return {"ms": ms, "taken": taken, "files": files, **info}

    def op_ls_files(self) -> list[str]:
        out = git(["ls-tree", "-r", "-z", self._ref()], self._env(), cwd=self.ws)
        return [p for p, (mode, _oid) in _ls_tree_entries(out).items() if mode in REGULAR_MODES]

    def op_snapshot(self, expect: dict) -> dict:
        self.mgr.new_turn()
        t0 = _now()
        taken = self.mgr.ensure_checkpoint(self.ws, "bench: before tool call")
        ms = _ms(t0)
        if taken:
            _check_git_tree(self._env(), self.ws, self._ref(), expect, "hermes")
        return {"ms": ms, "taken": taken}

    def op_checkpoint(self) -> str:
        self.mgr.new_turn()
        self.mgr.ensure_checkpoint(self.ws, "bench: restore target")
        tip = self._tip()
        if not tip:
            raise BenchCheck("hermes: no checkpoint to restore")
        return tip

    def op_restore(self, commit: str, rel: str | None) -> dict:
        t0 = _now()
        r = self.mgr.restore(self.ws, commit, file_path=rel)
        ms = _ms(t0)
        if not r.get("success"):
            raise BenchCheck(f"hermes: restore failed: {r}")
        return {"ms": ms}

    def op_gc(self) -> dict:
        store = self._store()
        env = git_env(store)
        before, obj_before = dir_bytes(store), dir_bytes(store, "objects")
        t0 = _now()
        git(["gc", "--prune=now", "--quiet"], env)
        ms = _ms(t0)
        return {"ms": ms, "bytes_before": before, "bytes_after": dir_bytes(store),
                "objects_bytes_before": obj_before, "objects_bytes_after": dir_bytes(store, "objects")}


HANDLERS = {"chronos": ChronosHandler, "gitcli": GitHandler, "hermes": HermesHandler}


def serve(kind: str) -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                     # stray prints from libraries go to the worker log
    sys.stdout = sys.stderr

    def reply(obj: dict) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        handler = HANDLERS[kind]()
    except Exception as exc:          # noqa: BLE001 - reported to the parent
        reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(),
               "fatal": True})
        return 1
    reply({"ok": True, "result": {"ready": True, **rss_stats()}})
    for line in sys.stdin:
        req = json.loads(line)
        op, args = req["op"], req.get("args") or {}
        if op == "exit":
            note = None
            try:
                if hasattr(handler, "shutdown"):
                    handler.shutdown()
            except Exception as exc:  # noqa: BLE001 - reported, the stats still count
                note = f"shutdown failed: {type(exc).__name__}: {exc}"
            reply({"ok": True, "result": {**rss_stats(), **({"shutdown_error": note} if note else {})}})
            break
        try:
            if op == "rss":
                result = rss_stats()
            elif op == "profile":
                result = _profiled(getattr(handler, "op_" + args["target"]), args.get("kwargs") or {})
            else:
                result = getattr(handler, "op_" + op)(**args)
            reply({"ok": True, "result": result})
        except BenchCheck as exc:
            reply({"ok": False, "error": f"CHECK FAILED: {exc}", "trace": traceback.format_exc(), "check": True})
        except Exception as exc:      # noqa: BLE001 - reported to the parent
            reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
    return 0


def build_journal(store_dir: str, events: int) -> int:
    """Fill a fresh store's journal up to `events` events (started/returned pairs)."""
    h = ChronosHandler()
    h.op_journal_open(store_dir, "/nonexistent-bench-workspace", {"auto_snapshot": False}, 0)
    t0 = time.monotonic()
    last = 0
    while True:
        n = h.op_events()
        if n >= events:
            break
        h._append_pair()
        if n - last >= 10_000:
            last = n
            print(f"[bench] journal fixture: {n:,}/{events:,} events ({time.monotonic() - t0:.0f}s)",
                  file=sys.stderr, flush=True)
    print(f"[bench] journal fixture: {h.op_events():,} events in {time.monotonic() - t0:.0f}s",
          file=sys.stderr, flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv and argv[0] == "build-journal":
        return build_journal(argv[1], int(argv[2]))
    return serve(argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
