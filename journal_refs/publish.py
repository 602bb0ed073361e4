"""Publishing events: their git objects and the journal ref, after the witness made them durable.

An append is durable once its witness record is synced: the record names the new
head and carries every new object's loose bytes (journal_refs/carried.py).  Writing
those objects as loose files and moving the ref is what makes the event visible to
git and to other processes, and it is most of an append's cost (a file created in
a fan-out directory right after an fdatasync waits on the file system's journal).
So a call's intent (`Journal.append(..., defer=True)`) returns at the sync, and
this module writes the objects and moves the ref from the head the batch started
at (`base`) to its last event, in the background, under the journal's lock.  Other
events, and an intent on a nearly full disk (`room`), write their objects before
the witness and move the ref before they return, as every append did before:

* the publisher thread (one per process) publishes as soon as an append leaves `Journal.pending`;
* anything in this process that reads the chain first settles it (`Journal.repo()`,
  every append, refresh and sync), so a reader never sees a head whose objects are
  not written;
* a crash before publication (the crash point `mid_publish`: some objects written,
  the ref not moved) is the `after_witness` state: the next open writes the carried
  objects back and moves the ref to the witness (heal.reconcile: the witness
  records `base`, so a lag of the whole batch, and only that, is a crash's).

Concurrent appends of one process share one witness write and one sync (group
commit, journal_refs/batch.py).
"""
from __future__ import annotations

import atexit
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..engine import faults, loose
from .commits import IntegrityError, descends

if TYPE_CHECKING:
    from .journal import Journal

__all__ = ["Pending", "PUBLISHER", "publish", "room"]

WAIT_S = 60.0        # a reader holding another lock waits this long for the publisher


@dataclass
class Pending:
    """Durable events whose objects are not written yet and the ref not moved."""
    base: str | None                     # where the ref pointed before the batch
    head: str                            # the batch's last event
    objects: list[tuple[str, bytes]] = field(default_factory=list)   # (oid, loose bytes)


ROOM_BYTES = 64 << 20        # below this much free space an intent's objects are written before its witness
ROOM_INODES = 4096


def room(objects_dir) -> bool:
    """Whether the store's file system has room for an event's objects after the fact: on a
    nearly full disk they are written first, so that a full disk fails the append, cleanly,
    before it counts (a durable event whose objects cannot be written would wait for space).
    Asked on every intent: an answer kept for later would span the tool calls in between,
    and tool calls are what fill disks."""
    try:
        st = os.statvfs(objects_dir)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= ROOM_BYTES and (st.f_files == 0 or st.f_favail >= ROOM_INODES)


def publish(journal: Journal, pending: Pending) -> None:
    """Write the pending objects and move the ref from `base` to `head` (the caller holds the
    journal's guard, the store's writing lock and the journal lock).  A ref already at or past
    `head` (another process healed it) is left where it is."""
    objects = journal.store.root / "objects"
    for oid, raw in pending.objects:
        loose.put(objects, oid, raw)
    faults.hit("mid_publish")
    tip = journal.ref_tip()
    if tip == pending.head:
        return
    if tip != pending.base:
        if tip is not None and descends(journal.store.repo(), tip, pending.head):
            return
        raise IntegrityError(f"the journal ref moved to {str(tip)[:12]} before this process published "
                             f"{pending.head[:12]}: another writer ignores the journal lock")
    journal.move_ref(pending.base, pending.head)


class _Publisher:
    """The one background thread per process that publishes what appends leave pending (any
    journal's: it holds them weakly and keeps nothing between publications)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Fresh state (also in a forked child: the parent publishes what it left pending)."""
        self.cond = threading.Condition()       # waiters for a publication (wait, notify)
        self._todo: list[weakref.ref] = []
        self._todo_lock = threading.Lock()
        # the thread's wake-up: released by kick, taken by the thread (notifying a Condition
        # was a twentieth of a call's intent)
        self._wake = threading.Lock()
        self._wake.acquire()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._journals: weakref.WeakSet[Journal] = weakref.WeakSet()   # those that had something pending

    def kick(self, journal: Journal) -> None:
        with self._todo_lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid, self._todo = os.getpid(), []
                self._thread = threading.Thread(target=self._run, name="chronos-journal-publisher",
                                                daemon=True)
                self._thread.start()
            self._todo.append(weakref.ref(journal))
            if journal not in self._journals:
                self._journals.add(journal)
        try:
            self._wake.release()
        except RuntimeError:
            pass                         # a wake-up is pending already: it takes this one too

    def notify(self) -> None:
        """A journal's pending events were published, or a publication failed: waiters look."""
        with self.cond:
            self.cond.notify_all()

    def wait(self, journal: Journal, timeout: float = WAIT_S) -> bool:
        """Wait until `journal` has nothing pending (True), a publication of it failed or
        `timeout` passed (False)."""
        failures = journal.publish_failures
        with self.cond:
            return self.cond.wait_for(lambda: journal.pending is None or journal.publish_failures != failures,
                                      timeout) and journal.pending is None

    def _run(self) -> None:
        while True:
            self._wake.acquire()
            with self._todo_lock:
                todo, self._todo = self._todo, []
            for ref in todo:
                _try_publish(ref())

    def flush(self) -> None:
        """At a clean exit: publish what is still pending, waiting for a publication under way
        (a crash leaves it to the next open)."""
        for j in list(self._journals):
            _try_publish(j)


def _try_publish(j: Journal | None) -> None:
    """Publish what `j` has pending; a failure is kept on the journal (unwritable, integrity)
    and the next append, read or open publishes or heals it."""
    if j is not None and j.pending is not None:
        try:
            j.publish_pending()
        except Exception:                    # noqa: BLE001 - recorded on the journal
            pass


PUBLISHER = _Publisher()
atexit.register(PUBLISHER.flush)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PUBLISHER.reset)
