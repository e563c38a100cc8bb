"""Privacy units: what one guarantee protects, and how a budget per unit is spread over its tokens.

Every mechanism guarantees something per token. A **privacy unit** groups tokens whose owner answers for
them together (docs/privacy-units.md):

- ``token``: each token alone (the mechanisms' own statement; the default);
- ``document``: one row, all the chosen text columns of that row together;
- ``column:NAME[@ID_SPACE]``: every row that shares the value of NAME (a person, an account); the id space
  (default: NAME) says which other releases count the same people.

A unit gets a **budget** E, spread over its tokens by the **allocation**:

- ``scale``: each token of a unit of n tokens is drawn at εᵢ = E/n, so that the unit's εᵢ add up to E;
- ``cap:K``: each token is drawn at εᵢ = E/K; the tokens after the K-th of a unit (in the unit's order:
  its rows as read, each row's text columns in the order given, each text's tokens left to right) are
  not drawn: released as the placeholder, or, with ``over_cap="refuse"``, the run is refused.

The allocation reads a unit's shape (how many tokens it has) and never its words: a weight that
depended on what a token says would give two neighbouring texts different noise scales, and the bound
below would fail. The shape is public anyway (the output keeps every row and every token's position), so
the guarantee is against replacing one unit's text by another text **of the same shape**; for the metric
types the unit's loss is Σᵢ εᵢ·d(xᵢ, x′ᵢ) ≤ E·D, D the diameter of the output vocabulary in the
mechanism's own metric (``unit_bound``).

Pure Python and numpy; nothing here sees raw text (lengths in, per-token ε out).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpspark import params
from dpspark.errors import ConfigError, InputDataError

UNIT_KINDS = ("token", "document", "column")
ALLOCATIONS = ("scale", "cap")
OVER_CAP = ("placeholder", "refuse")
# The prefix of a release's observed counts that describe its units' shape (``shape_of``'s keys; the manifest's
# ``counts`` leaves them out).
SHAPE = "shape_"

ALLOCATION_TEXT = {
    "scale": "each token of a unit of n tokens gets E/n",
    "cap": "each token gets E/K; a unit's tokens after the K-th are released as the placeholder",
}

ADJACENCY = {
    "token": "one token replaced by another (the mechanism's own guarantee, per token)",
    "document": "one row's text (all its chosen text columns) replaced by another of the same shape: the same "
    "rows, tokens per row and placeholder positions",
    "column": "the text of every row of one {column} replaced by other text of the same shape: the same rows, "
    "tokens per row and placeholder positions",
}


@dataclass(frozen=True)
class PrivacyUnit:
    """What one guarantee protects: ``kind`` (UNIT_KINDS), and for ``column`` the column NAME whose equal
    values make one unit and the id space they live in (default: NAME)."""

    kind: str = "token"
    column: str | None = None
    id_space: str | None = None

    @classmethod
    def parse(cls, text: Any) -> PrivacyUnit:
        """``token``, ``document``, ``column:NAME`` or ``column:NAME@ID_SPACE`` (a PrivacyUnit passes)."""
        if isinstance(text, PrivacyUnit):
            return text
        if text is None or text == "":
            return cls()
        raw = str(text).strip()
        kind, _, rest = raw.partition(":")
        if kind in ("token", "document") and not rest:
            return cls(kind)
        if kind == "column":
            name, _, space = rest.partition("@")
            if not name.strip() or ("@" in rest and not space.strip()):
                raise ConfigError(
                    f"privacy unit {raw!r} names no column{' or no id space' if '@' in rest else ''}: give "
                    "column:NAME (the column whose equal values are one unit, e.g. column:user_id) or "
                    "column:NAME@ID_SPACE"
                )
            return cls("column", name.strip(), (space.strip() or name.strip()))
        raise ConfigError(
            f"unknown privacy unit {raw!r}: give token (each token alone, the default), document (one row) or "
            "column:NAME[@ID_SPACE] (every row that shares NAME's value, e.g. column:user_id)"
        )

    @property
    def is_token(self) -> bool:
        return self.kind == "token"

    def label(self) -> str:
        """The unit as ``parse`` reads it back."""
        if self.kind != "column":
            return self.kind
        return f"column:{self.column}" + (f"@{self.id_space}" if self.id_space != self.column else "")

    def adjacency(self) -> str:
        """The neighbouring inputs the guarantee compares, in a sentence (the manifest's ``adjacency``)."""
        return ADJACENCY[self.kind].format(column=f"value of {self.column}")

    def fields(self) -> dict[str, Any]:
        """The manifest's ``privacy_unit``."""
        return {"kind": self.kind, "column": self.column, "id_space": self.id_space}


@dataclass(frozen=True)
class Allocation:
    """How a unit's budget E is spread over its tokens: ``scale`` (E/n each) or ``cap`` (E/K each, the tokens
    after the K-th released as the placeholder, or the run refused: ``over_cap``)."""

    kind: str = "scale"
    cap: int | None = None
    over_cap: str = "placeholder"

    @classmethod
    def parse(cls, text: Any, over_cap: str | None = None) -> Allocation:
        """``scale`` or ``cap:K`` (K a positive integer); ``over_cap`` one of OVER_CAP."""
        if isinstance(text, Allocation):
            return text if over_cap is None else cls(text.kind, text.cap, over_cap)
        over = over_cap or "placeholder"
        if over not in OVER_CAP:
            raise ConfigError(
                f"over-cap {over!r} is not one of {', '.join(OVER_CAP)}: placeholder releases a unit's tokens after "
                "the K-th as the placeholder, refuse refuses the run naming how many units exceed K"
            )
        raw = "scale" if text is None or text == "" else str(text).strip()
        if raw == "scale":
            return cls("scale", None, over)
        kind, _, k = raw.partition(":")
        if kind == "cap":
            try:
                cap = int(k)
            except ValueError:
                cap = 0
            if cap >= 1 and str(cap) == k.strip():
                return cls("cap", cap, over)
            raise ConfigError(
                f"allocation {raw!r}: the cap must be a positive whole number of tokens per unit, e.g. cap:50 "
                "(each token then gets the unit budget / 50)"
            )
        raise ConfigError(
            f"unknown allocation {raw!r}: give scale (each token of a unit of n tokens gets budget / n, the default) "
            "or cap:K (each token gets budget / K, the tokens after the K-th released as the placeholder)"
        )

    def label(self) -> str:
        return "scale" if self.kind == "scale" else f"cap:{self.cap}"

    def fields(self) -> dict[str, Any]:
        """The manifest's ``allocation``."""
        return {"kind": self.kind, "cap": self.cap, "over_cap": self.over_cap if self.kind == "cap" else None}


def check_unit_budget(value: Any) -> float:
    """E > 0 and finite (the unit's budget, in the mechanism's own ε unit)."""
    return params.number("unit budget", value, "a positive finite number", lambda x: math.isfinite(x) and x > 0)


# A part of a unit (``allocate``'s ``within``): per entry, its unit's tokens in all and those before it.
Within = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Allocated:
    """The allocation of a batch of units, token by token in unit order (unit 0's tokens, then unit 1's, …):
    ``epsilons`` (εᵢ of each drawn token; NaN where a token is over the cap) and ``drawn`` (whether the
    token is drawn by the mechanism; False: over the cap, released as the placeholder)."""

    epsilons: np.ndarray
    drawn: np.ndarray


def over_cap_units(lengths: np.ndarray, allocation: Allocation) -> int:
    """How many units have more tokens than the cap (0 under ``scale``)."""
    if allocation.kind != "cap":
        return 0
    return int((np.asarray(lengths, dtype=np.int64) > allocation.cap).sum())


def over_cap_counts(tokens: np.ndarray, cap: int) -> tuple[int, int]:
    """Of rows with ``tokens`` each (document units): how many hold more than ``cap``, and the most any holds
    (``refuse_over_cap``'s figures; partials add, and take the max)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    return int((tokens > cap).sum()), int(tokens.max(initial=0))


def refuse_over_cap(over: int, longest: int, allocation: Allocation) -> None:
    """``--over-cap refuse``: a ConfigError naming how many units exceed the cap (none: nothing)."""
    if over:
        k = int(allocation.cap)  # type: ignore[arg-type]
        raise ConfigError(
            f"{over:,} unit(s) hold more than the cap of {k:,} tokens (the longest {longest:,}); with --over-cap "
            f"refuse nothing is released: raise the cap, or let the tokens after the {k:,}th of a unit be released "
            "as the placeholder (--over-cap placeholder)"
        )


def check_units(totals: np.ndarray, budget: float, allocation: Allocation) -> None:
    """The refusals ``allocate`` would make, from the units' token counts alone (``totals``: one per unit):
    a unit over the cap under ``over_cap="refuse"``, or a per-token ε below the smallest any mechanism takes.
    The driver runs it before a release draws anything."""
    totals = np.asarray(totals, dtype=np.int64)
    if allocation.kind == "cap":
        k = int(allocation.cap)  # type: ignore[arg-type]
        if allocation.over_cap == "refuse":
            refuse_over_cap(over_cap_units(totals, allocation), int(totals.max(initial=0)), allocation)
        _check_smallest(budget / k, k, budget)
    elif totals.any():
        _check_smallest(budget / int(totals.max()), int(totals.max()), budget)


def allocate(lengths: np.ndarray, budget: float, allocation: Allocation, within: Within | None = None) -> Allocated:
    """Each token's ε for ``lengths`` tokens (one entry per unit, or per part of a unit: ``within``) at budget E:
    see the module docstring. A per-token ε below the smallest the mechanisms accept (``params.MIN_EPSILON``)
    is refused, naming the unit's length and the fix; so is a unit over the cap under ``over_cap="refuse"``.

    ``within``: each entry is a part (a row) of a larger unit (a ``column:`` unit's person): its unit's tokens
    in all and how many of them come before it, in the unit's order (``dpspark.unit_table``). None: each
    entry is a whole unit (a document)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    budget = check_unit_budget(budget)
    totals, before = (lengths, np.zeros_like(lengths)) if within is None else within
    totals, before = np.asarray(totals, dtype=np.int64), np.asarray(before, dtype=np.int64)
    if np.any(before + lengths > totals):
        raise ValueError("a part of a unit holds more tokens than its unit")
    total = int(lengths.sum())
    if allocation.kind == "cap":
        k = int(allocation.cap)  # type: ignore[arg-type]
        if allocation.over_cap == "refuse":
            refuse_over_cap(over_cap_units(totals, allocation), int(totals.max(initial=0)), allocation)
        per = budget / k
        _check_smallest(per, k, budget)
        position = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths - before, lengths)
        drawn = position < k
        eps = np.where(drawn, per, np.nan)
        return Allocated(eps, drawn)
    if total:
        most = int(totals[lengths > 0].max())
        _check_smallest(budget / most, most, budget)
    safe = np.maximum(totals, 1)
    return Allocated(np.repeat(budget / safe, lengths).astype(np.float64), np.ones(total, dtype=bool))


def allocate_rows(
    lengths: Sequence[np.ndarray],
    budget: float,
    allocation: Allocation,
    within: Callable[[np.ndarray], Within] | None = None,
) -> list[Allocated]:
    """Units over a batch's text columns: ``lengths[c][r]`` tokens of row r in column c (one array per column,
    in the order the columns are given). Each row is one unit (a document), or with ``within`` a part of one
    (``within(tokens per row)`` gives each row's unit total and the unit's tokens before it: a ``column:``
    unit); tokens in unit order row by row, a row's columns in order. Returns each column's allocation in that
    column's own token order (what ``TextPerturber.perturb_array`` takes)."""
    table = np.stack([np.asarray(x, dtype=np.int64) for x in lengths], axis=1)  # rows × columns
    per_row = table.sum(axis=1)
    allocated = allocate(per_row, budget, allocation, None if within is None else within(per_row))
    starts = (np.cumsum(table.ravel()) - table.ravel()).reshape(table.shape)  # where (r, c) begins, unit order
    out = []
    for c in range(table.shape[1]):
        n = table[:, c]
        inside = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        at = np.repeat(starts[:, c], n) + inside
        out.append(Allocated(allocated.epsilons[at], allocated.drawn[at]))
    return out


def _check_smallest(per_token: float, tokens: int, budget: float) -> None:
    if per_token < params.MIN_EPSILON:
        raise ConfigError(
            f"a unit of {tokens:,} tokens at a unit budget of {budget:g} gives each token epsilon {per_token:.3g}, "
            f"below the smallest any mechanism takes ({params.MIN_EPSILON:g}: the output would no longer depend on "
            "the text): raise --unit-budget, or cap the tokens per unit (--allocation cap:K)"
        )


def shape_counts(rows: int, shape: dict[str, int], budget: float, allocation: Allocation) -> dict[str, Any]:
    """The manifest's ``unit_counts`` of a release of document units, from its output's shape (``shape``: units
    with a token, the fewest, median and most tokens per such unit, and under a cap the tokens over it): the
    tokens per unit, and the ε a token got (min, max, and the median unit's). Shapes only: nothing here depends
    on a token's word."""
    units_ = int(shape.get("units", 0))
    low, mid, high = (int(shape.get(k) or 0) for k in ("min", "median", "max"))
    if allocation.kind == "cap":
        k = int(allocation.cap)  # type: ignore[arg-type]
        eps = {"min": budget / k, "median_unit": budget / k, "max": budget / k}
    else:
        eps = {"min": budget / high, "median_unit": budget / mid, "max": budget / low} if units_ else None
    return {
        "units": int(rows),
        "units_with_tokens": units_,
        "tokens_per_unit": {"min": low, "median": mid, "max": high} if units_ else None,
        "tokens_over_cap": int(shape.get("over_cap", 0)),
        "token_epsilon": eps if units_ else None,
    }


def shape_of(lengths: dict[int, int], allocation: Allocation) -> dict[str, int]:
    """``shape_counts``'s shape from a text's tokens per unit (``lengths``: tokens → units): the units with a
    token, the fewest, median (the smallest n with at least half of them at or below it, as Spark's
    percentile_approx gives it) and most tokens of such a unit, and under a cap the tokens over it."""
    held = sorted((n, k) for n, k in lengths.items() if n > 0 and k > 0)
    units_ = sum(k for _, k in held)
    shape = {"units": units_, "over_cap": 0}
    if not units_:
        return shape
    seen, median = 0, held[-1][0]
    for n, k in held:
        seen += k
        if 2 * seen >= units_:
            median = n
            break
    shape.update(min=held[0][0], median=median, max=held[-1][0])
    if allocation.kind == "cap":
        shape["over_cap"] = sum(max(n - int(allocation.cap), 0) * k for n, k in held)  # type: ignore[arg-type]
    return shape


def unit_bound(
    guarantee_type: str, budget: float, diameter: float | None, *, p: float | None = None, tokens: int | None = None
) -> dict[str, Any]:
    """The unit's bound for a guarantee type (mechanisms.md's types): metric and rank E·D (D the output
    vocabulary's diameter in the mechanism's own metric); pure, group and document E; umldp E·D plus ln(1/p)
    per token of the unit (``tokens``: the longest unit's tokens, or the cap); none: refused."""
    budget = check_unit_budget(budget)
    if guarantee_type in ("metric", "rank", "umldp"):
        if diameter is None or not math.isfinite(diameter):
            raise ConfigError(f"the {guarantee_type} bound of a unit needs the output vocabulary's diameter")
        bound = budget * diameter
        how = "the sum over the unit's tokens of epsilon_i times d(x_i, x'_i), at most E * D"
        if guarantee_type == "umldp":
            if p is None or tokens is None:
                raise ConfigError("the umldp bound of a unit needs p and the unit's tokens")
            bound += tokens * math.log(1.0 / p)
            how += f" plus ln(1/p) for each of its at most {tokens} drawn tokens, for outputs in the protected set"
        out = {"type": guarantee_type, "budget": budget, "diameter": float(diameter), "bound": bound}
        return {**out, "how": how + (", D in list positions" if guarantee_type == "rank" else "")}
    if guarantee_type in ("pure", "group", "document"):
        how = "the unit's epsilon_i add up to at most E" + (
            " (between words of one output group; words of different groups are distinguishable)"
            if guarantee_type == "group"
            else ""
        )
        return {"type": guarantee_type, "budget": budget, "diameter": None, "bound": budget, "how": how}
    raise ConfigError(
        f"a mechanism of guarantee type {guarantee_type!r} states no bound dpspark can spread over a unit: use the "
        "token unit (--privacy-unit token) or another mechanism"
    )


def check_unit_column(kinds: dict[str, str], nested: set[str], unit: PrivacyUnit) -> None:
    """A ``column:`` unit's id column exists and holds one value per row (``kinds``: every input column's type as
    the engine names it; ``nested``: the array, map and struct columns, which it must not be)."""
    if unit.kind != "column":
        return
    if unit.column not in kinds:
        raise InputDataError(
            f"the unit column {unit.column!r} (--privacy-unit {unit.label()}) is not in the input; available "
            f"columns: {', '.join(kinds)}"
        )
    if unit.column in nested:
        raise InputDataError(
            f"the unit column {unit.column!r} has type {kinds[unit.column]}: a unit's id is one value per row (a "
            "string, a number or a date); choose a scalar id column, or derive one first (e.g. a struct's field)"
        )


def refuse_null_ids(nulls: int, unit: PrivacyUnit) -> None:
    """A ``column:`` unit's rows without an id: refused, naming how many (a null is no person)."""
    if nulls:
        name = unit.column
        raise InputDataError(
            f"{nulls:,} row(s) have no {name} (null): a row without an id belongs to no unit, and its tokens would "
            f"share no budget; drop or fill them first (e.g. a view WHERE {name} IS NOT NULL), or use "
            "--privacy-unit document"
        )
