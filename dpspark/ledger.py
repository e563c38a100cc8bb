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

**One ledger per guarantee type.** ε of different guarantee types is not one scale
(``dpspark.mechanisms.base.GUARANTEE_TYPES``), so each entry records its ``guarantee_type`` and
what the release ``spent`` in that type's unit (``cost``), and the sums are per type, never
across types: the metric bound Σε (metric, and likewise the group, pure and rank types in their
own ε), Σ(ε + ln(1/p)) for UMLDP (SanText+), Σ n·ε per document for SynTF's documents (n its
``draws``), and no bound at all for a mechanism of type ``none``: such a release spends an
unbounded budget.

Pure Python: the Spark layer (``dpspark.spark.io``) reads and writes the files.
"""

from __future__ import annotations

import json
import math
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


# Each guarantee type's unit of the budget spent (the sums of ``epsilon_spent`` are in it).
UNITS = {
    "metric": "sum of ε (the bound per unit of embedding distance)",
    "umldp": "sum of ε + ln(1/p) (per unit of embedding distance, outputs in the protected set)",
    "group": "sum of ε (between words of one output group)",
    "pure": "sum of ε (per token)",
    "document": "sum of n·ε per document (n words drawn per document; null where n is each document's token count)",
    "rank": "sum of ε (per list position)",
    "none": "none: no guarantee, the budget spent is unbounded",
}


def cost(guarantee_type: str, epsilon: float, p: float | None = None, draws: int | None = None) -> float | None:
    """What one release spends in its guarantee type's unit (``UNITS``); None where no finite bound is
    known: a ``none`` mechanism (unbounded), or SynTF's documents with n each document's token count."""
    if guarantee_type == "none" or (guarantee_type == "document" and draws is None):
        return None
    if guarantee_type == "umldp":
        return float(epsilon) + math.log(1.0 / float(p if p is not None else 1.0))
    if guarantee_type == "document":
        return float(draws) * float(epsilon)
    return float(epsilon)


def entry(
    run_id: str,
    spec: dict[str, str] | None,
    epsilon: float,
    mechanism: str,
    finished_at: str,
    rerelease: bool,
    guarantee_type: str = "metric",
    p: float | None = None,
    draws: int | None = None,
    **extra,
) -> dict[str, Any]:
    """One release, as written to ``_dpspark_ledger/<run_id>.json``: with its guarantee type, and what it
    ``spent`` in that type's unit (``cost``; null where unbounded)."""
    terms = {"p": p} if guarantee_type == "umldp" else {"draws": draws} if guarantee_type == "document" else {}
    return {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "partition": spec,
        "epsilon": float(epsilon),
        "mechanism": mechanism,
        "finished_at": finished_at,
        "rerelease": bool(rerelease),
        "guarantee_type": guarantee_type,
        **terms,
        "spent": cost(guarantee_type, epsilon, p, draws),
        **extra,
    }


def guarantee_type(e: dict[str, Any]) -> str:
    """An entry's guarantee type; an entry written before entries recorded it: its mechanism's (metric
    for the noise mechanisms and release-vectors, the only ones then)."""
    if isinstance(e.get("guarantee_type"), str):
        return e["guarantee_type"]
    from dpspark.mechanisms import REGISTRY

    spec = REGISTRY.get(str(e.get("mechanism")))
    return spec.guarantee_type if spec is not None else "metric"


def spent(e: dict[str, Any]) -> float | None:
    """What an entry's release spent in its type's unit (an entry without ``spent``: its ε)."""
    if "spent" in e:
        return e["spent"]
    return cost(guarantee_type(e), e["epsilon"], e.get("p"), e.get("draws"))


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


def by_guarantee_type(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sum per guarantee type, in that type's unit (``UNITS``), never across types: ``spent`` is
    null where a release has no finite bound (``unbounded``: a ``none`` mechanism), or where n is each
    document's token count (SynTF's documents without ``draws``)."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        kinds.setdefault(guarantee_type(e), []).append(e)
    out = []
    for kind, group in kinds.items():
        costs = [spent(e) for e in group]
        out.append(
            {
                "guarantee_type": kind,
                "unit": UNITS.get(kind, "sum of ε"),
                "spent": None if None in costs else sum(costs),
                "unbounded": kind == "none",
                "releases": len(group),
            }
        )
    return out


def epsilon_spent(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each released partition: what was spent on its records, at most, per guarantee type (the sum
    over every release that overlaps it; exact when the releases of a dataset all use one partition depth).

    ``epsilon_at_most`` (kept for the readers of earlier manifests, to be removed) is that one sum where
    every release is of one type with a finite bound, else null: ε is never added across types."""
    specs: list[dict[str, str] | None] = []
    for e in entries:
        if e["partition"] not in specs:
            specs.append(e["partition"])
    rows = []
    for s in specs:
        kinds = by_guarantee_type([e for e in entries if overlaps(e["partition"], s)])
        one = kinds[0] if len(kinds) == 1 else None
        rows.append(
            {
                "partition": spec_text(s),
                "by_guarantee_type": kinds,
                "epsilon_at_most": one["spent"] if one is not None else None,
                "releases": sum(k["releases"] for k in kinds),
            }
        )
    return rows


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
        # A release of a mechanism without a guarantee (type none) spends an unbounded budget.
        "unbounded": guarantee_type(entries[-1]) == "none",
    }
