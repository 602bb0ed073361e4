"""Issue 32, "operator acts are the operator's": once the person registers an SSH key, every
operator act is signed with it, and an act without a valid signature (written into the journal
by other means, a copied signature, a key swapped in) is found at the next start and verify:
the gate closes and the event is named until the operator countersigns it or it is undone.

The agent is played in process: it appends to the journal directly (what a same-user agent
can do with pygit2), or acts without the key's passphrase."""
from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys

import pytest
import yaml

from chronos_git.engine import sshsig
from chronos_git.journal_refs import events as ev
from chronos_git.service.operator_key import OperatorKeyError

from .test_reconcile import crash, events_of, process, shell_call

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")


def keypair(path, passphrase: str = ""):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "operator", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)
    return path


@pytest.fixture
def key(tmp_path):
    return keypair(tmp_path / "operator")


def pending_shell_op(store_dir, ws) -> str:
    t = crash(store_dir, shell_call(ws), effect=lambda: (ws / "built.txt").write_text("x"))
    return t.operation_id


def registered(store_dir, key):
    s = process(store_dir)
    s.start()
    s.operator_key_set(str(key), actor="operator-cli")
    return s


def signature_findings(s):
    return [f for f in (s.journal_verify().tampering or []) if f.kind == "signature"]


def test_without_a_key_acts_are_unsigned_and_what_that_leaves_open_is_said(store_dir, ws, cli):
    op = pending_shell_op(store_dir, ws)
    s = process(store_dir)
    info = s.operator_key_show()
    assert not info.registered and "process ancestry only" in info.note and "operator-key set" in info.note
    s.resolve(op, "completed", "built.txt is there")
    assert "signature" not in events_of(s, op)[-1]
    assert s.journal_verify().status == "ok"
    text = cli("operator-key").stdout
    assert "no operator key" in text and "ssh-keygen -t ed25519" in text


def test_a_registered_key_signs_each_act_and_verify_checks_it(store_dir, ws, key, tmp_path):
    s = registered(store_dir, key)
    info = s.operator_key_show()
    fp = sshsig.fingerprint(sshsig.public_key(key))
    assert info.registered and info.fingerprint == fp and info.key_file == str(key)
    reg = [e for e in events_of(s) if e.get("action") == "operator_key"]
    assert len(reg) == 1 and reg[0]["proof"]["key"] == fp and "signature" not in reg[0]
    assert s.operator_key_set(str(key), actor="operator-cli").changed is False      # once

    op = pending_shell_op(store_dir, ws)
    s = process(store_dir)
    s.start()
    s.resolve(op, "completed", "built.txt is there")
    resolved = events_of(s, op)[-1]
    assert resolved["kind"] == "resolved" and resolved["signature"]["key"] == fp
    s.remote_add("r", str(tmp_path / "remote.git"))
    s.remote_remove("r")
    remote_events = [e for e in events_of(s) if e.get("action") in ("remote_added", "remote_removed")]
    assert [bool(e.get("signature")) for e in remote_events] == [True, True]
    assert "operator" in remote_events[0]
    v = s.journal_verify()
    assert v.status == "ok" and not v.tampering, v.tampering
    assert process(store_dir).gate.state() is None


def test_a_rollback_is_signed_before_anything_is_put_back(store_dir, ws, key):
    registered(store_dir, key)
    op = pending_shell_op(store_dir, ws)
    s = process(store_dir)
    s.start()
    out = s.recover(op, rollback=True)
    assert out.outcome == "rolled_back" and not (ws / "built.txt").exists()
    assert events_of(s, op)[-1]["signature"]["nonce"]
    assert s.journal_verify().status == "ok"


def test_an_act_written_into_the_journal_without_the_key_closes_the_gate_until_countersigned(store_dir, ws, key):
    registered(store_dir, key)
    op = pending_shell_op(store_dir, ws)
    agent = process(store_dir)
    agent.start()
    forged = agent.core.journal.append(ev.Resolved, {"operation_id": op, "outcome": "completed",
                                                     "evidence": "trust me", "actor": "operator-cli",
                                                     "operator": {"uid": os.getuid(), "tty": "/dev/pts/0"}})
    s = process(store_dir)
    s.start()
    g = s.gate.state()
    assert g is not None and f"journal event {forged['seq']}" in g.message and "signature" in g.message
    (found,) = signature_findings(s)
    assert found.where == f"journal event {forged['seq']}" and op[:12] in found.what
    assert f"journal countersign {forged['seq']}" in found.fix
    health = s.health(str(ws))
    assert health.protection.state != "on"

    with pytest.raises(ValueError, match="not an operator act awaiting"):
        s.journal_countersign(forged["seq"] - 1, actor="operator-cli")
    done = s.journal_countersign(forged["seq"], actor="operator-cli")
    assert done.event == forged["id"]
    assert s.gate.state() is None and s.journal_verify().status == "ok"
    assert process(store_dir).gate.state() is None


