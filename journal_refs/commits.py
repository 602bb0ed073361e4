"""What append, heal, verify and query share: the ref, the errors, and reading events.

Its own module so that `journal.py` can compose `heal`, `verify` and `query` without
an import cycle (each of them reads the chain through these, never through `Journal`).
"""
from __future__ import annotations

import time
from pathlib import Path

import pygit2

from ..engine.powercut import loose_object_ok
from .state import JournalState

REF = "refs/chronos/journal"

__all__ = ["full_due", "REF", "JournalError", "IntegrityError", "Unpublished", "AlarmRaised", "read_object",
           "read_commit", "descends", "load_state"]


class JournalError(Exception):
    code = "journal_error"


class IntegrityError(JournalError):
    code = "integrity"


class Unpublished(JournalError):
    """The witness vouches for events whose objects are not in the store and this process
    cannot write them (another user's store, a full disk): not damage; a writer heals it."""
    code = "unpublished"


class AlarmRaised(IntegrityError):
    """The persisted result of a failed verify (see `verify.AlarmFile.check`): a gate it
    closed opens again once the alarm file is gone."""


def read_object(repo, oid):
    """repo[oid], but a damaged loose object is an error, not a read: libgit2 1.9 loops
    forever inflating a truncated one (engine.powercut)."""
    oid = str(oid)
    if not loose_object_ok(Path(repo.path) / "objects" / oid[:2] / oid[2:]):
        raise ValueError(f"object {oid[:12]} is damaged (truncated or edited)")
    return repo[oid]


def read_commit(repo, oid) -> pygit2.Commit:
    """A journal event: a ref or a witness naming a tree or a blob is damage (ValueError)."""
    obj = read_object(repo, oid)
    if not isinstance(obj, pygit2.Commit):
        raise ValueError(f"object {str(oid)[:12]} is a {obj.type_str}, not a journal event")
    return obj


def descends(repo, a: str, b: str) -> bool:
    """Whether commit `a` descends from `b`; a witness naming a tree or a blob is damage."""
    try:
        return repo.descendant_of(a, b)
    except (ValueError, pygit2.GitError) as exc:
        raise IntegrityError(f"the journal and its local checkpoint cannot be compared ({exc}): "
                             "one of them names something that is not a journal event") from None


def load_state(repo, commit_id: str) -> JournalState:
    """The state stored with event `commit_id` (its tree's `state.json`); IntegrityError if unreadable."""
    try:
        commit = read_commit(repo, commit_id)
        blob = read_object(repo, read_object(repo, commit.tree_id)["state.json"].id)
        return JournalState.from_json(blob.data)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise IntegrityError(f"journal event {commit_id[:12]} is unreadable or corrupt ({exc})") from None


FUTURE_SLACK_S = 3600.0      # clocks disagree a little; a record from further ahead is not believed


def full_due(full_at, max_age_s: float) -> bool:
    """Whether a full check recorded at `full_at` (seconds) is older than `max_age_s`, or never
    ran.  A time in the future (a record the agent set years ahead, to switch the daily check
    off) counts as never."""
    if not isinstance(full_at, (int, float)) or isinstance(full_at, bool):
        return True
    age = time.time() - full_at
    return age > max_age_s or age < -FUTURE_SLACK_S
