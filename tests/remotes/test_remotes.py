"""Off-machine copies through the real CLI against real remotes on 127.0.0.1: a bare
repository by path and file://, `git daemon`, and an OpenSSH server (tests/support/gitservers)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.gitservers import GitDaemon, Sshd, bare, sshd_available
from support.helpers import run_cli, wait_for


def fingerprint(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def git(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True)


class Machine:
    """One store with its own host id, driven through the real CLI."""

    def __init__(self, root: Path, host: str, **settings):
        self.root, self.host = root, host
        self.store = root / "store"
        self.ws = root / "ws"
        self.ws.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.env: dict[str, str] = {}

    def cli(self, *args, **kw):
        env = {"CHRONOS_GIT_HOST_ID": self.host, **self.env, **kw.pop("env", {})}
        return run_cli(self.store, *args, "--json", env=env, settings=self.settings or None, **kw)

    def write(self, rel: str, content: str):
        r = self.cli("write", rel, "--content", content, "--workspace", self.ws)
        assert r.rc == 0, r.stdout + r.stderr
        return r.json


@pytest.fixture
def machines(tmp_path):
    def make(host: str, **settings) -> Machine:
        return Machine(tmp_path / host, host, **settings)
    return make


def _three_machines(machines, tmp_path, url: str, env: dict | None = None, settings: dict | None = None):
    """Two machines push to `url`; a third fetches and restores a checkpoint of each."""
    a, b, c = (machines(h, **(settings or {})) for h in ("alpha", "beta", "gamma"))
    for m in (a, b, c):
        m.env.update(env or {})
    (a.ws / "bin.dat").write_bytes(bytes(range(256)) * 40)
    a.write("notes.txt", "from alpha\n")
    b.write("src/main.py", "print('beta')\n")
    b.write("nested/deeper/x.txt", "x" * 5000)
    for m in (a, b):                       # a full walk: bin.dat came from outside a tool call
        assert m.cli("snapshot", "--workspace", m.ws).rc == 0
    for m in (a, b):
        r = m.cli("remote", "add", "shared", url, "--snapshots")
        assert r.rc == 0 and r.json["snapshots"] is True and "leave" in r.json["warning"], r.stdout
        p = m.cli("push", "shared")
        assert p.rc == 0, p.stdout + p.stderr
        assert p.json["host"] == m.host and len(p.json["journal_head"]) == 40
        assert f"refs/chronos/hosts/{m.host}/journal" in p.json["refs"]
    r = c.cli("remote", "add", "shared", url)
    assert r.rc == 0 and r.json["snapshots"] is False
    f = c.cli("fetch", "shared")
    assert f.rc == 0, f.stdout + f.stderr
    hosts = {h["host"]: h for h in f.json["hosts"]}
    assert set(hosts) == {"alpha", "beta"}
    for m in (a, b):
        h = hosts[m.host]
        local_head = m.cli("journal", "status").json["head"]
        assert h["journal_head"] == local_head and h["events"] >= 3
        (w,) = h["workspaces"]
        assert w["path"] == str(m.ws) and w["checkpoints"] >= 2 and len(w["latest"]) == 40
        dest = tmp_path / f"restored-{m.host}"
        rr = c.cli("restore", w["latest"], "--workspace", dest)
        assert rr.rc == 0, rr.stdout + rr.stderr
        assert fingerprint(dest) == fingerprint(m.ws)
        again = c.cli("restore", w["latest"], "--workspace", dest, "--dry-run")   # the folder it went into
        assert again.rc == 0, again.stdout + again.stderr
        other = tmp_path / f"unrelated-{m.host}"            # a trial's: it replaced this folder's files
        other.mkdir()
        (other / "mine.txt").write_text("mine\n")
        refused = c.cli("restore", w["latest"], "--workspace", other)
        assert refused.rc == 1 and refused.json["code"] == "workspace_refused", refused.stdout
        assert [p.name for p in other.iterdir()] == ["mine.txt"]
    return a, b, c


def test_two_machines_push_to_a_bare_repository_and_a_third_restores_each(machines, tmp_path):
    remote = tmp_path / "audit.git"              # made by `remote add` (a shared drive)
    a, b, c = _three_machines(machines, tmp_path, str(remote))
    # stock git reads every host's trail
    log = git("--git-dir", remote, "log", "--format=%s", "refs/chronos/hosts/alpha/journal").stdout
    assert "journal #0 genesis" in log and "started write_file" in log
    assert git("--git-dir", remote, "fsck", "--strict").returncode == 0
    # incremental: a new event sends one journal ref move and the new checkpoint, nothing else
    a.write("notes.txt", "second\n")
    p = a.cli("push")
    assert p.rc == 0 and set(p.json["updated"]) == {"refs/chronos/hosts/alpha/journal",
                                                     f"refs/chronos/hosts/alpha/snapshots/{_ws_id(a)}"}
    again = a.cli("push")
    assert again.rc == 0 and again.json["updated"] == []


def _ws_id(m: Machine) -> str:
    return hashlib.sha256(os.fsencode(m.ws)).hexdigest()[:16]


def test_journal_only_remote_holds_no_file_contents(machines, tmp_path):
    a = machines("alpha")
    a.write("secret-plan.txt", "the launch code is 0000\n")
    remote = tmp_path / "journal-only.git"
    assert a.cli("remote", "add", "audit", f"file://{remote}").rc == 0
    p = a.cli("push", "audit")
    assert p.rc == 0, p.stdout
    assert not any("snapshots" in ref for ref in p.json["refs"])
    refs = git("--git-dir", remote, "for-each-ref", "--format=%(refname)").stdout.split()
    assert sorted(refs) == ["refs/chronos/hosts/alpha/journal", "refs/chronos/hosts/alpha/manifest"]
    blobs = git("--git-dir", remote, "cat-file", "--batch-all-objects", "--batch-check").stdout
    contents = [git("--git-dir", remote, "cat-file", "-p", line.split()[0]).stdout
                for line in blobs.splitlines() if line.split()[1] == "blob"]
    assert contents and not any("launch code" in c for c in contents)
    # ... but it names the image blobs by id, and each mirror names its journal event
    tip = git("--git-dir", remote, "log", "-1", "--format=%B", "refs/chronos/hosts/alpha/journal").stdout
    assert "Chronos-Event: " + a.cli("journal", "status").json["head"] in tip


@pytest.mark.process
def test_git_daemon_transport(machines, tmp_path):
    base = tmp_path / "srv"
    base.mkdir()
    bare(base / "fleet.git")
    daemon = GitDaemon(base).start()
    try:
        _three_machines(machines, tmp_path, daemon.url("fleet.git"))
        assert git("--git-dir", base / "fleet.git", "fsck", "--strict").returncode == 0
    finally:
        daemon.kill()


@pytest.mark.process
@pytest.mark.skipif(sshd_available() is not None, reason=sshd_available() or "")
def test_ssh_transport_with_a_key_file_and_known_hosts(machines, tmp_path):
    sshd = Sshd(tmp_path / "sshd").start()
    try:
        remote = bare(tmp_path / "ssh-remote.git")
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)
        env = {"HOME": str(home), "SSH_AUTH_SOCK": ""}
        settings = {"remote_ssh_key": str(sshd.client_key)}
        a = machines("alpha", **settings)
        a.env.update(env)
        a.write("f.txt", "over ssh\n")
        assert a.cli("remote", "add", "ssh", sshd.url(remote), "--snapshots").rc == 0
        # an unknown host key is refused, with the fix
        p = a.cli("push")
        assert p.rc == 1 and "known_hosts" in p.json["error"], p.stdout
        assert git("--git-dir", remote, "for-each-ref").stdout == ""
        (home / ".ssh" / "known_hosts").write_text(sshd.known_hosts_line())
        p = a.cli("push")
        assert p.rc == 0, p.stdout + p.stderr
        # the full round trip: a second and third machine over ssh too
        _three_machines(machines, tmp_path, sshd.url(remote), env=env, settings=settings)
        # a wrong host key (the server was replaced) is refused as well
        other = tmp_path / "other_host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        kind, key = other.with_suffix(".pub").read_text().split()[:2]
        (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {kind} {key}\n")
        a.write("f.txt", "again\n")
        p = a.cli("push", "ssh")
        assert p.rc == 1 and "known_hosts" in p.json["error"], p.stdout
    finally:
        sshd.stop()


def test_a_consistent_local_rewrite_is_caught_by_verify_remote_and_push(machines, tmp_path):
    remote = tmp_path / "anchor.git"
    a = machines("alpha")
    a.write("a.txt", "1\n")
    assert a.cli("remote", "add", "anchor", str(remote)).rc == 0
    assert a.cli("push").rc == 0
    ok = a.cli("journal", "verify", "--remote", "anchor")
    assert ok.rc == 0 and ok.json["remote"]["behind"] == 0, ok.stdout
    a.write("a.txt", "2\n")
    behind = a.cli("journal", "verify", "--remote", "anchor")
    assert behind.rc == 0 and behind.json["remote"]["behind"] == 2      # started + returned
    # the attacker replaces the store and its witness with a consistent, different history
    shutil.rmtree(a.store)
    os.remove(str(a.store) + ".journal-witness.json")
    a.write("a.txt", "forged\n")
    assert a.cli("journal", "verify").rc == 0          # locally, nothing to see
    assert a.cli("remote", "add", "anchor", str(remote)).rc == 0
    v = a.cli("journal", "verify", "--remote", "anchor")
    assert v.rc == 1 and "remote" in v.json["error"] and "diverged" in v.json["error"], v.stdout
    blocked = a.cli("write", "b.txt", "--content", "x", "--workspace", a.ws)
    assert blocked.rc == 3 and "off-machine anchor" in blocked.json["message"], blocked.stdout
    p = a.cli("push")
    assert p.rc == 1 and "diverged" in p.json["error"]
    assert "diverged" in (a.cli("health").json["remotes"][0].get("diverged") or "")
    # the remote still holds the original trail: nothing was force-pushed
    log = git("--git-dir", remote, "log", "--format=%B", "refs/chronos/hosts/alpha/journal").stdout
    assert "forged" not in log
    # the operator decides: forgetting the remote opens the gate again (and is journaled)
    assert a.cli("remote", "remove", "anchor").rc == 0
    assert a.cli("write", "b.txt", "--content", "x", "--workspace", a.ws).rc == 0


def test_a_rolled_back_local_journal_is_reported_ahead(machines, tmp_path):
    remote = tmp_path / "r.git"
    a = machines("alpha")
    a.write("a.txt", "1\n")
    assert a.cli("remote", "add", "r", str(remote)).rc == 0
    backup = tmp_path / "backup"
    shutil.copytree(a.store, backup / "store", symlinks=True)
    shutil.copy(str(a.store) + ".journal-witness.json", backup)
    a.write("a.txt", "2\n")
    assert a.cli("push").rc == 0
    shutil.rmtree(a.store)
    shutil.copytree(backup / "store", a.store, symlinks=True)        # store and witness, consistently
    shutil.copy(backup / "store.journal-witness.json", str(a.store) + ".journal-witness.json")
    v = a.cli("journal", "verify", "--remote", "r")
    assert v.rc == 1 and "ahead" in v.json["error"], v.stdout


@pytest.mark.process
def test_remote_going_away_mid_push_leaves_both_sides_consistent(machines, tmp_path):
    base = tmp_path / "srv"
    base.mkdir()
    bare(base / "big.git")
    daemon = GitDaemon(base).start()
    a = machines("alpha")
    for i in range(6):                                   # ~48 MB that does not compress
        (a.ws / f"blob{i}.bin").write_bytes(os.urandom(8 << 20))
    a.write("small.txt", "s\n")
    assert a.cli("remote", "add", "d", daemon.url("big.git"), "--snapshots").rc == 0
    killed = []

    def kill_when_receiving():
        objects = base / "big.git" / "objects"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(p.name.startswith("tmp_") or p.suffix == ".pack" or "incoming" in p.name
                   for p in objects.rglob("*")):
                break
            time.sleep(0.005)
        daemon.kill()
        killed.append(time.monotonic())
    t = threading.Thread(target=kill_when_receiving)
    t.start()
    p = a.cli("push")
    t.join()
    assert killed, "the daemon was never seen receiving"
    assert p.rc == 1 and p.json["status"] == "error", p.stdout      # not acknowledged
    assert a.cli("remote", "list").json["remotes"][0]["last_error"]
    # the remote: no ref points at anything incomplete
    fsck = git("--git-dir", base / "big.git", "fsck", "--strict", "--connectivity-only")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert git("--git-dir", base / "big.git", "for-each-ref").stdout == ""
    # the local store is untouched and the next push completes
    assert a.cli("journal", "verify").rc == 0
    daemon = GitDaemon(base).start()
    try:
        assert a.cli("remote", "remove", "d").rc == 0
        assert a.cli("remote", "add", "d", daemon.url("big.git"), "--snapshots").rc == 0
        p = a.cli("push")
        assert p.rc == 0, p.stdout + p.stderr
        assert git("--git-dir", base / "big.git", "fsck", "--strict").returncode == 0
        assert a.cli("remote", "list").json["remotes"][0]["last_error"] is None
    finally:
        daemon.kill()


def test_files_matching_remote_exclude_are_refused_by_name(machines, tmp_path):
    a = machines("alpha")
    a.write("app.py", "print(1)\n")
    (a.ws / "config").mkdir()
    (a.ws / "config" / "prod.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    snap = a.cli("snapshot", "--workspace", a.ws).json
    remote = tmp_path / "r.git"
    assert a.cli("remote", "add", "r", str(remote), "--snapshots").rc == 0
    p = a.cli("push")
    assert p.rc == 1 and snap["checkpoint"][:12] in p.json["error"] and "config/prod.pem" in p.json["error"]
    assert "*.pem" in p.json["error"]
    # the journal went, the checkpoints did not
    refs = git("--git-dir", remote, "for-each-ref", "--format=%(refname)").stdout.split()
    assert "refs/chronos/hosts/alpha/journal" in refs and not any("snapshots" in r for r in refs)
    listed = run_cli(a.store, "remote", "list", env={"CHRONOS_GIT_HOST_ID": "alpha"}).stdout
    assert "incomplete" in listed and "prod.pem" in listed
    p = a.cli("push", "--allow-excluded")
    assert p.rc == 0 and any("snapshots" in r for r in p.json["updated"])


def test_pushing_continues_after_compaction_and_a_retention_cut(machines, tmp_path):
    a = machines("alpha", max_checkpoints=4)
    remote = tmp_path / "r.git"
    a.write("f.txt", "0\n")
    assert a.cli("remote", "add", "r", str(remote), "--snapshots").rc == 0
    assert a.cli("push").rc == 0
    for i in range(1, 9):
        a.write("f.txt", f"{i}\n")
    c = a.cli("compact")
    assert c.rc == 0, c.stdout
    p = a.cli("push")
    assert p.rc == 0, p.stdout
    assert git("--git-dir", remote, "fsck", "--strict").returncode == 0
    # the pushed checkpoint was kept, so the remote's chain continues without a gap
    n = git("--git-dir", remote, "rev-list", "--count", f"refs/chronos/hosts/alpha/snapshots/{_ws_id(a)}").stdout
    local = git("--git-dir", a.store, "rev-list", "--count", f"refs/chronos/snapshots/{_ws_id(a)}").stdout
    assert int(n) >= int(local) > 4      # none cut before the remote had it
    tip = git("--git-dir", a.store, "rev-parse", f"refs/chronos/snapshots/{_ws_id(a)}").stdout
    assert git("--git-dir", remote, "rev-parse", f"refs/chronos/hosts/alpha/snapshots/{_ws_id(a)}").stdout == tip
    # once pushed, retention may cut again
    assert a.cli("compact").json["dropped"]


def test_bad_remote_input_is_refused_clearly(machines, tmp_path):
    a = machines("alpha")
    a.write("f.txt", "1\n")
    for name, url, word in [("bad/name", str(tmp_path / "x.git"), "not a valid remote name"),
                            (".hidden", str(tmp_path / "x.git"), "not a valid remote name"),
                            ("ok", "https://user:hunter2@127.0.0.1/x.git", "password"),
                            ("ok", "relative/path", "not a remote"),
                            ("ok", "ftp://127.0.0.1/x", "not a remote"),
                            ("ok", str(a.store / "inside.git"), "inside"),
                            ("ok", str(tmp_path / "no" / "such" / "dir.git"), "does not exist")]:
        r = a.cli("remote", "add", name, url)
        assert r.rc == 1 and word in r.json["error"], (name, url, r.stdout)
        assert "hunter2" not in r.stdout + r.stderr
    assert a.cli("push").json["error"].startswith("no remote is configured")
    assert "no remote 'nope'" in a.cli("fetch", "nope").json["error"]
    bad_host = a.cli("push", env={"CHRONOS_GIT_HOST_ID": "../evil"})
    assert bad_host.rc == 1 and "host_id" in bad_host.json["error"]


def test_a_token_never_appears_in_errors(machines, tmp_path):
    a = machines("alpha")
    a.write("f.txt", "1\n")
    from support.gitservers import free_port
    url = f"https://127.0.0.1:{free_port()}/x.git"          # nothing listens there
    assert a.cli("remote", "add", "h", url).rc == 0
    token = "tok-" + "9" * 30
    p = a.cli("push", env={"CHRONOS_GIT_REMOTE_TOKEN": token, "CHRONOS_GIT_REMOTE_USER": "me"})
    assert p.rc == 1 and token not in p.stdout + p.stderr
    listed = a.cli("remote", "list")
    assert token not in listed.stdout and listed.json["remotes"][0]["last_error"]


def test_require_anchor_closes_the_gate_when_the_remote_stays_down(machines, tmp_path):
    from support.gitservers import free_port
    a = machines("alpha", require_anchor=True, anchor_timeout_s=5)
    assert a.cli("write", "f.txt", "--content", "1", "--workspace", a.ws).rc == 3     # no remote at all
    a.settings["require_anchor"] = False
    a.write("f.txt", "1\n")
    assert a.cli("remote", "add", "down", f"git://127.0.0.1:{free_port()}/x.git").rc == 0
    a.settings["require_anchor"] = True
    assert a.cli("push").rc == 1                         # the first failure starts the clock
    assert a.cli("write", "f.txt", "--content", "2", "--workspace", a.ws).rc == 0
    # the remote stays down for longer than anchor_timeout_s: a timeout shorter than the time
    # since the first failure, instead of sleeping past 5 s
    since = a.cli("remote", "list").json["remotes"][0]["failing_since"]
    assert since, "the failed push started no clock"
    a.settings["anchor_timeout_s"] = 1
    wait_for(lambda: time.time() - since > 1.5, message="the clock did not pass anchor_timeout_s")
    blocked = a.cli("write", "f.txt", "--content", "3", "--workspace", a.ws)
    assert blocked.rc == 3 and "require_anchor" in blocked.json["message"], blocked.stdout


def test_text_output_for_people(machines, tmp_path):
    a = machines("alpha")
    a.write("f.txt", "1\n")
    env = {"CHRONOS_GIT_HOST_ID": "alpha"}
    remote = tmp_path / "r.git"
    added = run_cli(a.store, "remote", "add", "r", str(remote), env=env)
    assert added.rc == 0 and "remote r added" in added.stdout and "journal only" in added.stdout
    assert "not pushed yet" in run_cli(a.store, "remote", "list", env=env).stdout
    pushed = run_cli(a.store, "push", env=env)
    assert pushed.rc == 0 and pushed.stdout.startswith("pushed to r as host alpha")
    listed = run_cli(a.store, "remote", "list", env=env).stdout
    assert "current" in listed and "host id: alpha" in listed
    fetched = run_cli(a.store, "fetch", "r", env=env)
    assert fetched.rc == 0 and "host alpha:" in fetched.stdout
    verified = run_cli(a.store, "journal", "verify", "--remote", "r", env=env)
    assert verified.rc == 0 and "remote r holds host alpha's journal" in verified.stdout
    status = run_cli(a.store, "journal", "status", env=env).stdout
    assert "remote r: last push" in status
    assert "remote r" in run_cli(a.store, "health", env=env).stdout
    removed = run_cli(a.store, "remote", "remove", "r", env=env)
    assert removed.rc == 0 and "remote r removed" in removed.stdout


def test_fetch_into_a_store_with_a_retention_cut_keeps_the_cut(machines, tmp_path):
    """libgit2's fetch rewrites `shallow`; fetching in place lost the retention cut and the next
    compaction failed on a missing commit (found in review)."""
    remote = tmp_path / "r.git"
    b = machines("beta")
    b.write("f.txt", "from beta\n")
    assert b.cli("remote", "add", "r", str(remote), "--snapshots").rc == 0
    assert b.cli("push").rc == 0
    a = machines("alpha", max_checkpoints=3, compact_grace_s=0)
    for i in range(8):
        a.write("f.txt", f"{i}\n")
    assert a.cli("compact").rc == 0
    cut = (a.store / "shallow").read_text()
    assert cut.strip()
    assert a.cli("remote", "add", "r", str(remote)).rc == 0
    f = a.cli("fetch", "r")
    assert f.rc == 0 and [h["host"] for h in f.json["hosts"]] == ["beta"], f.stdout
    assert (a.store / "shallow").read_text() == cut
    c = a.cli("compact")
    assert c.rc == 0, c.stdout
    assert git("--git-dir", a.store, "fsck", "--strict", "--no-dangling").returncode == 0
    assert not list((a.store / "chronos" / "tmp").glob("fetch-*"))


def test_a_rewrite_that_keeps_the_anchor_ref_is_caught(machines, tmp_path):
    """Rolling the journal ref and witness back but leaving the anchor chain (found in review):
    the anchor no longer matches the journal, and that closes the gate too."""
    remote = tmp_path / "r.git"
    a = machines("alpha")
    a.write("a.txt", "1\n")
    assert a.cli("remote", "add", "r", str(remote)).rc == 0
    assert a.cli("push").rc == 0
    witness = Path(str(a.store) + ".journal-witness.json")
    saved_ref = git("--git-dir", a.store, "rev-parse", "refs/chronos/journal").stdout.strip()
    saved_witness = witness.read_bytes()
    verified = Path(a.store) / "chronos" / "journal-verified.json"     # the store's last verified head
    saved_verified = verified.read_bytes()
    saved_anchor = git("--git-dir", a.store, "rev-parse", "refs/chronos/anchor/journal").stdout.strip()
    a.write("a.txt", "2\n")
    assert a.cli("push").rc == 0
    assert git("--git-dir", a.store, "update-ref", "refs/chronos/journal", saved_ref).returncode == 0
    witness.write_bytes(saved_witness)
    local = a.cli("journal", "verify")                   # that record alone already tells
    assert local.rc == 1 and "no longer contains the last verified event" in local.json["error"], local.stdout
    (Path(a.store) / "chronos" / "journal-alarm.json").unlink()
    verified.write_bytes(saved_verified)                 # rolled back too: the local anchor chain tells
    local = a.cli("journal", "verify")
    assert local.rc == 1 and "the local anchor chain" in local.json["error"], local.stdout
    (Path(a.store) / "chronos" / "journal-alarm.json").unlink()
    assert git("--git-dir", a.store, "update-ref", "refs/chronos/anchor/journal", saved_anchor).returncode == 0
    # and with that rolled back as well, only the remote's copy is left
    v = a.cli("journal", "verify", "--remote", "r")
    assert v.rc == 1 and "remote" in v.json["error"] and "diverged" in v.json["error"], v.stdout
    blocked = a.cli("write", "b.txt", "--content", "x", "--workspace", a.ws)
    assert blocked.rc == 3, blocked.stdout
