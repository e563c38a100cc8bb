"""Pure engines: what a command computes, as combiners any backend can fold.

An engine is plain Python and numpy, tested without a JVM. Its work comes in independent
*items* (a setting and a span of corpus words, a block of runs, ...), and its state in
*partials* that are combined in any order:

- ``create(item) -> partial``: the work of one item, run where the data is (a Spark executor,
  a thread, this process);
- ``merge(a, b) -> partial``: two partials of the same key as one (associative and
  commutative, so a backend may reduce them in any tree);
- ``finish(partial) -> result``: the figures, on the driver.

``fold`` is the local backend, the reference every other backend must equal. The Spark
backend (``dpspark.spark``) ships what the items need, runs ``create`` on the executors,
merges by key and finishes on the driver.

The engines: ``nw_sw`` (privacy-stats' Nw and Sw), ``exact_attack`` (privacy-risk's and compare's
attacker with exact likelihoods), ``fitted_attack`` (the same attacker fitted on runs, where a state per
item, its pair counts, stays where it was drawn between the passes),
``classification`` (the utility commands' scores), ``logreg`` (their classifier: its objective's value and
gradient a sum over blocks of rows), and the field's
metrics as partial sums (``dpspark.evaluation.field_metrics``: ``*_partial``, ``combine``, ``finish``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from functools import reduce
from typing import Any, TypeVar

P = TypeVar("P")


def fold(
    items: Iterable[Any],
    create: Callable[[Any], P],
    merge: Callable[[P, P], P],
    key: Callable[[Any], Hashable] = lambda item: None,
) -> dict[Hashable, P]:
    """The local backend: every item's partial, merged per ``key(item)`` in the items' order."""
    partials: dict[Hashable, list[P]] = {}
    for item in items:
        partials.setdefault(key(item), []).append(create(item))
    return {k: reduce(merge, ps) for k, ps in partials.items()}
