"""What the hostile-use Spark tests (issues 30 and 39) read of an input and an output."""

from __future__ import annotations

import json


def snapshot(root):
    """Every file under ``root``, path → bytes: what a refused or a finished run must leave unchanged."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def entries(out):
    """The output's ledger entries, oldest first."""
    return sorted(
        (json.loads(p.read_text()) for p in (out / "_dpspark_ledger").glob("*.json")), key=lambda e: e["finished_at"]
    )
