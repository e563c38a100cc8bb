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

**One sum per guarantee type and unit.** ε of different guarantee types is not one scale
(``dpspark.mechanisms.base.GUARANTEE_TYPES``), and within a type ε per unit of one metric is not ε
per unit of another: ε = 10 of the regularized Mahalanobis norm at λ = 1 may be worth 145 per unit
of Euclidean distance. So each entry records its ``guarantee_type``, the exact ``unit`` of its bound
(``MechanismSpec.bound_unit``: the metric and its parameters, the digests of the embedding or the
vocabulary that define it, CusText's grouping, ...) and what the release ``spent`` in it (``cost``),
and the sums are per (type, unit), never across: the metric bound Σε (metric, and likewise the
group, pure and rank types in their own ε), Σ(ε + ln(1/p)) for UMLDP (SanText+), Σ n·ε per document
for SynTF's documents (n its ``draws``), and no bound at all for a mechanism of type ``none``: such a
release spends an unbounded budget. Where a unit converts to another with a stated factor (the
regularized Mahalanobis norm's Euclidean bound, Xu et al.'s Lemma 2), the entry records the factor
(``converted``) and the summary adds the converted total beside the per-unit sums, saying how.

An entry is checked against what its own fields imply when it is read (``parse_entry``): its type is
its mechanism's, ``spent`` is its ε's cost, the unit names the parameters the entry records, the
converted figure is ``spent`` times a factor of at least 1. One that disagrees is damaged (exit 8).

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


def unit_cost(guarantee_type: str, budget: float, p: float | None = None, tokens: int | None = None) -> float | None:
    """What a release under a privacy unit other than the token spends per unit (``dpspark.units``): its
    budget E (for the metric types, per unit of distance: the bound is E·D), plus ln(1/p) per token of the
    unit for umldp (``tokens``: the longest unit's, or the cap; None where not known); None for ``none``."""
    if guarantee_type == "none":
        return None
    if guarantee_type == "umldp":
        if tokens is None:
            return None
        return float(budget) + int(tokens) * math.log(1.0 / float(p if p is not None else 1.0))
    return float(budget)


def _release_cost(
    kind: str, epsilon: float, p: float | None, draws: int | None, fields: dict[str, Any]
) -> float | None:
    """What a release of these ``fields`` spends: ``unit_cost`` of its budget under a privacy unit other than the
    token (``epsilon`` is then E), else ``cost`` of its ε."""
    if privacy_unit_of(fields) is not None:
        return unit_cost(kind, epsilon, p, fields.get("unit_tokens"))
    return cost(kind, epsilon, p, draws)


def privacy_unit_of(e: dict[str, Any]) -> dict[str, Any] | None:
    """An entry's privacy unit (``dpspark.units.PrivacyUnit.fields``): None for the token, the unit of every
    entry written before units were recorded."""
    unit = e.get("privacy_unit")
    return unit if isinstance(unit, dict) and unit.get("kind") not in (None, "token") else None


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
    unit: dict[str, Any] | None = None,
    unit_text: str | None = None,
    conversion: tuple[dict[str, Any], str, float] | None = None,
    **extra,
) -> dict[str, Any]:
    """One release, as written to ``_dpspark_ledger/<run_id>.json``: with its guarantee type, the exact
    unit of its bound (``unit``, keyed; ``unit_text``, in words), what it ``spent`` in that unit
    (``cost``; null where unbounded), and, where its unit converts to another (``conversion``: the other
    unit, in words, and the factor), the converted figure. A unit whose ``protected`` set is the
    release's own (``"release"``) is named by the run: never summed with another release.

    A release under a privacy unit other than the token (``extra``'s ``privacy_unit``, ``unit_tokens``):
    ``epsilon`` is the unit's budget E, and ``spent`` is ``unit_cost``'s, per unit of that kind."""
    terms = {"p": p} if guarantee_type == "umldp" else {"draws": draws} if guarantee_type == "document" else {}
    spent_ = _release_cost(guarantee_type, epsilon, p, draws, extra)
    unit = dict(unit) if unit is not None else None
    if unit is not None and unit.get("protected") == "release":
        unit["protected"] = f"release {run_id}"
    out = {
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        "partition": spec,
        "epsilon": float(epsilon),
        "mechanism": mechanism,
        "finished_at": finished_at,
        "rerelease": bool(rerelease),
        "guarantee_type": guarantee_type,
        **terms,
        "spent": spent_,
        **extra,
    }
    if unit is not None:
        out["unit"], out["unit_text"] = unit, unit_text or UNITS.get(guarantee_type, "sum of ε")
    if conversion is not None and spent_ is not None:
        other, other_text, factor = conversion
        out["converted"] = {"unit": other, "unit_text": other_text, "factor": factor, "spent": spent_ * factor}
    return out