def test_a_copied_signature_signs_nothing_else(store_dir, ws, key):
    registered(store_dir, key)
    op1 = pending_shell_op(store_dir, ws)
    s = process(store_dir)
    s.start()
    s.resolve(op1, "not_applied", "nothing was built")
    sig = events_of(s, op1)[-1]["signature"]
    op2 = pending_shell_op(store_dir, ws)
    agent = process(store_dir)
    agent.start()
    agent.core.journal.append(ev.Resolved, {"operation_id": op2, "outcome": "completed", "evidence": "copied",
                                            "actor": "operator-cli", "signature": sig})
    whys = [f.why for f in signature_findings(process(store_dir))]
    assert len(whys) == 1 and ("used before" in whys[0] or "without a valid signature" in whys[0]), whys


def test_a_key_swapped_in_without_the_old_keys_signature_is_not_taken(store_dir, ws, key, tmp_path):
    registered(store_dir, key)
    theirs = keypair(tmp_path / "agent-key")
    agent = process(store_dir)
    agent.start()
    jid = agent.core.journal.state.journal_id
    fields = {"operation_id": None, "action": "operator_key", "public_key": sshsig.public_key(theirs),
              "fingerprint": sshsig.fingerprint(sshsig.public_key(theirs)), "key_file": str(theirs)}
    from chronos_git.journal_refs import acts
    msg = acts.message(jid, {"kind": "maintenance", **fields}, "n1")
    agent.core.journal.append(ev.Maintenance, {**fields, "proof": {"key": fields["fingerprint"], "nonce": "n1",
                                                                   "sig": sshsig.sign(theirs, msg)}})
    s = process(store_dir)
    s.start()
    assert s.operator_key_show().fingerprint == sshsig.fingerprint(sshsig.public_key(key))   # still ours
    (found,) = signature_findings(s)
    assert "operator key registration" in found.what

    # the person's own replacement, signed by the old key, is taken
    mine = keypair(tmp_path / "new-operator")
    res = process(store_dir).operator_key_set(str(mine), actor="operator-cli")
    assert res.changed and res.replaced == sshsig.fingerprint(sshsig.public_key(key))
    assert process(store_dir).operator_key_show().fingerprint == sshsig.fingerprint(sshsig.public_key(mine))


