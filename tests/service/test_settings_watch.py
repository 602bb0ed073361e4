"""Finding 1 of issue 32: one call rewrote the profile's config.yaml so that `read_only_tools`
listed terminal; from then on shell calls ran unjournaled and through a closed gate, `health`
said ON, and nothing recorded the change.  Now the journal records the settings in force; a
weakening change is held (the previous value rules) until an operator accepts it; a
strengthening one applies; every intent carries the fingerprint of the settings it ran under."""
from __future__ import annotations

import json
import sys

import pytest
import yaml

WEAK = ["read_file", "search_files", "terminal"]


@pytest.fixture
def profile(tmp_path, store_dir):
    """A Hermes profile whose settings block names `store_dir` (so it is the profile's own store)."""
    home = tmp_path / "hermes-home"
    home.mkdir()

    def write(enabled=True, **block):
        doc = {"plugins": {"enabled": ["chronos-git"] if enabled else [],
                           "entries": {"chronos-git": {"settings": {"store_dir": str(store_dir), **block}}}}}
        (home / "config.yaml").write_text(yaml.safe_dump(doc))
    write()
    return home, write


def _cli(cli, home, *args, **kw):
    return cli(*args, env={"HERMES_HOME": str(home)}, **kw)


def _events(cli, home, n=50):
    return _cli(cli, home, "journal", "log", "--json", "--limit", n).json["events"]