def guarantee_type(e: dict[str, Any]) -> str:
    """An entry's guarantee type; an entry written before entries recorded it: its mechanism's (metric
    for the noise mechanisms and release-vectors, the only ones then)."""
    if isinstance(e.get("guarantee_type"), str):
        return e["guarantee_type"]
    return mechanism_type(str(e.get("mechanism")))


def mechanism_type(mechanism: str) -> str:
    """The guarantee type a mechanism's releases carry (release-vectors' privemb and m1: metric)."""
    from dpspark.mechanisms import REGISTRY

    spec = REGISTRY.get(mechanism)
    return spec.guarantee_type if spec is not None else "metric"


# Mechanisms whose unit has parameters that entries written before units were recorded do not hold:
# each such entry is its own unit (never summed), where the others share one per mechanism.
_PARAMETRISED = ("mahalanobis", "vickrey", "custext", "custext-plus", "santext-plus", "1-diffractor")


def unit_of(e: dict[str, Any]) -> dict[str, Any]:
    """The exact unit of an entry's bound (``MechanismSpec.bound_unit``). An entry written before units
    were recorded: its mechanism's, the embedding not recorded, and its own where the mechanism's unit has
    parameters the entry does not hold."""
    if isinstance(e.get("unit"), dict):
        return e["unit"]
    unit: dict[str, Any] = {"recorded": False, "mechanism": str(e.get("mechanism"))}
    if unit["mechanism"] in _PARAMETRISED:
        unit["release"] = str(e.get("run_id"))
    return unit


def _unit_text(e: dict[str, Any]) -> str:
    kind = guarantee_type(e)
    if isinstance(e.get("unit_text"), str):
        return e["unit_text"]
    return f"{UNITS.get(kind, 'sum of ε')} ({e.get('mechanism')}; unit not recorded: an entry of an earlier version)"


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
    bad_eps = isinstance(data, dict) and not _number(data.get("epsilon"))
    if missing or bad_spec or bad_eps:
        what = f"misses {', '.join(missing)}" if missing else "has a malformed partition or epsilon"
        raise LedgerError(f"ledger entry {name} {what}: {_DAMAGED}")
    wrong = disagreement(data)
    if wrong:
        raise LedgerError(f"ledger entry {name} {wrong}: {_DAMAGED}")
    return data


