"""Ignore rules for every name a filesystem allows, UTF-8 or not.

pygit2's `Repository.path_is_ignored` takes `str` and encodes it strictly, so
a name that is not UTF-8 (`caf\\xe9.txt`) raises instead of answering.
libgit2 itself takes bytes: for such names we call its
`git_ignore_path_is_ignored` through ctypes on the same repository handle
(the shared library pygit2 loaded).  Where that library cannot be found the
answer is "not ignored": the name is then captured, never silently dropped.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os

import pygit2

_fn = None
_looked = False


def _c_fn():
    global _fn, _looked
    if not _looked:
        _looked = True
        here = os.path.dirname(pygit2.__file__)
        for lib in (glob.glob(os.path.join(here, "..", "pygit2.libs", "libgit2*.so*"))
                    + [ctypes.util.find_library("git2") or ""]):
            if not lib:
                continue
            try:
                fn = ctypes.CDLL(lib).git_ignore_path_is_ignored
            except (OSError, AttributeError):
                continue
            fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_char_p]
            fn.restype = ctypes.c_int
            _fn = fn
            break
    return _fn


def is_ignored(repo: pygit2.Repository, rel: str) -> bool:
    """Whether the work-tree path `rel` (a trailing "/" for a directory) is ignored."""
    try:
        return repo.path_is_ignored(rel)
    except UnicodeEncodeError:
        pass
    fn = _c_fn()
    if fn is None:
        return False
    out = ctypes.c_int(0)
    ptr = int(pygit2.ffi.cast("uintptr_t", repo._repo))
    return fn(ctypes.byref(out), ptr, os.fsencode(rel)) == 0 and bool(out.value)
