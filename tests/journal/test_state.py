"""JournalState.apply: every allowed transition and every refused one (pure, no store)."""
from __future__ import annotations

import json

import pytest

from chronos_git.journal_refs.events import STATE_SCHEMA
from chronos_git.journal_refs.state import JournalState, TransitionError

OWNER = {"pid": 1, "start_time": 1, "boot_id": "b", "host": ""}


class Chain:
    """Feeds events with consecutive seq numbers through apply."""

    def __init__(self):
        self.state = JournalState()
        self.states = [self.state]

    def ev(self, kind, op=None, **fields):
        return {"kind": kind, "seq": self.state.seq + 1, "operation_id": op, **fields}

    def add(self, kind, op=None, **fields):
        self.state = self.state.apply(self.ev(kind, op, **fields))
        self.states.append(self.state)
        return self.state

    def refuse(self, kind, op=None, match=None, **fields):
        before = self.state.to_json()
        with pytest.raises(TransitionError, match=match):
            self.state.apply(self.ev(kind, op, **fields))
        assert self.state.to_json() == before      # a refusal changes nothing


@pytest.fixture
def chain():
    c = Chain()
    c.add("genesis", journal_id="J1")
    return c


def started(c, op, **extra):
    fields = dict(tool="terminal", session_id="s1", tool_call_id="c1", turn_id="t1", owner=OWNER,
                  workspace="/w", pre_checkpoint="p" * 40)
    fields.update(extra)
    return c.add("started", op, **fields)


# ------------------------------------------------------------------ allowed
def test_genesis_sets_identity_and_seq():
    s = JournalState().apply({"kind": "genesis", "seq": 0, "journal_id": "J1"})
    assert (s.journal_id, s.seq, s.open, s.replayable) == ("J1", 0, {}, {})
    assert s.totals == {"genesis": 1}


def test_an_open_operation_keeps_its_own_copy_of_what_the_caller_passed(chain):
    declared = [{"path": "/w/a", "pre": None, "post": "x" * 40}]
    snapshot = {"kind": "paths", "paths": ["a"], "note": ("t", {"n": 1})}
    s = started(chain, "op1", declared=declared, snapshot=snapshot)
    before = s.to_json()
    declared[0]["post"] = "y" * 40
    snapshot["paths"].append("b")
    snapshot["note"][1]["n"] = 2
    assert s.to_json() == before and s.open["op1"]["snapshot"]["note"] == ("t", {"n": 1})


def test_started_opens_a_running_operation_with_its_fields(chain):
    s = started(chain, "op1", declared=[{"path": "/w/a", "pre": None, "post": "x" * 40}],
                args_hash="ignored-not-an-open-field")
    info = s.open["op1"]
    assert info["state"] == "running"
    assert info["started_seq"] == 1
    assert info["tool"] == "terminal" and info["owner"] == OWNER
    assert info["session_id"] == "s1" and info["tool_call_id"] == "c1" and info["turn_id"] == "t1"
    assert info["pre_checkpoint"] == "p" * 40
    assert info["declared"][0]["path"] == "/w/a"
    assert "args_hash" not in info
    assert s.totals == {"genesis": 1, "started": 1}


def test_returned_closes_a_running_operation(chain):
    started(chain, "op1")
    s = chain.add("returned", "op1", status="ok")
    assert s.open == {} and s.replayable == {}
    assert s.totals["returned"] == 1


def test_uncertain_marks_running_operation(chain):
    started(chain, "op1")
    s = chain.add("uncertain", "op1", reason="exception: Boom", evidence=[{"path": "/w/a"}])
    assert s.open["op1"]["state"] == "uncertain"
    assert s.open["op1"]["reason"] == "exception: Boom"
    assert s.open["op1"]["evidence"] == [{"path": "/w/a"}]


def test_uncertain_twice_keeps_it_uncertain(chain):
    started(chain, "op1")
    chain.add("uncertain", "op1", reason="a")
    s = chain.add("uncertain", "op1", reason="partial")
    assert s.open["op1"]["state"] == "uncertain" and s.open["op1"]["reason"] == "partial"


def test_recovered_completed_closes(chain):
    started(chain, "op1")
    s = chain.add("recovered", "op1", outcome="completed", evidence=[])
    assert "op1" not in s.open and "op1" not in s.replayable


def test_recovered_not_applied_replayable_then_replayed_once(chain):
    started(chain, "op1", declared=[{"path": "/w/a", "pre": None, "post": "b" * 40}])
    s = chain.add("recovered", "op1", outcome="not_applied", replayable=True, evidence=[])
    assert "op1" not in s.open
    assert s.replayable["op1"]["declared"][0]["post"] == "b" * 40
    assert s.replayable["op1"]["tool"] == "terminal"
    assert "state" not in s.replayable["op1"]
    s = chain.add("replayed", "op1", replay_operation_id="op2")
    assert s.replayable == {}
    chain.refuse("replayed", "op1", match="not replayable")


def test_recovered_not_applied_without_replayable_flag_is_not_replayable(chain):
    started(chain, "op1")
    s = chain.add("recovered", "op1", outcome="not_applied", replayable=False)
    assert s.replayable == {} and s.open == {}
    chain.refuse("replayed", "op1", match="not replayable")


