"""`chronos-git report`: one self-contained HTML file that says what the store knows.

An operator hands it to someone who has neither the store nor chronos-git:
the integrity verdict, what crashed and how it was settled (with the per-path
evidence), the journal's timeline, the checkpoints, the store's size and the
last wind tunnel run.  It is rendered from the service's typed results only
(the same ones `--json` and HTTP send), so it shows nothing they do not.
"""
from __future__ import annotations

from .build import ReportWritten, build, default_name, gather, render, write, written

__all__ = ["build", "write", "written", "gather", "render", "default_name", "ReportWritten"]
