"""The store is examined, never obeyed (issue 32): engine/store_audit.py reports everything in
the store's config, refs and files that chronos-git never writes, `health` and `journal verify`
say so, and no legitimate store state (snapshots, restores, journal appends, a retention cut,
a first snapshot seeded from the user's git, remotes added, pushed, fetched, removed) is ever
reported."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chronos_git.engine import store_audit
from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.helpers import git


def _audit(s: Chronos) -> list[store_audit.Finding]:
    return store_audit.audit(s.core.store.root, s.remotes.recorded_config())


def _gitc(store: Path, *args) -> None:
    subprocess.run(["git", "--git-dir", str(store), *map(str, args)], check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})


def _assert_clean(s: Chronos, ws) -> None:
    found = _audit(s)
    assert found == [], "\n".join(f.line() for f in found)
    h = s.health(str(ws))
    assert h.tampering is None and h.protection.state == "on", h.protection
    v = s.journal_verify()
    assert v.status == "ok" and v.tampering is None, v.error


# ---------------------------------------------------------------- no false alarm
def test_a_store_through_its_whole_life_has_no_finding(svc, ws, tmp_path, store_dir):
    s = svc(max_checkpoints=3, compact_grace_s=0)
    s.start()
    _assert_clean(s, ws)                                    # a new store
    s.snapshot(str(ws), "first")
    s.write_file(str(ws), "a.txt", b"v0\n")
    s.remote_add("audit", str(tmp_path / "audit.git"), snapshots=True)
    s.remote_add("journal-only", f"file://{tmp_path / 'j.git'}")
    assert s.push("audit").status == "ok"
    assert s.push("journal-only").status == "ok"
    _assert_clean(s, ws)
    for i in range(1, 7):
        s.write_file(str(ws), "a.txt", f"v{i}\n".encode())
    code = s.run_command(str(ws), ["sh", "-c", "echo shell > b.txt"])
    assert code.exit_code == 0
    s.restore(str(ws), "3", actor="test")
    _assert_clean(s, ws)
    rep = s.compact()                                       # a retention cut: `shallow`
    assert rep.dropped and (store_dir / "shallow").is_file()
    _assert_clean(s, ws)
    assert s.push("audit").status == "ok"                   # the outbox ref
    assert s.fetch("audit").hosts                           # tracking refs
    assert s.journal_verify(remote="audit").remote is not None
    _assert_clean(s, ws)
    s.remote_remove("journal-only")
    _assert_clean(s, ws)
    assert git("--git-dir", store_dir, "fsck", "--strict").returncode == 0


def test_a_first_snapshot_seeded_from_the_users_git_has_no_finding(tmp_path):
    root = tmp_path / "clone"
    root.mkdir()
    git("init", "-q", cwd=root)
    for i in range(20):
        (root / f"f{i}.txt").write_text(f"file {i}\n")
    git("add", "-A", cwd=root)
    git("-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "init", cwd=root)
    git("gc", "-q", cwd=root)
    s = Chronos.get(tmp_path / "store", Settings())
    s.start()
    res = s.snapshot(str(root), "first")
    assert res.status == "ok"
    s.consolidate()
    _assert_clean(s, root)


def test_a_remote_added_before_the_record_held_urls_is_taken_from_the_config_once(svc, ws, tmp_path):
    s = svc()
    s.start()
    s.write_file(str(ws), "a.txt", b"x\n")
    s.remote_add("old", str(tmp_path / "old.git"))
    state_path = s.core.store.meta_dir / "remotes.json"
    import json
    state = json.loads(state_path.read_text())
    for k in ("url", "send_snapshots"):
        state["old"].pop(k)                                # as an older chronos-git left it
    state_path.write_text(json.dumps(state))
    _assert_clean(s, ws)
    assert json.loads(state_path.read_text())["old"]["url"] == str(tmp_path / "old.git")
    assert s.push("old").status == "ok"


# ---------------------------------------------------------------- detection
def _plant_config(store: Path, key: str, value: str):
    def plant(_s):
        _gitc(store, "config", key, value)
    return plant


CASES = {
    "url_insteadof": (lambda st: _plant_config(st, "url./tmp/fake.insteadOf", "/tmp/real"), "config",
                      "url./tmp/fake.insteadof"),
    "core_pager": (lambda st: _plant_config(st, "core.pager", "touch /tmp/chronos-pager-ran"), "config",
                   "core.pager"),
    "core_fsmonitor": (lambda st: _plant_config(st, "core.fsmonitor", "/tmp/x.sh"), "config", "core.fsmonitor"),
    "pager_log": (lambda st: _plant_config(st, "pager.log", "sh -c evil"), "config", "pager.log"),
    "textconv": (lambda st: _plant_config(st, "diff.evil.textconv", "sh -c evil"), "config", "diff.evil.textconv"),
    "include": (lambda st: _plant_config(st, "include.path", "/tmp/elsewhere"), "config", "include.path"),
    "credential": (lambda st: _plant_config(st, "credential.helper", "!evil"), "config", "credential.helper"),
    "core_worktree": (lambda st: _plant_config(st, "core.worktree", "/tmp"), "config", "core.worktree"),
    "extension": (lambda st: _plant_config(st, "extensions.noop", "true"), "config", "extensions.noop"),
    "foreign_remote": (lambda st: _plant_config(st, "remote.evil.url", "/tmp/evil.git"), "config", "remote.evil.url"),
    "changed_base_value": (lambda st: _plant_config(st, "gc.auto", "1"), "config", "gc.auto"),
    "replace_ref": (lambda st: (lambda s: _gitc(st, "update-ref", f"refs/replace/{s.core.journal.head}",
                                                str(s.core.store.repo()[s.core.journal.head].parents[0].id))),
                    "ref", "refs/replace/"),
    "branch": (lambda st: (lambda s: _gitc(st, "update-ref", "refs/heads/master", s.core.journal.head)), "ref",
               "refs/heads/master"),
    "hook": (lambda st: (lambda s: ((st / "hooks" / "post-index-change").write_text("#!/bin/sh\nevil\n"),
                                    os.chmod(st / "hooks" / "post-index-change", 0o755))), "hook",
             "hooks/post-index-change"),
    "grafts": (lambda st: (lambda s: (st / "info" / "grafts").write_text(s.core.journal.head + "\n")), "grafts",
               "info/grafts"),
    "alternates": (lambda st: (lambda s: (st / "objects" / "info").mkdir(exist_ok=True) or
                               (st / "objects" / "info" / "alternates").write_text("/tmp/other/objects\n")),
                   "alternates", "objects/info/alternates"),
    "info_exclude_rule": (lambda st: (lambda s: open(st / "info" / "exclude", "a").write("*\n")), "file",
                          "info/exclude rule '*'"),
    "store_config_worktree": (lambda st: (lambda s: (st / "config.worktree").write_text("[core]\n\tpager = x\n")),
                              "config", "the file"),
    "workspace_config_worktree": (lambda st: (lambda s: _gitc(
        st, "config", "--file", next((st / "worktrees").iterdir()) / "config.worktree", "core.pager", "x")),
        "worktree_config", "core.pager"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_chronos_git_never_writes_is_reported_by_health_and_verify(svc, ws, store_dir, case):
    s = svc()
    s.start()
    s.write_file(str(ws), "a.txt", b"one\n")
    s.write_file(str(ws), "a.txt", b"two\n")
    make, kind, what = CASES[case]
    make(store_dir)(s)
    found = _audit(s)
    assert [f.kind for f in found] == [kind], [f.line() for f in found]
    assert what in found[0].what and found[0].fix and found[0].why
    h = s.health()
    assert h.protection.state == "degraded" and h.tampering and h.tampering[0].what == found[0].what
    v = s.journal_verify()
    assert v.status == "error" and v.tampering and v.tampering[0].what == found[0].what
    if case != "grafts":                           # libgit2 honours grafts: the chain looks cut too
        assert v.integrity == "ok" and v.code == "store_tampered" and found[0].what in v.error


def test_findings_are_rendered_with_their_fix(cli, ws, store_dir):
    assert cli("write", "a.txt", "--content", "x", "--workspace", ws).rc == 0
    _gitc(store_dir, "config", "url./tmp/fake.insteadOf", "/tmp/real")
    h = cli("health", "--workspace", ws)
    assert h.rc == 0 and "DEGRADED" in h.stdout and "url./tmp/fake.insteadof" in h.stdout
    assert "fix: remove the setting" in h.stdout
    v = cli("journal", "verify")
    assert v.rc == 1 and "tampering: url./tmp/fake.insteadof" in v.stdout, v.stdout + v.stderr
    j = cli("journal", "verify", "--json")
    assert j.rc == 1 and j.json["code"] == "store_tampered"
    assert j.json["tampering"][0]["kind"] == "config"


def test_what_the_red_team_hid_from_the_audit_is_found(svc, ws, store_dir, tmp_path):
    """A symlinked folder among the refs (stock git follows it, a plain walk does not) and a
    commit-graph (stock git takes parents from it) were invisible to the first audit."""
    s = svc()
    s.snapshot(str(ws), "one")
    outside = tmp_path / "outside"
    outside.mkdir()
    (store_dir / "refs" / "replace").symlink_to(outside, target_is_directory=True)
    (store_dir / "objects" / "info").mkdir(parents=True, exist_ok=True)
    (store_dir / "objects" / "info" / "commit-graph").write_bytes(b"CGPH")
    found = {f.what for f in store_audit.audit(store_dir, {})}
    assert "refs/replace" in found and "objects/info/commit-graph" in found, found