def at_a_terminal(store_dir, *args, typed: str) -> dict:
    """`chronos-git ARGS --json` as a person runs it at a terminal (a pty with no controlling
    terminal of ours), typing `typed` when ssh-keygen asks for the passphrase."""
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "chronos_git.cli", "--store", str(store_dir), *args, "--json"],
                             stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        os.write(master, typed.encode() + b"\n")      # the line waits in the terminal until it is read
        out, err = p.communicate(timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    doc = json.loads(out)
    return doc


@pytest.mark.process
def test_a_key_with_a_passphrase_signs_only_for_who_types_it_at_a_terminal(store_dir, ws, tmp_path, monkeypatch):
    locked = keypair(tmp_path / "locked", passphrase="correct horse")
    process(store_dir).start()
    assert at_a_terminal(store_dir, "operator-key", "set", str(locked), typed="correct horse")["changed"]
    op = pending_shell_op(store_dir, ws)

    # an askpass the agent set up, or a display, is never asked: the passphrase is typed or not at all
    askpass = tmp_path / "askpass"
    askpass.write_text("#!/bin/sh\necho 'correct horse'\n")
    askpass.chmod(0o755)
    monkeypatch.setenv("SSH_ASKPASS", str(askpass))
    monkeypatch.setenv("SSH_ASKPASS_REQUIRE", "force")
    monkeypatch.setenv("DISPLAY", ":0")
    s = process(store_dir)
    s.start()
    with pytest.raises(OperatorKeyError, match="could not be"):
        s.resolve(op, "completed", "the agent says so")       # no terminal here (a dashboard, a tool)
    wrong = at_a_terminal(store_dir, "journal", "resolve", op, "--outcome", "completed", "--evidence", "x",
                          typed="a guess")
    assert wrong["status"] == "error" and wrong["code"] == "operator_signature", wrong
    assert [u.operation_id for u in process(store_dir).journal_status().unresolved] == [op]
    refused = [e for e in events_of(process(store_dir)) if e.get("action") == "operator_refused"]
    assert len(refused) == 2 and all("not signed" in e["because"] for e in refused)

    ok = at_a_terminal(store_dir, "journal", "resolve", op, "--outcome", "completed", "--evidence", "checked",
                       typed="correct horse")
    assert ok["status"] == "ok" and ok["gate"] == "open", ok
    assert process(store_dir).journal_verify().status == "ok"


def test_an_unsigned_settings_record_that_weakens_is_caught(store_dir, ws, key):
    registered(store_dir, key)
    agent = process(store_dir)
    agent.start()
    rec = agent.core.journal.state.settings
    base = dict(rec["in_force"]) if rec else {"read_only_tools": ["read_file"], "gate_mode": "block"}
    agent.core.journal.append(ev.Maintenance, {"operation_id": None, "action": "settings", "in_force": base,
                                               "held": {}, "fingerprint": "x"})
    agent.core.journal.append(ev.Maintenance, {"operation_id": None, "action": "settings",
                                               "in_force": {**base, "gate_mode": "warn"}, "held": {},
                                               "fingerprint": "y"})
    (found,) = signature_findings(process(store_dir))
    assert "gate_mode" in found.why


def test_the_cli_registers_shows_and_countersigns_with_one_json_document(cli, store_dir, ws, key):
    r = cli("operator-key", "set", str(key), "--json")
    assert r.rc == 0 and r.json["changed"] and r.json["fingerprint"].startswith("SHA256:")
    shown = cli("operator-key", "--json")
    assert json.loads(shown.stdout)["registered"] is True
    assert "operator acts are signed with it" in cli("operator-key").stdout
    bad = cli("operator-key", "set", "--json")
    assert bad.rc == 1 and "needs the private key's path" in bad.json["error"]
    missing = cli("operator-key", "set", str(key) + "-nope", "--json")
    assert missing.rc == 1 and "does not exist" in missing.json["error"]
    c = cli("journal", "countersign", "3", "--json")
    assert c.rc == 1 and "not an operator act awaiting" in c.json["error"]


def test_a_signed_accept_of_a_held_setting_verifies(cli, ws, store_dir, tmp_path, key):
    home = tmp_path / "hermes-home"
    home.mkdir()

    def write(**block):
        doc = {"plugins": {"enabled": ["chronos-git"],
                           "entries": {"chronos-git": {"settings": {"store_dir": str(store_dir), **block}}}}}
        (home / "config.yaml").write_text(yaml.safe_dump(doc))
    write()
    env = {"HERMES_HOME": str(home)}
    assert cli("run", "--json", "--", "true", cwd=ws, env=env).rc == 0
    assert cli("operator-key", "set", str(key), "--json", env=env).rc == 0
    write(gate_mode="warn")
    assert [h["key"] for h in cli("settings", "--json", env=env).json["held"]] == ["gate_mode"]
    r = cli("settings", "accept", "gate_mode", "--json", env=env)
    assert r.rc == 0 and r.json["accepted"] == ["gate_mode"], r.stdout + r.stderr
    v = cli("journal", "verify", "--json", env=env).json
    assert v["status"] == "ok" and not v.get("tampering"), v


def test_a_forged_event_the_check_cannot_read_is_a_finding_not_a_blind_spot(store_dir, ws, key):
    registered(store_dir, key)
    agent = process(store_dir)
    agent.start()
    rec = agent.core.journal.state.settings
    base = dict(rec["in_force"]) if rec else {"gate_mode": "block"}
    agent.core.journal.append(ev.Maintenance, {"operation_id": None, "action": "settings", "in_force": base,
                                               "held": {}, "fingerprint": "x"})
    agent.core.journal.append(ev.Maintenance, {"operation_id": None, "action": "settings", "held": {},
                                               "in_force": {**base, "max_checkpoints": {"not": "a number"}},
                                               "fingerprint": "y"})
    s = process(store_dir)
    s.start()
    (found,) = signature_findings(s)
    assert "max_checkpoints" in found.why
    assert s.gate.state() is not None


def test_an_unsigned_settings_record_that_changes_a_values_type_is_caught(store_dir, ws, key):
    """Red team: `"yes"` for true or `"0"` for 0 compares as no weaker, yet the settings refuse
    the value and fall back to the defaults."""
    registered(store_dir, key)
    agent = process(store_dir)
    agent.start()
    base = {"strict_errors": True, "max_checkpoints": 0, "gate_mode": "block"}
    agent.core.journal.append(ev.Maintenance, {"operation_id": None, "action": "settings", "in_force": base,
                                               "held": {}, "fingerprint": "x"})
    agent.core.journal.append(ev.Maintenance, {"operation_id": None, "action": "settings", "held": {},
                                               "in_force": {**base, "strict_errors": "yes", "max_checkpoints": "0"},
                                               "fingerprint": "y"})
    whys = [f.why for f in signature_findings(process(store_dir))]
    assert len(whys) == 1 and "max_checkpoints" in whys[0] and "strict_errors" in whys[0], whys
