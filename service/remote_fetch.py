"""Fetching what other hosts (and this one) keep on a remote: their anchor chains, manifests
and checkpoints land under tracking refs (`refs/chronos/remotes/<remote>/hosts/...`), never
over this store's own refs, and only once every object has arrived (service/remote_link.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pygit2

from ..journal_refs import anchor
from .core import Core
from .remote_link import Link
from .remote_record import HOSTS, TRACKING
from .results import FetchedHost, FetchedWorkspace, FetchResult

if TYPE_CHECKING:
    from .remotes import Remotes


def fetch(remotes: Remotes, name: str) -> FetchResult:
    name, url, _ = remotes.record.pick(name)
    remotes.record.untampered(f"fetching from remote {name!r}")
    store, host = remotes.core.store, remotes.host
    link = remotes.link(name, url)
    prefix = f"{TRACKING}/{name}/hosts/"
    theirs = link.list_refs(HOSTS + "/")
    got = fetch_into(remotes.core, link, HOSTS + "/*") if theirs else {}
    with store.writing():                           # only the ref updates: the transfer is done
        repo = pygit2.Repository(str(store.root))
        for remote_name, oid in got.items():
            # never our own checkpoints: a tracking ref would pin what retention cut
            if not remote_name.startswith(f"{HOSTS}/{host}/snapshots/"):
                repo.references.create(prefix + remote_name[len(HOSTS) + 1:], pygit2.Oid(hex=oid), force=True)
        for ref in [r for r in repo.references if r.startswith(prefix)]:
            if HOSTS + "/" + ref[len(prefix):] not in got:
                repo.references.delete(ref)          # gone from the remote (or not a commit)
    hosts: dict[str, dict] = {}
    for ref in repo.references:
        if not ref.startswith(prefix):
            continue
        h, _, rest = ref[len(prefix):].partition("/")
        hosts.setdefault(h, {})[rest] = str(repo.references[ref].target)
    return FetchResult(remote=name, hosts=[_host(repo, h, refs) for h, refs in sorted(hosts.items())])


def fetch_into(core: Core, link: Link, src: str) -> dict[str, str]:
    """The refs `src` names on the remote, their objects brought into the store: {ref: id}."""
    repo = pygit2.Repository(str(core.store.root))
    haves = {}
    for ref in repo.references:
        if ref.startswith((TRACKING + "/", "refs/chronos/anchor/")):
            try:
                haves[ref] = str(repo.references[ref].target)
            except (pygit2.GitError, KeyError):
                pass
    return link.fetch_refs(src, haves)


def _host(repo, host: str, refs: dict[str, str]) -> FetchedHost:
    head, events_n, journal_id = None, 0, None
    if "journal" in refs:
        try:
            commit = repo[refs["journal"]]
            head = anchor.event_of(commit)
            payload = anchor.payload_of(commit)
            events_n = int(payload.get("seq", -1)) + 1
        except (KeyError, ValueError, TypeError, pygit2.GitError):
            pass
    man = anchor.read_manifest(repo, refs["manifest"]) if "manifest" in refs else {}
    journal_id = man.get("journal_id") if isinstance(man.get("journal_id"), str) else None
    paths = man.get("workspaces")
    paths = paths if isinstance(paths, dict) else {}
    wss = []
    for rest, tip in sorted(refs.items()):
        if not rest.startswith("snapshots/"):
            continue
        wid = rest[len("snapshots/"):]
        entry = paths.get(wid)
        entry = entry if isinstance(entry, dict) else {}
        path = entry.get("path") if isinstance(entry.get("path"), str) else None
        walker = repo.walk(tip, pygit2.enums.SortMode.NONE)
        walker.simplify_first_parent()
        wss.append(FetchedWorkspace(id=wid, path=path, path_b64=entry.get("path_b64") if isinstance(
            entry.get("path_b64"), str) else None, checkpoints=sum(1 for _ in walker), latest=tip))
    return FetchedHost(host=host, journal_head=head, events=events_n, journal_id=journal_id, workspaces=wss)
