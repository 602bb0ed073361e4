"""P8 and P9: the time machine's operations (issue 35, "Fast where it is used").

P8, on the corpus workspace and the run's chronos store, each beside a full restore in the
same run (interleaved repetition by repetition, the order rotating, `os.sync()` before each
timed operation):

* agent-only restore: 100 files changed by protected calls (eight `run_command` calls of ten
  files each, then twenty `write_file` calls of one file each) since checkpoint C0; the person
  edits 20 of them (other lines) between the calls.  `agent_restore(C0)` must put the agent's
  lines back and keep the person's; beside it `restore(C0)` (the full restore of the same
  checkpoint, which also drops the person's lines).
* revert of a one-file call: the last `write_file` call; beside it the full restore of that
  call's pre-checkpoint (the workspace it saw).
* undo and redo: `undo()` right after the agent-only restore, `redo()` right after that undo
  (nothing changed in between); beside them the same full restore of C0.

Every repetition starts from the same workspace (S1, what the calls and the person left): each
timed operation is followed (untimed) by an `undo()` that must give S1 back byte for byte.
Every result is checked against the files (outside the timed region); a failed check fails
the figure.

P9: `log --all` over a workspace with 10,000 checkpoints, in a store of its own (a small
workspace: listing reads commits, not files).  The chain is made cheaply (untimed): a first
snapshot through the service, then 9,998 commits, each changing one file, byte-identical to
what `Chain.advance` writes (the next number each), written by `git fast-import` as one pack
(a store compaction packs a long chain too), the workspace's ref and HEAD moved once at the
end, then one more snapshot through the service on top.
Timed: `Chronos.log(ws, None, all=True)` (all 10,000 listed) and with the CLI's default limit
(20), in the worker; beside them `git log` of the same ref (the git CLI reading the same
commits, messages included) and the `chronos-git log --all --json` command as a process.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .stats import ratio, summary

AGENT_FILES = 100
PERSON_FILES = 20
SHELL_CALLS = 8                      # of ten files each; the rest are write_file calls of one file
LOG_CHECKPOINTS = 10_000
LOG_FILES = 20
MIN_LINES = 12                       # agent and person edits at least ten lines apart: separate hunks
MAX_BYTES = 256 * 1024

# the shell calls' command: writes the files a JSON spec names (path -> base64 content)
APPLY = ("import base64, json, sys\n"
         "for p, b in json.load(open(sys.argv[1])).items():\n"
         "    open(p, 'wb').write(base64.b64decode(b))\n")


# ================================================================ worker side
class TimeMachineOps:
    """Mixed into bench.worker.ChronosHandler (self.c: the service, self.ws: the workspace)."""

    def _record(self, r: dict, what: str) -> dict:
        if r.get("status") != "ok" or not r.get("operation_id") or not r.get("recorded"):
            raise self._fail(f"chronos: {what} did not run as a recorded protected call: "
                              f"{ {k: r.get(k) for k in ('status', 'error', 'recorded', 'outcome', 'reason')} }")
        return {k: r.get(k) for k in ("operation_id", "pre_checkpoint", "post_checkpoint")}

    @staticmethod
    def _fail(msg: str):
        from .worker import BenchCheck
        return BenchCheck(msg)

    def op_tm_write(self, rel: str, content_b64: str) -> dict:
        """A protected write_file call (Chronos.write_file)."""
        r = self.c.write_file(self.ws, os.path.join(self.ws, rel), base64.b64decode(content_b64),
                              actor="bench").wire()
        return self._record(r, f"write_file {rel}")

    def op_tm_run(self, argv: list[str]) -> dict:
        """A protected shell call (Chronos.run_command)."""
        r = self.c.run_command(self.ws, argv).wire()
        if r.get("exit_code") != 0:
            raise self._fail(f"chronos: run_command exited {r.get('exit_code')}: {r.get('error')}")
        return self._record(r, "run_command")

    def op_tm_number(self, checkpoint: str) -> int | None:
        return self.c.core.store.workspace(self.ws).resolve(checkpoint).number

    def op_tm(self, kind: str, spec: str | None = None, operation: str | None = None,
              expect_changed: int | None = None) -> dict:
        """One time-machine operation under the timer; then (untimed) what it must have done."""
        c, ws = self.c, self.ws
        calls = {"agent_restore": lambda: c.agent_restore(ws, spec, actor="bench"),
                 "restore": lambda: c.restore(ws, spec, actor="bench"),
                 "revert": lambda: c.revert(ws, operation, actor="bench"),
                 "undo": lambda: c.undo(ws, actor="bench"),
                 "redo": lambda: c.redo(ws, actor="bench")}
        os.sync()
        t0 = time.perf_counter()
        res = calls[kind]()
        ms = (time.perf_counter() - t0) * 1000.0
        r = res.wire()
        brief = {k: r.get(k) for k in ("status", "files_changed", "conflicts", "failed", "skipped", "kept",
                                       "untracked_removed", "note", "kind", "operation_id")}
        if r.get("status") != "ok":
            raise self._fail(f"chronos: {kind} returned {brief}")
        if r.get("conflicts"):
            raise self._fail(f"chronos: {kind} left {r['conflicts']} conflicts: {brief}; "
                              f"plan {[p for p in (r.get('plan') or []) if p.get('action') == 'conflict'][:3]}")
        if expect_changed is not None and r.get("files_changed") != expect_changed:
            raise self._fail(f"chronos: {kind} changed {r.get('files_changed')} files, expected "
                              f"{expect_changed}: {brief}")
        if not r.get("operation_id"):
            raise self._fail(f"chronos: {kind} was not journaled: {brief}")
        safety = r.get("safety_checkpoint")
        try:
            c.core.store.repo()[safety]
        except (KeyError, ValueError, TypeError):
            raise self._fail(f"chronos: {kind}'s safety checkpoint {safety} is not in the store") from None
        self._check_event("returned", r["operation_id"])
        return {"ms": ms, "files_changed": r.get("files_changed"), "operation_id": r["operation_id"],
                "after_checkpoint": r.get("after_checkpoint")}

    # P9 ------------------------------------------------------------------
    def op_tm_log_fixture(self, store_dir: str, ws: str, settings: dict, checkpoints: int) -> dict:
        """A workspace with `checkpoints` checkpoints: the first and the last through the service,
        the ones between made with `git fast-import` into the store (one pack, seconds): each
        commit byte for byte what `Chain.advance` writes (checked on one), numbered, one file
        changed in each; then the workspace's ref and HEAD moved to the newest of them."""
        import subprocess

        import pygit2

        from chronos_git.engine import loose
        from chronos_git.engine.checkpoint import CheckpointMeta, signature

        from .gitcli import git_env
        self.c = self._get(store_dir, settings)
        self.c.start()
        self.ws = ws
        t0 = time.perf_counter()
        first = self.c.snapshot(ws, "bench: first").wire()
        if not first.get("checkpoint"):
            raise self._fail(f"chronos: first snapshot failed: {first}")
        wsobj = self.c.core.store.workspace(ws)
        tip = wsobj.tip()
        number, when = tip.number, int(time.time()) - checkpoints
        tools = (None, "write_file", "terminal", "patch")
        tmp_ref = "refs/bench/p9-fixture"
        stream, sample = [], None
        for i in range(checkpoints - 2):
            number += 1
            meta = CheckpointMeta(description=f"bench: checkpoint {number}", kind="full", files=LOG_FILES + 1,
                                  tool=tools[i % 4], session_id="bench" if i % 4 else None,
                                  time=float(when + i), number=number)
            sig = signature(meta.time)
            who = f"{sig.name} <{sig.email}> {sig.time} +0000"
            msg = meta.to_message().encode()
            content = f"checkpoint {number}\n".encode()
            stream += [f"commit {tmp_ref}\nmark :{i + 1}\nauthor {who}\ncommitter {who}\n".encode(),
                       b"data %d\n" % len(msg), msg, b"\n",
                       (f"from {tip.id}\n" if i == 0 else "").encode(),
                       b"M 100644 inline counter.txt\ndata %d\n" % len(content), content, b"\n"]
            if i == 0:
                sample = (msg.decode(), sig, content)
        stream.append(b"done\n")
        subprocess.run(["git", "fast-import", "--quiet", "--done", "--date-format=raw"], input=b"".join(stream),
                       env=git_env(self.c.core.store.root), check=True, capture_output=True)
        repo = self.c.core.store.repo()
        newest = repo.references.get(tmp_ref).target
        # the first one written, byte for byte as the chain writes a commit
        c1 = newest
        for _ in range(checkpoints - 3):
            c1 = repo[c1].parent_ids[0]
        want = loose.commit_data(str(repo[c1].tree_id), [tip.id], sample[1], sample[0])
        if repo.odb.read(c1)[1] != want or repo[repo[c1].tree_id]["counter.txt"].data != sample[2]:
            raise self._fail("the fast-import fixture's commits are not what the chain writes (bench bug)")
        with wsobj.exclusive():
            wrepo = wsobj.repo()
            wrepo.references.create(wsobj.ref, newest, force=True)
            wrepo.set_head(newest)
            repo.references.delete(tmp_ref)
        with open(os.path.join(ws, "counter.txt"), "wb") as fh:
            fh.write(f"checkpoint {number + 1} (the workspace)\n".encode())
        last = self.c.snapshot(ws, "bench: last").wire()
        built_ms = (time.perf_counter() - t0) * 1000.0
        Chronos = type(self.c)
        Chronos.forget_instances()           # a fresh process's view of the store
        self.c = self._get(store_dir, settings)
        self.c.start()
        newest_cp = self.c.core.store.workspace(ws).tip()
        return {"build_ms": built_ms, "last": last.get("checkpoint"), "created": last.get("created"),
                "number": newest_cp.number if newest_cp else None, "ref": wsobj.ref,
                "store": str(self.c.core.store.root), "pygit2": pygit2.__version__}

    def op_tm_log(self, limit: int | None, expect: int) -> dict:
        t0 = time.perf_counter()
        r = self.c.log(self.ws, limit, all=True)
        ms = (time.perf_counter() - t0) * 1000.0
        cps = r.checkpoints
        want = expect if limit is None else min(limit, expect)
        if len(cps) != want:
            raise self._fail(f"chronos: log --all listed {len(cps)} checkpoints, expected {want}")
        if cps[0].number != expect or (limit is None and cps[-1].number != 1):
            raise self._fail(f"chronos: log --all numbers run {cps[0].number}..{cps[-1].number}, "
                              f"expected {expect}..1")
        if any(not cp.parents for cp in cps[:-1]) or (r.damaged or None):
            raise self._fail(f"chronos: log --all lost parents or found damage: {r.damaged}")
        return {"ms": ms, "listed": len(cps)}


