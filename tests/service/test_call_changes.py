"""Which changes are the agent's, read from journal events (service/call_changes.py): the
boundary is marked unknown (every path a conflict) where it cannot be told."""
from __future__ import annotations

from chronos_git.service import call_changes

WS = "/w"


def started(op, t, *, session="s1", pre="p" * 40, tool="terminal", partial=False):
    return {"kind": "started", "operation_id": op, "timestamp_ns": t, "workspace": WS, "tool": tool,
            "session_id": session, "pre_checkpoint": pre, "snapshot": {"partial": partial}}


def returned(op, t, *, post="q" * 40, **extra):
    return {"kind": "returned", "operation_id": op, "timestamp_ns": t, "status": "ok", "post_checkpoint": post,
            **extra}


def read(*events_oldest_first, since=0):
    return {c.operation_id: c for c in call_changes.calls(list(reversed(events_oldest_first)), WS,
                                                          since_ns=since)}


def test_calls_of_one_session_in_turn_are_the_agents():
    cs = read(started("a", 1), returned("a", 2), started("b", 3), returned("b", 4))
    assert [c.ambiguous for c in cs.values()] == [None, None]


def test_two_sessions_whose_calls_overlap_are_both_unknown():
    cs = read(started("a", 1, session="s1"), started("b", 2, session="s2"), returned("a", 3), returned("b", 4))
    assert "overlapped" in cs["a"].ambiguous and "overlapped" in cs["b"].ambiguous
    same = read(started("a", 1), started("b", 2), returned("a", 3), returned("b", 4))   # one session: in order
    assert same["a"].ambiguous is None and same["b"].ambiguous is None


def test_a_crashed_call_and_a_partial_checkpoint_are_unknown():
    cs = read(started("a", 1), started("b", 5, partial=True), returned("b", 6),
              {"kind": "recovered", "operation_id": "a", "timestamp_ns": 9, "outcome": "completed"})
    assert "no checkpoint after" in cs["a"].ambiguous and cs["a"].settled == "completed"
    assert "partial" in cs["b"].ambiguous


def test_what_changed_after_a_call_left_a_process_running_is_unknown():
    cs = call_changes.calls(list(reversed([started("a", 1), returned("a", 2, left_running=[{"pid": 7}]),
                                           started("b", 3, pre="r" * 40), returned("b", 4)])), WS)
    [gap] = call_changes.gaps(cs)
    assert gap.ambiguous and gap.before == "q" * 40 and gap.after == "r" * 40
    last = call_changes.calls([returned("a", 2, left_running=[{"pid": 7}]), started("a", 1)], WS)
    assert call_changes.gaps(last)[0].after == ""              # up to the workspace as it is now


def test_reading_stops_at_the_first_call_before_since():
    cs = read(started("old", 1), returned("old", 2), started("new", 10), returned("new", 11), since=5)
    assert list(cs) == ["new"]


def test_compact_keeps_what_the_time_machine_reads():
    ev = {**started("a", 1), "args": {"undoes": "x", "content": "secret" * 100}, "owner": {"pid": 1}}
    small = call_changes.compact(ev)
    assert small["args"] == {"undoes": "x"} and "owner" not in small and small["pre_checkpoint"] == "p" * 40


def test_a_file_calls_checkpoint_says_nothing_of_what_a_process_left_running_did_elsewhere():
    """Its pre-checkpoint reads only its own paths (it may even be the shell call's post), so the
    stretch runs on to the next whole checkpoint, or to now."""
    declared = {**started("b", 3, pre="q" * 40, tool="write_file"), "snapshot": {"kind": "declared"}}
    cs = call_changes.calls(list(reversed([started("a", 1), returned("a", 2, left_running=[[7, 1, "sh"]]),
                                           declared, returned("b", 4)])), WS)
    [gap] = call_changes.gaps(cs)
    assert gap.ambiguous and gap.before == "q" * 40 and gap.after == ""
