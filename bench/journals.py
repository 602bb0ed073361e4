"""P4 fixtures: journals with many events, built once and cached.

* chronos: a store whose journal holds N events, appended through
  `Journal.append` (the real code path, fsync included).  Appending on this
  VM's disk costs several ms per event, so the fixture is built on tmpfs
  (/dev/shm) when there is room, then packed with `git gc` and copied into the
  cache.  It is rebuilt when the journal schema changes.
* git CLI: a commit chain on refs/bench/journal whose trees hold state.json,
  built with `git fast-import` (seconds for 100k commits).

Runs copy the cached fixture (a few pack files) into their temp directory.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .corpora import say
from .gitcli import git, git_env, init_shadow

FIXTURE_VERSION = 1


def _schemas() -> dict:
    from chronos_git.journal_refs import events
    return {k: getattr(events, k, None) for k in ("SCHEMA", "STATE_SCHEMA", "WITNESS_SCHEMA")}


def _marker_ok(path: Path, want: dict) -> bool:
    try:
        return json.loads(path.read_text()) == want
    except (OSError, ValueError):
        return False


def _tmpfs_root(min_free: int = 2 << 30) -> Path | None:
    shm = Path("/dev/shm")
    try:
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize >= min_free and os.access(shm, os.W_OK):
            return shm
    except OSError:
        pass
    return None


def ensure_chronos(cache: Path, repo: Path, events: int) -> Path:
    """Directory holding `store/` and `store.journal-witness.json` with `events` events."""
    final = cache / "journals" / f"chronos-{events}"
    want = {"version": FIXTURE_VERSION, "events": events, **_schemas()}
    if _marker_ok(final / "fixture.json", want):
        return final
    if final.exists():
        shutil.rmtree(final)
    root = _tmpfs_root() or (cache / "journals")
    root.mkdir(parents=True, exist_ok=True)
    build = root / f"chronos-bench-journal-{os.getpid()}"
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    t = time.monotonic()
    say(f"P4 fixture: building a chronos journal with {events:,} events in {build} (cached afterwards)")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        subprocess.run([sys.executable, "-m", "bench.worker", "build-journal", str(build / "store"), str(events)],
                       cwd=str(repo), env=env, check=True)
        genv = git_env(build / "store")
        # one pack: cheap to copy per run; no commit-graph (the store audit calls one tampering)
        git(["-c", "gc.writeCommitGraph=false", "gc", "--prune=now", "--quiet"], genv)
        tmp = cache / "journals" / f".tmp-chronos-{events}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(build, tmp, symlinks=True)
        (tmp / "fixture.json").write_text(json.dumps(want))
        _install(tmp, final)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    say(f"P4 fixture: chronos journal ready in {time.monotonic() - t:.0f}s")
    return final


def ensure_gitcli(cache: Path, events: int) -> Path:
    final = cache / "journals" / f"gitcli-{events}.git"
    want = {"version": FIXTURE_VERSION, "events": events}
    if _marker_ok(final / "bench-fixture.json", want):
        return final
    if final.exists():
        shutil.rmtree(final)
    tmp = cache / "journals" / f".tmp-gitcli-{events}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    init_shadow(tmp)
    env = git_env(tmp)
    p = subprocess.Popen(["git", "fast-import", "--quiet"], env=env, stdin=subprocess.PIPE)
    ts = 1_700_000_000
    chunk = []
    for seq in range(events):
        state = json.dumps({"seq": seq, "open": {}}, sort_keys=True).encode()
        msg = json.dumps({"seq": seq, "kind": "seed"}).encode()
        rec = [b"commit refs/bench/journal\n", b"mark :%d\n" % (seq + 1),
               b"committer shadow <shadow@localhost> %d +0000\n" % (ts + seq),
               b"data %d\n%s\n" % (len(msg), msg)]
        if seq:
            rec.append(b"from :%d\n" % seq)
        rec.append(b"M 100644 inline state.json\ndata %d\n%s\n\n" % (len(state), state))
        chunk.extend(rec)
        if len(chunk) > 5000:
            p.stdin.write(b"".join(chunk))
            chunk = []
    p.stdin.write(b"".join(chunk))
    p.stdin.close()
    if p.wait() != 0:
        raise RuntimeError("git fast-import failed while building the P4 git journal fixture")
    (tmp / "bench-fixture.json").write_text(json.dumps(want))
    _install(tmp, final)
    say(f"P4 fixture: git-CLI journal with {events:,} commits built in {time.monotonic() - t:.1f}s")
    return final


def _install(tmp: Path, final: Path) -> None:
    try:
        os.rename(tmp, final)
    except OSError:                 # a concurrent run finished the same fixture first
        if not final.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def copy_chronos(fixture: Path, dest_parent: Path) -> Path:
    """Copy the fixture next to `dest_parent`; returns the store path."""
    dest_parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(fixture / "store", dest_parent / "store", symlinks=True)
    for witness in fixture.glob("store.journal-*.json"):   # its name changed once (-witness, -checkpoint)
        shutil.copy2(witness, dest_parent / witness.name)
    for graph in ("commit-graph", "commit-graphs"):      # a fixture cached before gc was told not to write one
        path = dest_parent / "store" / "objects" / "info" / graph
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    return dest_parent / "store"


def copy_gitcli(fixture: Path, dest: Path) -> Path:
    shutil.copytree(fixture, dest, symlinks=True)
    return dest
