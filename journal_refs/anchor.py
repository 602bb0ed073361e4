"""The anchor chain: the journal as it may leave the machine (metadata and hashes only).

A journal event's tree holds the pre- and post-image blobs of the files a call
declared, so pushing the journal itself would send file contents.  The anchor
chain mirrors it one commit per event: the same message (the event's canonical
JSON) with a trailer `Chronos-Event: <event commit id>`, the same `state.json`,
and `images.json` naming each image blob by id instead of holding it.  It is a
pure function of the journal, so any process extends it incrementally
(`extend`, O(new events)) and rebuilds it when lost.

Because every mirror names the id of the event it mirrors, and that id hashes
the event's whole history, a remote holding the anchor chain pins the local
journal: a consistent local rewrite of store and witness makes different ids,
which no longer contain the remote's (service.remotes compares them).

The host manifest (`host.json` on its own small chain) tells a remote which
workspaces this host has (id -> original path), for `fetch` and a fleet audit.
"""
from __future__ import annotations

import json
import os

import pygit2

from ..engine import locking, metadir
from ..engine.checkpoint import signature
from ..engine.codec import canonical, jsonable
from ..engine.wording import plural
from .events import parse_message
from .journal import REF as JOURNAL_REF, IntegrityError

ANCHOR_REF = "refs/chronos/anchor/journal"
MANIFEST_REF = "refs/chronos/anchor/manifest"
TRAILER = "Chronos-Event: "
MANIFEST_SCHEMA = "chronos-git.host.v1"


def event_of(commit: pygit2.Commit) -> str | None:
    """The journal event a mirror commit stands for (its trailer), or None."""
    last = commit.message.rstrip("\n").rsplit("\n", 1)[-1]
    if last.startswith(TRAILER):
        value = last[len(TRAILER):].strip()
        if len(value) == 40 and all(c in "0123456789abcdef" for c in value):
            return value
    return None


def mirrored(store) -> str | None:
    """The journal event the local anchor chain mirrors last (None: no anchor yet, or unreadable)."""
    try:
        repo = store.repo()
        ref = repo.references.get(ANCHOR_REF)
        return event_of(repo[ref.target]) if ref is not None else None
    except (KeyError, ValueError, pygit2.GitError):
        return None


def payload_of(commit: pygit2.Commit) -> dict:
    """The event payload a mirror commit carries."""
    body = commit.message.rstrip("\n").rsplit("\n\n", 1)[0]
    payload, _ = parse_message(body + "\n")
    return payload


def _mirror(repo: pygit2.Repository, event: pygit2.Commit, parent: str | None) -> str:
    tree = event.tree
    tb = repo.TreeBuilder()
    images = {}
    for entry in tree:
        if entry.name == "state.json":
            tb.insert("state.json", entry.id, pygit2.GIT_FILEMODE_BLOB)
        else:
            images[entry.name] = str(entry.id)
    if images:
        tb.insert("images.json", repo.create_blob(canonical(images).encode()), pygit2.GIT_FILEMODE_BLOB)
    msg = event.message.rstrip("\n") + "\n\n" + TRAILER + str(event.id) + "\n"
    parents = [pygit2.Oid(hex=parent)] if parent else []
    return str(repo.create_commit(None, event.author, event.committer, msg, tb.write(), parents))


def _tip(repo, ref_name: str) -> str | None:
    ref = repo.references.get(ref_name)
    if ref is None:
        return None
    try:
        repo[ref.target]
    except (KeyError, ValueError, pygit2.GitError):
        return None               # lost (a power-cut repair quarantined it): rebuilt from the journal
    return str(ref.target)


def extend(store, journal_head: str | None = None) -> tuple[str | None, str | None]:
    """(anchor tip, journal event it mirrors), brought up to `journal_head` (default: the
    journal ref).  IntegrityError when the journal no longer contains what was mirrored."""
    repo = store.repo()
    with store.writing(), locking.exclusive(metadir.lock_path(store.meta_dir, "anchor")):
        if journal_head is None:
            ref = repo.references.get(JOURNAL_REF)
            journal_head = str(ref.target) if ref else None
        if journal_head is None:
            return None, None
        store.clear_stale_git_lock(store.root / (ANCHOR_REF + ".lock"))   # left by a killed writer
        tip = _tip(repo, ANCHOR_REF)
        done = event_of(repo[tip]) if tip else None
        if done == journal_head:
            return tip, done
        if done is not None and _contains(repo, done, journal_head):
            ref = repo.references.get(JOURNAL_REF)
            now = str(ref.target) if ref else None
            if now == done or (now is not None and _contains(repo, now, done)):
                return tip, done         # another process appended and mirrored past our view
            raise IntegrityError(
                f"the journal was rolled back: it ends at {str(now)[:12]}, but the later event {done[:12]} "
                "was mirrored already (anchored)")
        todo: list[pygit2.Commit] = []
        cur: str | None = journal_head
        while cur != done:
            if cur is None:
                if done is None:
                    break
                raise IntegrityError(
                    f"the journal no longer contains event {done[:12]}, which its anchor chain mirrors "
                    f"(up to {str(tip)[:12]}): the journal's history was rewritten")
            event = repo[cur]
            todo.append(event)
            cur = str(event.parent_ids[0]) if event.parent_ids else None
        for event in reversed(todo):
            tip = _mirror(repo, event, tip)
        # todo holds journal_head at least (done != journal_head): tip is the newest mirror
        repo.references.create(ANCHOR_REF, pygit2.Oid(hex=tip), force=True)   # type: ignore[arg-type]
        return tip, journal_head


def _contains(repo, newer: str, older: str) -> bool:
    try:
        return repo.descendant_of(newer, older)
    except (KeyError, ValueError, pygit2.GitError):
        return False


def manifest(store, host: str, journal_id: str | None) -> str:
    """The tip of the host manifest chain, a new commit only when what it says changed."""
    repo = store.repo()
    workspaces = {}
    for ws in store.workspaces():
        workspaces[ws.id] = jsonable({"path": os.fsdecode(ws.root_bytes)})
    doc = canonical({"schema": MANIFEST_SCHEMA, "host": host, "journal_id": journal_id,
                     "workspaces": workspaces})
    with store.writing(), locking.exclusive(metadir.lock_path(store.meta_dir, "anchor")):
        store.clear_stale_git_lock(store.root / (MANIFEST_REF + ".lock"))
        tip = _tip(repo, MANIFEST_REF)
        if tip is not None:
            try:
                if repo[repo[tip].tree["host.json"].id].data.decode() == doc:
                    return tip
            except (KeyError, UnicodeError):
                pass
        tb = repo.TreeBuilder()
        tb.insert("host.json", repo.create_blob(doc.encode()), pygit2.GIT_FILEMODE_BLOB)
        sig = signature()
        new = repo.create_commit(None, sig, sig, f"chronos-git host {host}: {plural(len(workspaces), 'workspace')}\n",
                                 tb.write(), [pygit2.Oid(hex=tip)] if tip else [])
        repo.references.create(MANIFEST_REF, new, force=True)
        return str(new)


def read_manifest(repo, commit_id: str) -> dict:
    try:
        doc = json.loads(repo[repo[commit_id].tree["host.json"].id].data)
        return doc if isinstance(doc, dict) and doc.get("schema") == MANIFEST_SCHEMA else {}
    except (KeyError, ValueError, pygit2.GitError):
        return {}
