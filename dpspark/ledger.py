"""The release ledger: which records of an output were released, when, and at what ε.

Re-releasing records spends privacy again (the ε of the releases add up), so a release
that overlaps an earlier one is refused unless asked for. Overlap is decided on
*records*, not on strings: a partition spec ``date=X/hour=01`` selects the records
with date = X and hour = 01, ``date=X`` every hour of that date, and a release without
a spec the whole dataset. Two specs select common records exactly when they agree on
every key that both name, so ``date=X`` overlaps ``date=X/hour=01`` (coarser or finer),
and ``date=X/hour=01`` does not overlap ``date=X/hour=02``.

The ledger is a directory ``_dpspark_ledger/`` at the output root holding one JSON file
per release, each written once and atomically. Two concurrent releases of different
partitions write different files, so neither can lose the other's entry (a single JSON
read, modified and written back by both would). Values stay strings: ``hour=01`` is
``"01"``, never the number 1.

Pure Python: the Spark layer (``dpspark.spark.io``) reads and writes the files.
"""

from __future__ import annotations

import json
from typing import Any

from dpspark.errors import ConfigError, LedgerError, ReleaseRefusedError

LEDGER_DIR = "_dpspark_ledger"
ENTRY_KEYS = ("run_id", "partition", "epsilon", "mechanism", "finished_at", "rerelease")
# The ledger entry format's major version (CHANGELOG.md, "Formats"): within a major version fields are
# only added, never removed or renamed, and a reader ignores the fields it does not know. An entry
# without a "format_version" field is version 1.
FORMAT_VERSION = 1


def parse_spec(spec: str | None) -> dict[str, str] | None:
    """``"date=X/hour=01"`` → ``{"date": "X", "hour": "01"}`` (ordered, values kept as strings)."""
    if spec is None:
        return None
    parts = [p.split("=", 1) for p in spec.strip("/").split("/")]
    if not spec.strip("/") or not all(len(p) == 2 and p[0] and p[1] for p in parts):
        raise ConfigError(f"partition: expected KEY=VALUE[/KEY=VALUE...], e.g. date=2026-11-21, got {spec!r}")
    keys = [k for k, _ in parts]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"partition: a key is named twice in {spec!r}")
    return dict(parts)


def spec_text(spec: dict[str, str] | None) -> str:
    """The spec as a path (``date=X/hour=01``), or ``(whole dataset)``."""
    return "/".join(f"{k}={v}" for k, v in spec.items()) if spec else "(whole dataset)"


def overlaps(a: dict[str, str] | None, b: dict[str, str] | None) -> bool:
    """True when the records selected by ``a`` and ``b`` can intersect (None: every record)."""
    if a is None or b is None:
        return True
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def entry(
    run_id: str, spec: dict[str, str] | None, epsilon: float, mechanism: str, finished_at: str, rerelease: bool, **extra
) -> dict[str, Any]:
    """One release, as written to ``_dpspark_ledger/<run_id>.json``."""
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "partition": spec,
        "epsilon": float(epsilon),
        "mechanism": mechanism,
        "finished_at": finished_at,
        "rerelease": bool(rerelease),
        **extra,
    }


def parse_entry(name: str, text: str) -> dict[str, Any]:
    """Validate one ledger file; a damaged file is a LedgerError naming it (never skipped)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LedgerError(
            f"ledger entry {name} is not valid JSON ({exc.msg} at line {exc.lineno}): the record of which records "
            "were released is damaged; restore the file from a backup, or remove it only if you know that release "
            "never reached a reader"
        ) from None
    missing = [k for k in ENTRY_KEYS if not isinstance(data, dict) or k not in data]
    spec = data.get("partition") if isinstance(data, dict) else None
    bad_spec = spec is not None and not (
        isinstance(spec, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in spec.items())
    )
    bad_eps = isinstance(data, dict) and not isinstance(data.get("epsilon"), int | float)
    if missing or bad_spec or bad_eps:
        what = f"misses {', '.join(missing)}" if missing else "has a malformed partition or epsilon"
        raise LedgerError(
            f"ledger entry {name} {what}: the record of which records were released is damaged; restore it from a "
            "backup (dpspark never rewrites ledger entries)"
        )
    return data


def overlapping(entries: list[dict[str, Any]], spec: dict[str, str] | None) -> list[dict[str, Any]]:
    """The earlier releases whose records intersect ``spec``'s, oldest first."""
    return sorted((e for e in entries if overlaps(e["partition"], spec)), key=lambda e: e["finished_at"])


def epsilon_spent(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each released partition: ε spent on its records, at most (the sum over every release that
    overlaps it; exact when the releases of a dataset all use one partition depth)."""
    specs: list[dict[str, str] | None] = []
    for e in entries:
        if e["partition"] not in specs:
            specs.append(e["partition"])
    return [
        {
            "partition": spec_text(s),
            "epsilon_at_most": sum(e["epsilon"] for e in entries if overlaps(e["partition"], s)),
            "releases": sum(1 for e in entries if overlaps(e["partition"], s)),
        }
        for s in specs
    ]


def check_unchanged(
    earlier: list[dict[str, Any]], current: list[dict[str, Any]], spec: dict[str, str] | None, output: str
) -> None:
    """Refuse (exit 7) when a release that overlaps ``spec`` entered the ledger after this run read it:
    two runs raced for the same records. Called holding the output's lock, just before the commit;
    ``--allow-rerelease`` covers only the earlier releases that the run saw and was checked against."""
    seen = {e["run_id"] for e in earlier}
    raced = overlapping([e for e in current if e["run_id"] not in seen], spec)
    if raced:
        last = raced[-1]
        raise ReleaseRefusedError(
            f"{spec_text(spec)} of {output} was released by another run while this one ran (run "
            f"{last['run_id']}, {spec_text(last['partition'])}, epsilon {last['epsilon']:g}, at "
            f"{last['finished_at']}): nothing of this run was published and its epsilon was not spent; look at "
            "that release before releasing these records again"
        )


def summary(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest's ``ledger``: every release of the output so far, the last one this run's."""
    return {
        "releases": len(entries),
        "epsilon_spent": epsilon_spent(entries),
        "rerelease": bool(entries[-1]["rerelease"]),
    }
