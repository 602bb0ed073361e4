"""One router per resource: checkpoints (and diffs, restores), the journal, the store."""