@pytest.mark.parametrize("outcome", ["completed", "not_applied", "rolled_back"])
def test_resolved_closes_pending_or_uncertain(chain, outcome):
    started(chain, "op1")
    started(chain, "op2")
    chain.add("uncertain", "op2", reason="x")
    s = chain.add("resolved", "op1", outcome=outcome, evidence="looked at it")
    assert "op1" not in s.open
    s = chain.add("resolved", "op2", outcome=outcome, evidence="looked at it too")
    assert s.open == {}
    assert s.replayable == {}          # an operator's not_applied is never replayable


def test_maintenance_changes_only_seq_and_totals(chain):
    started(chain, "op1")
    before = chain.state
    s = chain.add("maintenance", None, action="compact")
    assert s.open == before.open and s.replayable == before.replayable
    assert s.seq == before.seq + 1 and s.totals["maintenance"] == 1


def test_apply_never_mutates_the_old_state(chain):
    started(chain, "op1")
    old = chain.state
    snapshot = old.to_json()
    chain.add("uncertain", "op1", reason="r")
    chain.add("resolved", "op1", outcome="completed", evidence="e")
    assert old.to_json() == snapshot
    assert old.open["op1"]["state"] == "running"


def test_state_json_roundtrip_and_schema(chain):
    started(chain, "op1")
    s = chain.state
    d = json.loads(s.to_json())
    assert d["schema"] == STATE_SCHEMA and d["seq"] == s.seq and d["journal_id"] == "J1"
    again = JournalState.from_json(s.to_json())
    assert again.to_json() == s.to_json()
    d["schema"] = "other"
    with pytest.raises(ValueError):
        JournalState.from_json(json.dumps(d))


# ------------------------------------------------------------------ refused
def test_seq_gaps_and_repeats_are_refused(chain):
    started(chain, "op1")
    for bad in (chain.state.seq + 2, chain.state.seq, chain.state.seq - 1, None):
        with pytest.raises(TransitionError, match="seq"):
            chain.state.apply({"kind": "returned", "seq": bad, "operation_id": "op1"})


def test_first_event_must_be_genesis():
    with pytest.raises(TransitionError, match="genesis"):
        JournalState().apply({"kind": "started", "seq": 0, "operation_id": "op1"})
    with pytest.raises(TransitionError, match="seq"):
        JournalState().apply({"kind": "genesis", "seq": 1, "journal_id": "J"})


def test_genesis_twice_refused(chain):
    chain.refuse("genesis", journal_id="J2", match="genesis")


def test_event_without_operation_id_refused(chain):
    for kind in ("started", "returned", "uncertain", "recovered", "resolved", "replayed"):
        chain.refuse(kind, None, match="without operation_id")


def test_unknown_kind_refused(chain):
    started(chain, "op1")
    chain.refuse("exploded", "op1", match="unknown event kind")


def test_started_twice_refused(chain):
    started(chain, "op1")
    chain.refuse("started", "op1", match="already started")


def test_started_again_while_replayable_refused(chain):
    started(chain, "op1")
    chain.add("recovered", "op1", outcome="not_applied", replayable=True)
    chain.refuse("started", "op1", match="already started")


def test_return_of_unknown_operation_refused(chain):
    chain.refuse("returned", "nope", match="not running")


def test_return_of_closed_operation_refused(chain):
    started(chain, "op1")
    chain.add("returned", "op1", status="ok")
    chain.refuse("returned", "op1", match="not running")


def test_return_of_uncertain_operation_refused(chain):
    started(chain, "op1")
    chain.add("uncertain", "op1", reason="r")
    chain.refuse("returned", "op1", match="not running")


def test_uncertain_of_unknown_refused(chain):
    chain.refuse("uncertain", "nope", match="not open")


def test_recovered_on_uncertain_refused(chain):
    started(chain, "op1")
    chain.add("uncertain", "op1", reason="r")
    chain.refuse("recovered", "op1", outcome="completed", match="only an operator")


def test_resolve_twice_refused(chain):
    started(chain, "op1")
    chain.add("resolved", "op1", outcome="completed", evidence="e")
    chain.refuse("resolved", "op1", outcome="completed", evidence="e", match="not unresolved")
    chain.refuse("recovered", "op1", outcome="completed", match="not unresolved")


def test_resolve_unknown_refused(chain):
    chain.refuse("resolved", "nope", outcome="completed", evidence="e", match="not unresolved")


@pytest.mark.parametrize("evidence", [None, "", "   \n\t"])
def test_resolve_without_evidence_refused(chain, evidence):
    started(chain, "op1")
    chain.refuse("resolved", "op1", outcome="completed", evidence=evidence, match="evidence")


@pytest.mark.parametrize("kind", ["recovered", "resolved"])
@pytest.mark.parametrize("outcome", [None, "maybe", "COMPLETED"])
def test_unknown_outcome_refused(chain, kind, outcome):
    started(chain, "op1")
    chain.refuse(kind, "op1", outcome=outcome, evidence="e", match="outcome")


def test_replay_of_never_settled_refused(chain):
    started(chain, "op1")
    chain.refuse("replayed", "op1", match="not replayable")


def test_replay_after_resolved_not_applied_refused(chain):
    started(chain, "op1")
    chain.add("resolved", "op1", outcome="not_applied", evidence="e", replayable=True)
    chain.refuse("replayed", "op1", match="not replayable")