def test_a_weakening_change_is_held_until_the_operator_accepts_it(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    first = _cli(cli, home, "settings", "--json").json
    assert first["recorded"] and first["held"] == []

    write(read_only_tools=WEAK)                         # what the prompt-injected call did
    res = _cli(cli, home, "run", "--json", "--tool", "terminal", "--", "true", cwd=ws)
    assert res.rc == 0 and not res.json.get("read_only"), "terminal ran as read-only before anyone accepted"
    shown = _cli(cli, home, "settings", "--json").json
    (held,) = shown["held"]
    assert held["key"] == "read_only_tools" and held["written"] == WEAK and "terminal" not in held["in_force"]
    assert shown["accept_command"] == "chronos-git settings accept read_only_tools"
    health = _cli(cli, home, "health", "--json").json
    assert health["protection"]["state"] == "degraded" and "read_only_tools" in health["protection"]["reason"]
    assert [h["key"] for h in health["settings_held"]] == ["read_only_tools"]
    text = _cli(cli, home, "health").stdout
    assert "held for the operator: read_only_tools" in text

    record = [e for e in _events(cli, home) if e.get("action") == "settings"]
    assert record[0]["held"]["read_only_tools"]["written"] == WEAK                  # newest first
    assert record[0]["changes"] == [{"key": "read_only_tools", "from": ["read_file", "search_files"],
                                     "to": WEAK, "verdict": "weakening", "status": "held"}]

    assert "name the held settings" in _cli(cli, home, "settings", "accept", "--json").json["error"]
    accepted = _cli(cli, home, "settings", "accept", "read_only_tools", "--json").json
    assert accepted["accepted"] == ["read_only_tools"] and accepted["held"] == []
    assert _cli(cli, home, "run", "--json", "--tool", "terminal", "--", "true", cwd=ws).json["read_only"]
    ev = [e for e in _events(cli, home) if e.get("action") == "settings"][0]
    assert ev["actor"] == "operator-cli" and ev["operator"]["uid"] >= 0 and ev["held"] == {}
    assert _cli(cli, home, "health", "--json").json.get("settings_held") is None


def test_a_strengthening_change_applies_at_once_and_is_recorded(cli, ws, profile):
    home, write = profile
    write(gate_mode="warn", max_checkpoints=50)
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    write(gate_mode="block", max_checkpoints=0)        # both stronger (0 = unlimited)
    shown = _cli(cli, home, "settings", "--json").json
    assert shown["held"] == [] and shown["in_force"]["gate_mode"] == "block"
    assert shown["in_force"]["max_checkpoints"] == 0
    (ev, *_) = [e for e in _events(cli, home) if e.get("action") == "settings"]
    assert {c["key"]: (c["verdict"], c["status"]) for c in ev["changes"]} == {
        "gate_mode": ("strengthening", "applied"), "max_checkpoints": ("strengthening", "applied")}


def test_undoing_a_held_change_withdraws_it(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    write(auto_snapshot=False)
    assert [h["key"] for h in _cli(cli, home, "settings", "--json").json["held"]] == ["auto_snapshot"]
    write()                                             # the person undid it
    assert _cli(cli, home, "settings", "--json").json["held"] == []
    (ev, *_) = [e for e in _events(cli, home) if e.get("action") == "settings"]
    assert ev["changes"][0]["status"] == "withdrawn"


def test_disabling_the_plugin_in_config_is_held_and_reported(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    write(enabled=False)
    held = _cli(cli, home, "health", "--json").json["settings_held"]
    assert [(h["key"], h["in_force"], h["written"]) for h in held] == [("plugin_enabled", True, False)]


def test_every_intent_carries_the_fingerprint_of_its_settings(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    before = _cli(cli, home, "settings", "--json").json["effective_fingerprint"]
    write(max_checkpoints=500)                          # stronger: applies, so the fingerprint moves
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    after = _cli(cli, home, "settings", "--json").json["effective_fingerprint"]
    started = [e for e in _events(cli, home) if e["kind"] == "started"]
    assert [e["settings_fingerprint"] for e in started[:2]] == [after, before] and after != before


def test_a_process_override_is_fingerprinted_but_never_recorded(cli, ws, profile):
    home, _ = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    res = _cli(cli, home, "run", "--json", "--", "true", cwd=ws, settings={"store_args": True})
    assert res.rc == 0
    started = [e for e in _events(cli, home) if e["kind"] == "started"]
    assert started[0]["settings_fingerprint"] != started[1]["settings_fingerprint"]
    assert len([e for e in _events(cli, home) if e.get("action") == "settings"]) == 1


def test_another_stores_command_reads_no_profile(cli, ws, profile, tmp_path):
    home, write = profile
    other = tmp_path / "other-store"
    res = cli("run", "--json", "--", "true", cwd=ws, env={"HERMES_HOME": str(home), "CHRONOS_GIT_STORE": str(other)})
    assert res.rc == 0
    assert cli("settings", "--json", env={"HERMES_HOME": str(home), "CHRONOS_GIT_STORE": str(other)}).json[
        "recorded"] is False


@pytest.mark.process
def test_the_agent_cannot_accept_its_own_change(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    write(gate_mode="warn")
    res = _cli(cli, home, "run", "--json", "--", sys.executable, "-m", "chronos_git.cli", "settings", "accept",
               "gate_mode", "--json", cwd=ws, process=True)
    inner = json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {}
    assert res.rc != 0 or inner.get("code") == "agent_descendant", res.stdout
    assert [h["key"] for h in _cli(cli, home, "settings", "--json").json["held"]] == ["gate_mode"]
    refused = [e for e in _events(cli, home) if e.get("action") == "operator_refused"]
    assert refused and refused[0]["act"] == "settings accept"


def test_a_profile_pointed_at_a_new_store_says_so_in_the_new_one(cli, ws, tmp_path, store_dir):
    home = tmp_path / "hermes-home"
    home.mkdir()
    moved = tmp_path / "elsewhere"

    def use(where):
        (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
            "chronos-git": {"settings": {"store_dir": str(where)}}}}}))
        return {"HERMES_HOME": str(home), "CHRONOS_GIT_STORE": str(where)}
    assert cli("run", "--json", "--", "true", cwd=ws, env=use(store_dir)).rc == 0
    env = use(moved)                                    # the agent's edit: a fresh store, no history
    assert cli("run", "--json", "--", "true", cwd=ws, env=env).rc == 0
    health = cli("health", "--json", env=env).json
    (held,) = health["settings_held"]
    assert (held["key"], held["in_force"], held["written"]) == ("store_dir", str(store_dir), str(moved))
    assert health["protection"]["state"] == "degraded"
    assert cli("settings", "accept", "all", "--json", env=env).json["accepted"] == ["store_dir"]
    assert cli("health", "--json", env=env).json.get("settings_held") is None


def test_a_host_started_on_another_store_than_the_profile_names_says_so_until_accepted(tmp_path, ws, monkeypatch):
    """CHRONOS_GIT_STORE in the environment Hermes starts with (an edited .env, say) moves the
    host to a fresh store while config.yaml still names the old one: held at every start (not
    only the first), until the operator accepts it; then quiet."""
    from chronos_git import settings as settings_mod
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    home = tmp_path / "home"
    home.mkdir()
    old, new = tmp_path / "old", tmp_path / "new"
    (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
        "chronos-git": {"settings": {"store_dir": str(old)}}}}}))
    monkeypatch.setenv("HERMES_HOME", str(home))

    def host(store):
        Chronos.forget_instances()
        if store == old:
            monkeypatch.delenv("CHRONOS_GIT_STORE", raising=False)
        else:
            monkeypatch.setenv("CHRONOS_GIT_STORE", str(store))      # as Hermes' environment says
        s = Chronos.get(store, Settings(store_dir=str(old)))
        s.watch_settings(lambda: settings_mod.load(env=False), home / "config.yaml")
        s.write_file(str(ws), "a.txt", b"x")
        return s
    host(old)
    for _ in range(2):                                   # the first start of the new store, and the next
        h = host(new).health(str(ws))
        (held,) = h.settings_held
        assert (held.key, held.in_force, held.written) == ("store_dir", str(old), str(new))
        assert h.protection.state == "degraded"
    assert host(new).settings_accept(["store_dir"], actor="operator-cli").accepted == ["store_dir"]
    for _ in range(2):
        h = host(new).health(str(ws))
        assert h.settings_held is None and h.protection.state == "on", h.protection


