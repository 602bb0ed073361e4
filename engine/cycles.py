"""Work that makes millions of objects and no reference cycles, run without the cycle collector.

A listing or a parse of a million paths allocates so many container objects that the cycle
collector runs its full passes again and again, each over every live object (a first
snapshot's parsed index among them): a third of `log --all` at 10,000 checkpoints, a third of
a first snapshot's parse at a million files.  Refcounting frees all of it either way.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def no_cycle_collection():
    """The cycle collector off for the block (as it was after: a host that turned it off keeps
    it off; nested blocks leave it to the outermost)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
