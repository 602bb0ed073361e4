"""Red team: the daily full verification was switched off by writing a `full_at` ten years
ahead into the records of the last full check (agent-writable); a time in the future now
counts as never checked."""
from __future__ import annotations

import json
import time

from chronos_git.journal_refs import checkpoints
from chronos_git.journal_refs.commits import full_due


def test_a_full_check_recorded_in_the_future_is_due():
    now = time.time()
    assert full_due(None, 86400) and full_due("yesterday", 86400) and full_due(True, 86400)
    assert not full_due(now - 60, 86400) and full_due(now - 2 * 86400, 86400)
    assert full_due(now + 10 * 365 * 86400, 86400)
    assert not full_due(now + 60, 86400)                  # clocks disagree a little


def test_both_records_set_ahead_still_start_the_daily_verify(svc, ws):
    s = svc()
    s.write_file(str(ws), "a.txt", b"one\n")
    s.journal_verify()                                    # a full verify writes both records
    journal = s.core.journal
    assert not journal.full_verify_due() and not checkpoints.full_check_due(s.core.store)
    meta = s.core.store.meta_dir
    for name in ("journal-verified.json", "checkpoints-verified.json"):
        d = json.loads((meta / name).read_text())
        d["full_at"] = time.time() + 10 * 365 * 86400
        (meta / name).write_text(json.dumps(d))
    assert journal.full_verify_due() and checkpoints.full_check_due(s.core.store)