def test_store_dir_edited_under_a_running_host_is_held(tmp_path, ws, monkeypatch):
    """Review: the host runs on its profile's store and the agent points config.yaml's store_dir
    elsewhere (the next start would use a fresh store): held and DEGRADED at once."""
    from chronos_git import settings as settings_mod
    from chronos_git.service import Chronos
    from chronos_git.settings import Settings
    home = tmp_path / "home"
    home.mkdir()
    old, new = tmp_path / "old", tmp_path / "new"

    def config(where):
        (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
            "chronos-git": {"settings": {"store_dir": str(where)}}}}}))
    config(old)
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("CHRONOS_GIT_STORE", raising=False)
    s = Chronos.get(old, Settings(store_dir=str(old)))
    s.watch_settings(lambda: settings_mod.load(env=False), home / "config.yaml")
    s.write_file(str(ws), "a.txt", b"x")
    config(new)
    s.settings_check()
    (held,) = s.health(str(ws)).settings_held
    assert (held.key, held.in_force, held.written) == ("store_dir", str(old), str(new))


def test_accept_takes_only_what_the_operator_named(cli, ws, profile):
    """A change the agent makes between the person's look and the accept is not accepted with it."""
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    write(max_checkpoints=5)
    assert [h["key"] for h in _cli(cli, home, "settings", "--json").json["held"]] == ["max_checkpoints"]
    write(max_checkpoints=5, gate_mode="warn")                         # the agent, meanwhile
    res = _cli(cli, home, "settings", "accept", "max_checkpoints", "--json").json
    assert res["accepted"] == ["max_checkpoints"] and [h["key"] for h in res["held"]] == ["gate_mode"]
    assert res["in_force"]["gate_mode"] == "block" and res["in_force"]["max_checkpoints"] == 5


