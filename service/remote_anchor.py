"""The off-machine anchor: the journal mirrored as an anchor chain (journal_refs.anchor),
and the reasoning that keeps it honest.

The journal is never force-pushed: this host's journal on a remote must be the local
head or an ancestor of it.  Anything else (a rewritten or rolled-back local journal,
another machine pushing as this host) is a divergence, recorded in remotes.json, and the
gate stays closed until a later check matches or the operator removes the remote.
With `require_anchor`, a gate also waits while every remote has been failing for longer
than `anchor_timeout_s`.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pygit2

from ..engine import remote as transport
from ..journal_refs import IntegrityError, anchor
from .core import Core
from .remote_fetch import fetch_into
from .remote_link import Link
from .remote_record import HOSTS, read_record, record_path
from .results import AnchorCheck

if TYPE_CHECKING:
    from .remotes import Remotes


def gate_reason(core: Core) -> str | None:
    """Why the off-machine anchor keeps protected calls waiting, or None (one small read)."""
    if not core.store_exists():
        return None
    state = read_record(record_path(core))
    for name, st in sorted(state.items()):
        if isinstance(st, dict) and st.get("diverged"):
            return (f"off-machine anchor: {st['diverged']}. Investigate, then `chronos-git journal verify "
                    f"--remote {name}` (the gate opens when it matches) or `chronos-git remote remove {name}`")
    s = core.settings
    if not s.require_anchor:
        return None
    entries = [st for st in state.values() if isinstance(st, dict)]
    if not entries:
        return ("require_anchor is on but no remote is configured: add one with "
                "`chronos-git remote add NAME URL`")
    now = time.time()
    if any(not st.get("failing_since") or now - st["failing_since"] <= s.anchor_timeout_s for st in entries):
        return None
    since = min(st["failing_since"] for st in entries)
    errors = "; ".join(f"{n}: {st.get('last_error')}" for n, st in sorted(state.items()) if isinstance(st, dict))
    return (f"require_anchor: no remote has taken the journal for {int(now - since)} s (more than "
            f"anchor_timeout_s = {int(s.anchor_timeout_s)}): {errors}. Fix the remote, then "
            "`chronos-git push`")


def extend(remotes: Remotes, name: str, head: str | None) -> str | None:
    """The anchor chain brought up to `head`; a journal that no longer contains what was
    mirrored (rewritten or rolled back with its witness) is a divergence: the gate closes."""
    try:
        return anchor.extend(remotes.core.store, head)[0]
    except IntegrityError as exc:
        why = (f"the local journal has diverged from what was anchored for remote {name!r}: {exc}")
        remotes.record.update(name, diverged=why, last_attempt=time.time())
        raise IntegrityError(why) from None


def descends(remotes: Remotes, repo, name: str, link: Link, theirs: str | None, mine: str | None) -> None:
    """This host's journal on the remote must be ours or an ancestor of ours."""
    if theirs is None or theirs == mine:
        return
    host = remotes.host
    if pygit2.Oid(hex=theirs) not in repo.odb:
        fetch_into(remotes.core, link, f"{HOSTS}/{host}/journal")
        repo = pygit2.Repository(str(remotes.core.store.root))
        if pygit2.Oid(hex=theirs) not in repo.odb:
            raise transport.RemoteError(f"remote {name!r}: this host's journal head there ({theirs[:12]}) "
                                        "could not be fetched (it is not a commit, or it moved meanwhile)")
    remote_event = _event(repo, theirs)
    if mine is not None and repo.descendant_of(mine, theirs):
        return
    if mine is not None and repo.descendant_of(theirs, mine):
        why = (f"this host's journal on remote {name!r} is ahead of the local journal (diverged): the "
               f"remote ends at {remote_event}, the local journal at an earlier event, so the local "
               "journal was rolled back or replaced by an older copy")
    else:
        why = (f"this host's journal on remote {name!r} has diverged from the local journal: the remote "
               f"ends at {remote_event}, which the local journal does not contain, so the local "
               f"history was rewritten or replaced (or another machine pushes as host {host!r})")
    remotes.record.update(name, diverged=why, last_attempt=time.time())
    raise IntegrityError(why)


def _event(repo, mirror_id: str) -> str:
    try:
        commit = repo[mirror_id]
        seq = anchor.payload_of(commit).get("seq")
        return f"event #{seq} {(anchor.event_of(commit) or '?')[:12]}"
    except (KeyError, ValueError, pygit2.GitError):
        return f"anchor {mirror_id[:12]} (unreadable)"


def verify(remotes: Remotes, name: str) -> AnchorCheck:
    """This host's journal on the remote is the local head or an ancestor of it; divergence
    closes the gate (IntegrityError), a match lifts an earlier divergence."""
    name, url, _ = remotes.record.pick(name)
    remotes.record.untampered(f"checking the journal on remote {name!r}")
    remotes.start()
    core = remotes.core
    store, journal, host = core.store, core.journal, remotes.host
    journal.refresh()
    journal.settle()
    head = journal.head
    tip = extend(remotes, name, head)
    repo = pygit2.Repository(str(store.root))
    link = remotes.link(name, url)
    base = f"{HOSTS}/{host}"
    theirs = link.list_refs(base + "/journal").get(base + "/journal")
    if theirs is None:
        raise transport.RemoteError(f"remote {name!r} holds no journal of host {host!r} yet: "
                                    f"run `chronos-git push {name}` first")
    descends(remotes, repo, name, link, theirs, tip)
    remote_commit: pygit2.Commit = repo[theirs]   # type: ignore[assignment]  # a journal event
    remote_seq = int(anchor.payload_of(remote_commit).get("seq", -1))
    remotes.record.update(name, diverged=None)
    return AnchorCheck(remote=name, host=host, remote_head=anchor.event_of(remote_commit) or theirs,
                       local_head=head, behind=max(journal.state.seq - remote_seq, 0))
