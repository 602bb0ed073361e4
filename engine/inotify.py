"""Linux inotify through ctypes: the constants, the event header and the libc functions, for
the work-tree watcher (engine.watcher) and the watch on the plugin's own code
(service.protected).  `lib()` is None where there is no inotify."""
from __future__ import annotations

import ctypes
import ctypes.util
import struct
import sys

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

HEADER = struct.Struct("iIII")      # wd, mask, cookie, len: then len bytes of NUL-padded name

_libc = None


def lib():
    """libc with inotify_init1 / inotify_add_watch / inotify_rm_watch typed, or None."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        c = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        c.inotify_init1.argtypes = [ctypes.c_int]
        c.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        c.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        _libc = c
    return _libc
