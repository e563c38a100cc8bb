"""The plausible-deniability statistics Nw and Sw as a combiner (``dpspark.engine``).

Feyisetan et al. (2020) §3.2: run the mechanism K times on a word w; Nw = #{runs with output w},
Sw = #{distinct outputs}. The work comes in items (``dpspark.stats.WorkItem``: a setting, a chunk
of words, a block of runs); item i draws its noise from ``batch_generator(job key, i, 0)``, so any
backend, any split and any merge order give the same counts for the same key.

- ``create(item)``: the item's ((setting, w, ŵ) → count) pairs;
- ``merge(a, b)``: the pairs of both, counts added;
- ``finish(pairs)``: ((setting, w) → (Nw, Sw, runs)).

A backend that keys its reduction (Spark's ``reduceByKey``) folds ``finish`` in two keyed steps:
``word_partial`` maps one pair to its word's (Nw, Sw, runs) share and ``merge_word`` adds shares.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dpspark.engine import fold
from dpspark.rng import batch_generator

Pairs = dict[tuple[int, int, int], int]
WordFigures = tuple[int, int, int]


def create(item: Any, job_key: bytes, mechanisms: Sequence[Any]) -> Pairs:
    """Draw one item: ((setting, word row, output row) → count).

    All K·n draws of the item are one call of the mechanism's ``sample_copies`` (the noise
    family: each word's K noisy copies are one batch of queries for the blocked exact search;
    the exponential family: one distance row per word).
    """
    mech = mechanisms[item.setting]
    rows = np.asarray(item.rows, dtype=np.int64)
    rng = batch_generator(job_key, item.item, 0)
    out = mech.vocab_rows[mech.sample_copies(rows, item.runs, rng).ravel()]
    src = np.repeat(rows, item.runs)
    pairs, counts = np.unique(np.stack([src, out]), axis=1, return_counts=True)
    return {(item.setting, int(w), int(o)): int(c) for (w, o), c in zip(pairs.T, counts)}


def merge(a: Pairs, b: Pairs) -> Pairs:
    """The counts of both (``a`` is updated and returned: a fold's partials are its own)."""
    for key, count in b.items():
        a[key] = a.get(key, 0) + count
    return a


def word_partial(pair: tuple[int, int, int], count: int) -> tuple[tuple[int, int], WordFigures]:
    """One (setting, w, ŵ) pair's share of its word's figures: (Nw, Sw, runs)."""
    s, w, o = pair
    return (s, w), (count if o == w else 0, 1, count)


def merge_word(a: WordFigures, b: WordFigures) -> WordFigures:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def finish(pairs: Pairs) -> dict[tuple[int, int], WordFigures]:
    """((setting, w, ŵ) → count) to ((setting, w) → (Nw, Sw, runs))."""
    result: dict[tuple[int, int], WordFigures] = {}
    for pair, count in pairs.items():
        key, share = word_partial(pair, count)
        result[key] = merge_word(result[key], share) if key in result else share
    return result


def counts(items: Iterable[Any], job_key: bytes, mechanisms: Sequence[Any]) -> Pairs:
    """The local fold of ``create`` and ``merge``: the reference of every backend."""
    return fold(items, lambda it: create(it, job_key, mechanisms), merge).get(None, {})