# ================================================================ parent side
def _lines_ok(data: bytes) -> bool:
    return b"\0" not in data and len(data) <= MAX_BYTES and data.count(b"\n") >= MIN_LINES


def _agent_edit(data: bytes, k: int) -> bytes:
    """The agent's change: a line inserted after the first."""
    first, rest = data.split(b"\n", 1)
    return first + b"\n" + f"/* agent edit {k} (chronos bench) */".encode() + b"\n" + rest


def _person_edit(data: bytes, k: int) -> bytes:
    """The person's change, at the other end of the file: a line appended."""
    return data + (b"" if data.endswith(b"\n") else b"\n") + f"/* person edit {k} */\n".encode()


def _pick(run, n: int) -> list[str]:
    out = []
    for rel in run.rng.sample(run.pool, len(run.pool)):
        try:
            if _lines_ok(run.read(rel)):
                out.append(rel)
        except OSError:
            continue
        if len(out) == n:
            return out
    raise RuntimeError(f"only {len(out)} tracked text files with {MIN_LINES}+ lines (need {n})")


def _compare(run, want: dict[str, bytes], what: str) -> None:
    wrong = [rel for rel, data in want.items() if run.read(rel) != data]
    if wrong:
        raise RuntimeError(f"CHECK FAILED: after {what}, {len(wrong)} of {len(want)} files differ from what "
                           f"it must leave (e.g. {wrong[0]})")


