"""What HTTP clients send: the base of every request body (api/routes/commands.py makes one
per POST command from the command table).  Unknown fields are errors (a misspelt `dry_run`
must not mean a real restore), and so are values of another JSON type: `"dry_run": "no"` is
not false, `"limit": "5"` not a number (strict).  Responses are service.results models."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
