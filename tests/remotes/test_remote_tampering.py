"""Issue 32, finding 3: the off-machine anchor cannot be redirected through the store's git
config. Remote URLs come from chronos-git's own record (remotes.json); a `url.*.insteadOf`
or a changed `remote.<name>.url` in the store's config is tampering: `push`, `fetch` and
`journal verify --remote` refuse, and `health` and `journal verify` report it."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support.gitservers import bare
from support.helpers import run_cli


def _refs(repo: Path) -> list[str]:
    return subprocess.run(["git", "--git-dir", str(repo), "for-each-ref", "--format=%(refname)"],
                          capture_output=True, text=True, check=True).stdout.split()


def _config(store: Path, key: str, value: str) -> None:
    subprocess.run(["git", "--git-dir", str(store), "config", key, value], check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})


def _a_store_with_remote(tmp_path):
    """A store with one write and the remote `r` (a real bare repo), and a fake bare repo beside."""
    store, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    real, fake = tmp_path / "real.git", bare(tmp_path / "fake.git")

    def cli(*args):
        return run_cli(store, *args, "--json", env={"CHRONOS_GIT_HOST_ID": "h1"})

    assert cli("write", "a.txt", "--content", "one", "--workspace", ws).rc == 0
    assert cli("remote", "add", "r", str(real)).rc == 0
    return store, ws, real, fake, cli


@pytest.mark.parametrize("how", ["insteadof", "pushinsteadof", "remote_url"])
def test_a_redirected_remote_is_refused_and_reported(tmp_path, how):
    store, ws, real, fake, cli = _a_store_with_remote(tmp_path)
    assert cli("push").rc == 0
    head = "refs/chronos/hosts/h1/journal"
    assert head in _refs(real)
    assert cli("write", "a.txt", "--content", "two", "--workspace", ws).rc == 0
    key, value = {"insteadof": (f"url.{fake}.insteadOf", str(real)),
                  "pushinsteadof": (f"url.{fake}.pushInsteadOf", str(real)),
                  "remote_url": ("remote.r.url", str(fake))}[how]
    _config(store, key, value)

    p = cli("push")
    assert p.rc == 1 and p.json["code"] == "store_tampered", p.stdout
    assert key.lower().split(".")[0] in p.json["error"] and "refused" in p.json["error"]
    assert _refs(fake) == []                                # nothing went to the fake
    vr = cli("journal", "verify", "--remote", "r")
    assert vr.rc == 1 and vr.json["code"] == "store_tampered", vr.stdout
    f = cli("fetch", "r")
    assert f.rc == 1 and f.json["code"] == "store_tampered", f.stdout
    h = cli("health")
    assert h.json["protection"]["state"] == "degraded"
    assert [t["kind"] for t in h.json["tampering"]] == ["config"]
    (remote,) = h.json["remotes"]
    assert remote["url"] == str(real) and "refused" in remote["last_error"]   # the record, and why
    v = cli("journal", "verify")
    assert v.rc == 1 and v.json["code"] == "store_tampered"

    # the line removed: the record's URL, the real remote, again
    subprocess.run(["git", "--git-dir", str(store), "config", "--unset", key] if how != "remote_url" else
                   ["git", "--git-dir", str(store), "config", "remote.r.url", str(real)], check=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})
    assert cli("push").rc == 0
    assert cli("journal", "verify", "--remote", "r").rc == 0
    assert _refs(fake) == []


def test_a_remote_only_in_the_git_config_is_not_used(tmp_path):
    store, ws = tmp_path / "store", tmp_path / "ws"
    ws.mkdir()
    fake = bare(tmp_path / "fake.git")

    def cli(*args):
        return run_cli(store, *args, "--json", env={"CHRONOS_GIT_HOST_ID": "h1"})

    assert cli("write", "a.txt", "--content", "one", "--workspace", ws).rc == 0
    _config(store, "remote.sneaky.url", str(fake))
    _config(store, "remote.sneaky.chronosSnapshots", "true")
    assert cli("remote", "list").json["remotes"] == []
    p = cli("push", "sneaky")
    assert p.rc == 1 and "no remote 'sneaky'" in p.json["error"]
    assert _refs(fake) == []
    h = cli("health")
    assert {t["what"].split(" ")[0] for t in h.json["tampering"]} == {"remote.sneaky.url",
                                                                      "remote.sneaky.chronossnapshots"}


def test_an_edited_record_is_caught_against_the_journal(tmp_path):
    """remotes.json is chronos-git's record, and `remote add` journals the URL too: a record
    edited to point elsewhere fails `journal verify`."""
    import json
    store, ws, real, fake, cli = _a_store_with_remote(tmp_path)
    assert cli("journal", "verify").rc == 0
    path = store / "chronos" / "remotes.json"
    state = json.loads(path.read_text())
    state["r"]["url"] = str(fake)
    path.write_text(json.dumps(state))
    _config(store, "remote.r.url", str(fake))               # the mirror too: the config agrees
    v = cli("journal", "verify")
    assert v.rc == 1 and v.json["code"] == "store_tampered"
    assert [t["kind"] for t in v.json["tampering"]] == ["record"] and str(real) in v.json["error"]


def test_a_planted_pager_closes_the_gate_at_the_next_start(cli, tmp_path, store_dir):
    """Issue 32: tampering findings were reported, not a closed gate, and not looked for at starts."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    assert cli("run", "--", "true", cwd=ws).rc == 0
    marker = tmp_path / "pager-ran"
    subprocess.run(["git", "config", "--file", str(store_dir / "config"), "core.pager", f"touch {marker}"],
                   check=True)
    st = cli("journal", "status", "--json").json            # a start
    assert st["gate"] == "closed" and st["integrity"] == "ok"   # the journal itself is intact
    blocked = cli("run", "--json", "--", "true", cwd=ws)
    assert blocked.rc == 3 and blocked.json["blocked"] is True and "never writes" in blocked.json["message"]
    subprocess.run(["git", "config", "--file", str(store_dir / "config"), "--unset", "core.pager"], check=True)
    assert cli("journal", "verify").rc == 0                 # the repair, verified: open again
    assert cli("run", "--", "true", cwd=ws).rc == 0 and not marker.exists()