def p8(run) -> dict:
    """Agent-only restore, revert of one call, undo, redo; each beside a full restore."""
    from .figures import CHRONOS_SETTINGS
    w = run.spawn("chronos", "P8")
    setup: dict = {}
    prof = None
    try:
        info = w.call("open", store_dir=str(run.chronos_store), ws=str(run.ws), settings=CHRONOS_SETTINGS,
                      host=run.host)
        host = {k: info.get(k) for k in ("host", "host_note", "turn_checkpoint_ms") if info.get(k)}
        files = _pick(run, AGENT_FILES)
        person = files[:PERSON_FILES]
        c0_bytes = {rel: run.read(rel) for rel in files}
        c0 = w.call("checkpoint")
        c0_number = w.call("tm_number", checkpoint=c0)
        w.mark_baseline()
        t_setup = time.monotonic()
        spec_dir = run.rundir / "p8-specs"
        spec_dir.mkdir(exist_ok=True)
        calls = []
        per = 10                                           # files per shell call
        for k in range(SHELL_CALLS):
            group = files[k * per:(k + 1) * per]
            spec = spec_dir / f"call{k}.json"
            spec.write_text(json.dumps({os.path.join(run.ws, rel): base64.b64encode(
                _agent_edit(run.read(rel), k)).decode() for rel in group}))
            calls.append(w.call("tm_run", argv=[sys.executable, "-c", APPLY, str(spec)]))
            for rel in group:                 # the person, between calls, at the other end of the file
                if rel in person:
                    run.write(rel, _person_edit(run.read(rel), k))
        for j, rel in enumerate(files[SHELL_CALLS * per:]):
            data = _agent_edit(run.read(rel), 100 + j)
            calls.append(w.call("tm_write", rel=rel, content_b64=base64.b64encode(data).decode()))
        setup_s = time.monotonic() - t_setup
        last, last_rel = calls[-1], files[-1]
        s1 = {rel: run.read(rel) for rel in files}
        after_agent = {rel: (_person_edit(c0_bytes[rel], files.index(rel) // per) if rel in person
                             else c0_bytes[rel]) for rel in files}
        if any(after_agent[rel] == s1[rel] for rel in files):
            raise RuntimeError("setup: a file the agent changed reads as it did before (bench bug)")
        after_revert = {**s1, last_rel: c0_bytes[last_rel]}
        setup = {"checkpoint": c0, "checkpoint_number": c0_number, "agent_files": len(files),
                 "person_files": len(person), "calls": len(calls), "shell_calls": SHELL_CALLS,
                 "write_calls": len(calls) - SHELL_CALLS, "setup_s": round(setup_s, 1),
                 "revert_operation": last["operation_id"], "revert_pre_checkpoint": last["pre_checkpoint"]}

        def op(kind, **kw):
            return w.call("tm", kind=kind, **kw)

        def back_to_s1(what):
            op("undo")
            _compare(run, s1, f"the undo of the {what} (back to the calls' state)")

        t = {k: [] for k in ("agent_only", "full", "revert", "full_pre_call", "undo", "redo")}
        steps = ["agent", "full", "revert", "full_pre_call"]
        for i in range(run.plan.warmup + run.plan.p8_reps):
            measured = i >= run.plan.warmup
            got = {}
            for step in steps[i % 4:] + steps[:i % 4]:
                if step == "agent":
                    got["agent_only"] = op("agent_restore", spec=c0, expect_changed=len(files))["ms"]
                    _compare(run, after_agent, "the agent-only restore (agent's lines gone, person's kept)")
                    got["undo"] = op("undo", expect_changed=len(files))["ms"]
                    _compare(run, s1, "the undo of the agent-only restore")
                    got["redo"] = op("redo", expect_changed=len(files))["ms"]
                    _compare(run, after_agent, "the redo of the agent-only restore")
                    back_to_s1("redo")
                elif step == "full":
                    got["full"] = op("restore", spec=c0, expect_changed=len(files))["ms"]
                    _compare(run, c0_bytes, "the full restore of C0")
                    back_to_s1("full restore")
                elif step == "revert":
                    got["revert"] = op("revert", operation=last["operation_id"], expect_changed=1)["ms"]
                    _compare(run, after_revert, "the revert of the one-file call")
                    back_to_s1("revert")
                else:
                    got["full_pre_call"] = op("restore", spec=last["pre_checkpoint"], expect_changed=1)["ms"]
                    _compare(run, after_revert, "the full restore of the one-file call's pre-checkpoint")
                    back_to_s1("full restore of the pre-call checkpoint")
            if measured:
                for k, v in got.items():
                    t[k].append(v)
        if run.profile:                 # one more agent-only restore under cProfile (not counted)
            prof = w.call("profile", target="tm", kwargs={"kind": "agent_restore", "spec": c0,
                                                           "expect_changed": len(files)})["profile"]
            _compare(run, after_agent, "the profiled agent-only restore")
            back_to_s1("profiled agent-only restore")
    finally:
        rss = run.close_workers({"chronos": w})
    full = summary(t["full"], "full_restore")

    def row(key, comp=None):
        r = {**summary(t[key], "chronos"), **(comp or full)}
        r["ratio"] = ratio(r["chronos_p50_ms"], r["full_restore_p50_ms"])
        r["ratio_p95"] = ratio(r["chronos_p95_ms"], r["full_restore_p95_ms"])
        return {**r, **rss}

    out = {"agent_only": row("agent_only"),
           "revert_one": row("revert", comp=summary(t["full_pre_call"], "full_restore")),
           "undo": row("undo"), "redo": row("redo"),
           "setup": setup, "chronos_host": host, **({"chronos_profile_agent_only": prof} if prof else {})}
    head = out["agent_only"]
    out.update(head)
    out["note"] = (f"{len(files)} files changed by {setup['calls']} protected calls since C0 "
                   f"({SHELL_CALLS} run_command of 10 files, {setup['write_calls']} write_file), "
                   f"{PERSON_FILES} of them edited by the person between calls (other lines). "
                   "ratio = chronos p50 / p50 of the full restore beside it: "
                   "restore(C0) for agent-only, undo and redo; restore(the one-file call's pre-checkpoint) for "
                   "revert. Each operation includes its safety checkpoint; undo right after the agent-only "
                   "restore, redo right after that undo; every repetition starts from the same files (untimed undo)")
    return out


def p9(run) -> dict:
    """`log --all` over 10,000 checkpoints (a store of its own)."""
    from .figures import CHRONOS_SETTINGS
    ws = run.rundir / "p9-ws"
    ws.mkdir()
    for i in range(LOG_FILES):
        (ws / f"file{i:02d}.txt").write_text(f"file {i}\n" * 20)
    (ws / "counter.txt").write_text("checkpoint 1\n")
    store = run.rundir / "p9" / "store"
    n = run.plan.log_checkpoints
    w = run.spawn("chronos", "P9")
    t = {"all": [], "cli_default": [], "git": [], "process": []}
    prof = None
    try:
        fix = w.call("tm_log_fixture", store_dir=str(store), ws=str(ws), settings=CHRONOS_SETTINGS, checkpoints=n)
        if fix["number"] != n or not fix["created"]:
            raise RuntimeError(f"CHECK FAILED: the {n:,}-checkpoint fixture ends at number {fix['number']} "
                               f"(last snapshot created: {fix['created']})")
        w.mark_baseline()
        from .gitcli import git_env
        genv = git_env(fix["store"])
        exe = Path(sys.executable).with_name("chronos-git")
        cli = ([str(exe)] if exe.exists() else [sys.executable, "-m", "chronos_git.cli"]) + [
            "--store", fix["store"], "--json", "log", "--all", "--workspace", str(ws)]
        for i in range(run.plan.warmup + run.plan.p8_reps):
            measured = i >= run.plan.warmup
            got = {"all": w.call("tm_log", limit=None, expect=n)["ms"],
                   "cli_default": w.call("tm_log", limit=20, expect=n)["ms"]}
            t0 = time.perf_counter()
            out = subprocess.run(["git", "log", "--format=%H %P%n%B", fix["ref"]], env=genv, cwd=str(ws),
                                 capture_output=True, check=True).stdout
            got["git"] = (time.perf_counter() - t0) * 1000.0
            if out.count(b"chronos checkpoint: ") != n:
                raise RuntimeError(f"CHECK FAILED: git log lists {out.count(b'chronos checkpoint: ')} checkpoints")
            if not measured:
                continue
            t0 = time.perf_counter()
            proc = subprocess.run(cli, cwd=str(ws), capture_output=True, text=True)
            got["process"] = (time.perf_counter() - t0) * 1000.0
            if proc.returncode != 0:
                raise RuntimeError(f"CHECK FAILED: {' '.join(cli[-5:])} exited {proc.returncode}: {proc.stderr[-500:]}")
            doc = json.loads(proc.stdout)
            if (doc.get("checkpoints") or [{}])[0].get("number") != n:
                raise RuntimeError(f"CHECK FAILED: chronos-git log --all --json: newest is not @{n}")
            for k, v in got.items():
                t[k].append(v)
        if run.profile:                 # one more, under cProfile (not counted)
            prof = w.call("profile", target="tm_log", kwargs={"limit": None, "expect": n})["profile"]
    finally:
        rss = run.close_workers({"chronos": w})
    row = {**summary(t["all"], "chronos"), **summary(t["git"], "gitcli"), "hermes_p50_ms": None,
           "hermes_refused": "n/a: no such listing"}
    row["ratio"] = ratio(row["chronos_p50_ms"], row["gitcli_p50_ms"])
    row.update({"checkpoints": n, **summary(t["cli_default"], "chronos_limit20"),
                **summary(t["process"], "cli_process"), "fixture_build_ms": round(fix["build_ms"]),
                **rss, **({"chronos_profile": prof} if prof else {}),
                "note": (f"Chronos.log(ws, None, all=True) over {n:,} checkpoints (all listed; chronos_limit20: the "
                         "CLI's default --limit 20) in the worker; gitcli: `git log --format='%H %P%n%B'` of the same "
                         "ref; cli_process: `chronos-git --json log --all` as a process (Python start included). "
                         "Fixture (untimed): first and last checkpoint through the service, the rest one pack "
                         "written by git fast-import (commits byte-identical to the chain's, numbered)")})
    return row
