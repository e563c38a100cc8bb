"""How tables, legends and result files name a setting, and the columns and flags that carry it: what every
mechanism shares, with no family imported (``dpspark.mechanisms`` re-exports it).

A setting's label is its mechanism's name, then each of its grid axes as ``symbol=value`` in the axis
columns' order (``axis_order``): ``mahalanobis λ=0.5``, ``tem β=0.001 γ=2``; a mechanism may say it
otherwise (``MechanismSpec.label_of``: the Laplace mechanism is ``laplace``, its λ fixed at 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# How labels and plots write an axis (the others by their names).
SYMBOLS = {"lambda": "λ", "beta": "β", "gamma": "γ", "position_gamma": "γ_pos"}
# The axis columns of the first mechanisms keep their places; later mechanisms' axes follow, in registry order.
FIRST_AXES = ("lambda", "beta", "gamma", "t")

# The grid commands' flag of the noise family's λ grid (``--lambdas``; ``--grid lambda=…`` says the same).
LEGACY_GRID_FIELDS = ("lambdas",)
# Result tables written before the setting and mechanism columns name their rows by λ alone.
LEGACY_COLUMN = "lambda"
# The columns a result row's setting is read from (``series_of_row``: the first present).
SETTING_COLUMNS = ("setting", LEGACY_COLUMN)


def show(value: Any) -> str:
    """An axis value as labels write it: numbers with ``:g``, words as they are."""
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def axis_order(names: Iterable[str]) -> list[str]:
    """``names`` (each once) in the axis columns' order: ``FIRST_AXES`` first, then the others as given."""
    names = list(dict.fromkeys(names))
    first = [n for n in FIRST_AXES if n in names]
    return first + [n for n in names if n not in first]


def series_label(mechanism: str, axes: dict[str, Any]) -> str:
    """A setting without its ε: ``mechanism`` then each axis that has a value (not None), in the order given."""
    return " ".join([mechanism, *(f"{SYMBOLS.get(k, k)}={show(v)}" for k, v in axes.items() if v is not None)])
