"""Counts for people, with the right plural: "1 file", "2 files" (never "1 file(s)").

The one helper every layer's text uses (cli/render.py, report/, service/, hermes/);
JSON documents carry the bare numbers.
"""
from __future__ import annotations


def plural(n: int | None, word: str, many: str | None = None) -> str:
    """`n` and `word`, in the plural unless n is 1: plural(1, "file") -> "1 file",
    plural(2, "file") -> "2 files", plural(3, "entry", "entries") -> "3 entries"."""
    return f"{n} {word if n == 1 else many or word + 's'}"