_DAMAGED = (
    "the record of which records were released is damaged; restore it from a backup (dpspark never rewrites "
    "ledger entries)"
)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _close(a: Any, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return _number(a) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def disagreement(e: dict[str, Any]) -> str | None:
    """What in an entry contradicts its own fields (None: nothing): a guarantee type that is not its
    mechanism's, a ``spent`` that is not its ε's cost, a unit that names other parameters than the entry
    records, a converted figure that is not ``spent`` times a factor of at least 1."""
    kind = e.get("guarantee_type", guarantee_type(e))
    if kind not in UNITS:
        return f"has an unknown guarantee_type {kind!r} (one of {', '.join(UNITS)})"
    if kind != mechanism_type(str(e["mechanism"])):
        return (
            f"says guarantee_type {kind!r}, but {e['mechanism']} releases are {mechanism_type(str(e['mechanism']))!r}"
        )
    if e["epsilon"] <= 0:
        return f"has epsilon {e['epsilon']!r}, not a positive number"
    if "delta" in e and not (_number(e["delta"]) and 0 <= e["delta"] < 1):
        return f"has delta {e['delta']!r}, not a number in [0, 1)"
    if "spent" in e and not _close(e["spent"], _expected_cost(e, kind)):
        return f"says spent {e['spent']!r}, but epsilon {e['epsilon']:g} costs {_expected_cost(e, kind)!r} in its unit"
    return _unit_disagreement(e)


def _expected_cost(e: dict[str, Any], kind: str) -> float | None:
    p, draws = e.get("p"), e.get("draws")
    if (kind == "umldp" and not (_number(p) and 0 < p <= 1)) or (draws is not None and not _number(draws)):
        return math.nan  # a malformed p or draws: no spent agrees with it
    tokens = e.get("unit_tokens")
    if privacy_unit_of(e) is not None and tokens is not None and not (_number(tokens) and tokens >= 0):
        return math.nan
    return _release_cost(kind, e["epsilon"], p, draws, e)


def _unit_disagreement(e: dict[str, Any]) -> str | None:
    unit, params = e.get("unit"), e.get("parameters")
    if "unit" in e and not (isinstance(unit, dict) and all(isinstance(k, str) for k in unit)):
        return "has a malformed unit"
    if isinstance(unit, dict) and isinstance(params, dict):
        for key in unit.keys() & params.keys():
            if unit[key] != params[key]:
                return f"names {key} = {unit[key]!r} in its unit, but {params[key]!r} in its parameters"
    conv = e.get("converted")
    if conv is None:
        return None
    ok = (
        isinstance(conv, dict)
        and isinstance(conv.get("unit"), dict)
        and _number(conv.get("factor"))
        and conv["factor"] >= 1.0
        and _close(conv.get("spent"), None if e.get("spent") is None else e["spent"] * conv["factor"])
    )
    return None if ok else "has a converted figure that is not its spent times a factor of at least 1"


def overlapping(entries: list[dict[str, Any]], spec: dict[str, str] | None) -> list[dict[str, Any]]:
    """The earlier releases whose records intersect ``spec``'s, oldest first."""
    return sorted((e for e in entries if overlaps(e["partition"], spec)), key=lambda e: e["finished_at"])


def _key(unit: dict[str, Any]) -> str:
    return json.dumps(unit, sort_keys=True, ensure_ascii=False)


def _sum_key(unit: dict[str, Any], privacy_unit: dict[str, Any] | None) -> str:
    """What releases must share to be summed: the unit of the bound, and for a privacy unit other than the
    token its kind and id space (a token release and a document release of the same records are two rows)."""
    if privacy_unit is None:
        return _key(unit)
    shared = {"kind": privacy_unit["kind"], "id_space": privacy_unit.get("id_space")}
    return _key({"bound": unit, "privacy_unit": shared})


def counts_for(e: dict[str, Any], spec: dict[str, str] | None) -> bool:
    """Whether release ``e`` spent budget on the units of the records ``spec`` selects. A token or document
    release: where its records intersect ``spec``'s (``overlaps``). A ``column:NAME`` release: every record of
    a person may be in any partition, so it counts everywhere, unless both partitions fix NAME itself to
    different values."""
    unit = privacy_unit_of(e)
    if unit is None or unit["kind"] != "column":
        return overlaps(e["partition"], spec)
    name = unit["column"]
    mine = {k: v for k, v in (e["partition"] or {}).items() if k == name}
    theirs = {k: v for k, v in (spec or {}).items() if k == name}
    return overlaps(mine, theirs)


def by_guarantee_type(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One sum per guarantee type and exact unit (``unit_of``), never across: ``spent`` in the unit
    named by ``unit`` (in words) and ``exact_unit`` (keyed), null where a release has no finite bound
    (``unbounded``: a ``none`` mechanism), or where n is each document's token count (SynTF's
    documents without ``draws``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        groups.setdefault((guarantee_type(e), _sum_key(unit_of(e), privacy_unit_of(e))), []).append(e)
    out = []
    for (kind, _), group in groups.items():
        costs = [spent(e) for e in group]
        row = {
            "guarantee_type": kind,
            "unit": _unit_text(group[-1]),
            "exact_unit": unit_of(group[-1]),
            "spent": None if None in costs else sum(costs),
            "unbounded": kind == "none",
            "releases": len(group),
        }
        if privacy_unit_of(group[-1]) is not None:  # spent per unit of that kind (E per document, per person)
            row["privacy_unit"] = privacy_unit_of(group[-1])
        if any("delta" in e for e in group):  # PrivEmb's (ε, δ): the δ add up too
            row["delta_spent"] = sum(float(e.get("delta", 0.0)) for e in group)
        out.append(row)
    return out


def converted(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The totals in a unit that other units convert to with a stated factor (``entry``'s ``converted``):
    the releases of that unit as spent, plus each converted release's ``spent`` times its factor; one row
    per target unit that at least one release converts to. The releases of other units are not in it."""
    targets: dict[str, dict[str, Any]] = {}
    for e in entries:
        conv = e.get("converted")
        if isinstance(conv, dict) and conv.get("spent") is not None:
            row = targets.setdefault(
                _sum_key(conv["unit"], privacy_unit_of(e)),
                {"guarantee_type": guarantee_type(e), "unit": conv["unit_text"], "exact_unit": conv["unit"]},
            )
            row.setdefault("converted", []).append(e)
    out = []
    for key, row in targets.items():
        native = [
            e
            for e in entries
            if _sum_key(unit_of(e), privacy_unit_of(e)) == key and guarantee_type(e) == row["guarantee_type"]
        ]
        figures = [spent(e) for e in native] + [e["converted"]["spent"] for e in row["converted"]]
        out.append(
            {
                "guarantee_type": row["guarantee_type"],
                "unit": row["unit"],
                "exact_unit": row["exact_unit"],
                "spent_at_most": None if None in figures else sum(figures),
                "releases": len(figures),
                "how": (
                    f"{len(native)} release(s) in this unit as spent, plus {len(row['converted'])} converted: "
                    "each one's spent times its stated factor (the regularized Mahalanobis norm's Euclidean bound, "
                    "1/sqrt(λ·ξ_min + 1 − λ), Xu et al. Lemma 2)"
                ),
            }
        )
    return out


def epsilon_spent(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each released partition: what was spent on its records, at most, per guarantee type and unit
    (the sum over every release that overlaps it; exact when the releases of a dataset all use one
    partition depth), and the converted totals (``converted``) where a unit converts to another.

    ``epsilon_at_most`` (kept for the readers of earlier manifests, to be removed) is that one sum where
    every release is of one type and one unit with a finite bound, per token, else null: ε is never added
    across types or units, and a budget per document or person is not an ε per token."""
    specs: list[dict[str, str] | None] = []
    for e in entries:
        if e["partition"] not in specs:
            specs.append(e["partition"])
    rows = []
    for s in specs:
        overlapping_ = [e for e in entries if counts_for(e, s)]
        kinds = by_guarantee_type(overlapping_)
        one = kinds[0] if len(kinds) == 1 and "privacy_unit" not in kinds[0] else None  # ε per token only
        rows.append(
            {
                "partition": spec_text(s),
                "by_guarantee_type": kinds,
                "converted": converted(overlapping_),
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
        # A release of a mechanism without a guarantee (type none) spends an unbounded budget: once one is
        # in the ledger, the output's budget is unbounded, whatever came after it.
        "unbounded": any(guarantee_type(e) == "none" for e in entries),
        "this_release_unbounded": guarantee_type(entries[-1]) == "none",
    }