def test_a_held_key_taken_at_the_next_start_stays_held_after_a_restart(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    write(ignored_patterns=["*"], max_file_size_mb=0.000001)
    res = _cli(cli, home, "run", "--json", "--", "true", cwd=ws)          # a fresh process: the next start
    assert res.rc == 0
    shown = _cli(cli, home, "settings", "--json").json
    assert {h["key"] for h in shown["held"]} == {"ignored_patterns", "max_file_size_mb"}
    assert shown["in_force"]["ignored_patterns"] != ["*"] and shown["in_force"]["max_file_size_mb"] == 50
    (ws / "new.txt").write_text("still captured\n")
    snap = _cli(cli, home, "snapshot", "--json", cwd=ws).json
    assert snap["created"] and "new.txt" not in {s["path"] for s in snap.get("skipped") or ()}


def test_an_infinite_value_is_a_problem_not_a_crash(cli, ws, profile):
    home, write = profile
    assert _cli(cli, home, "run", "--json", "--", "true", cwd=ws).rc == 0
    (home / "config.yaml").write_text((home / "config.yaml").read_text().replace(
        "store_dir:", "compact_grace_s: .inf\n        store_dir:"))
    health = _cli(cli, home, "health", "--json").json
    assert health["status"] == "ok" and any("compact_grace_s" in p for p in health["settings_problems"])


def test_a_new_store_in_a_profile_that_had_one_holds_what_is_weaker_than_the_defaults(cli, ws, tmp_path, store_dir):
    """The edit that moves the store may weaken the rest at once: with no record to compare
    against, the new store holds whatever is weaker than the defaults."""
    home = tmp_path / "hermes-home"
    home.mkdir()
    moved = tmp_path / "elsewhere"

    def use(where, **block):
        (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
            "chronos-git": {"settings": {"store_dir": str(where), **block}}}}}))
        return {"HERMES_HOME": str(home), "CHRONOS_GIT_STORE": str(where)}
    assert cli("run", "--json", "--", "true", cwd=ws, env=use(store_dir)).rc == 0
    env = use(moved, read_only_tools=WEAK, gate_mode="warn")
    res = cli("run", "--json", "--tool", "terminal", "--", "true", cwd=ws, env=env)
    assert res.rc == 0 and not res.json.get("read_only")
    held = {h["key"] for h in cli("health", "--json", env=env).json["settings_held"]}
    assert held == {"store_dir", "read_only_tools", "gate_mode"}


def test_a_change_that_cannot_be_recorded_does_not_take_effect(tmp_path, store_dir, ws, monkeypatch):
    """A full disk (say) refuses the record of a weakening change: the recorded values still rule
    in a process that starts with the weakened config."""
    from chronos_git import settings as settings_mod
    from chronos_git.journal_refs.journal import Journal
    from chronos_git.service import Chronos
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    config = home / "config.yaml"

    def start(**block):
        config.write_text(yaml.safe_dump({"plugins": {"enabled": ["chronos-git"], "entries": {
            "chronos-git": {"settings": {"store_dir": str(store_dir), **block}}}}}))
        Chronos.forget_instances()                            # a new process
        svc = Chronos.get(store_dir, settings_mod.load(env=False).settings)
        svc.watch_settings(lambda: settings_mod.load(env=False), config)
        return svc
    svc = start()
    svc.snapshot(str(ws))                                     # the store, and then its first record
    svc.settings_check()
    svc.start()
    assert svc.settings_watch.record()
    real = Journal.append

    def full_disk(self, kind, fields, **kw):
        if fields.get("action") == "settings":
            raise OSError(28, "No space left on device")
        return real(self, kind, fields, **kw)
    monkeypatch.setattr(Journal, "append", full_disk)
    svc = start(read_only_tools=WEAK)                         # given: the weakened values
    assert "terminal" not in svc.settings.read_only_tools
