"""Named crash points for tests: CHRONOS_GIT_FAULT=<point> SIGKILLs the process there.

The variable is read once at import, so an unset fault costs one string compare.
Points: after_intent, after_dispatch, mid_append, after_ref_update, mid_restore,
mid_compact, mid_snapshot.
"""
import os
import signal

POINTS = frozenset({
    "after_intent", "after_dispatch", "mid_append", "after_ref_update",
    "mid_restore", "mid_restore_file", "after_restore_files", "mid_compact", "mid_snapshot",
})

_ARMED = os.environ.get("CHRONOS_GIT_FAULT") or None


def hit(point: str) -> None:
    if _ARMED is not None and _ARMED == point:
        os.kill(os.getpid(), signal.SIGKILL)
