"""Path helpers shared by the diff, scan and restore code."""
from __future__ import annotations

from pygit2.enums import DeltaStatus


def delta_path(delta) -> str:
    """The path a diff delta is about (the old one for a deletion)."""
    return delta.old_file.path if delta.status == DeltaStatus.DELETED else delta.new_file.path


def within(path: str, roots: list[str] | None) -> bool:
    """True when `path` is one of `roots` or below one of them (no roots: everything)."""
    if not roots:
        return True
    return any(path == r or path.startswith(r + "/") for r in roots)


def same(now: str | None, image: str | None) -> bool:
    """Whether a path's content id `now` is the image `image` (None: no file).  A directory
    where an image says "no file" counts as no file: the plan put files below it."""
    return now == image or (image is None and now == "special:dir")
