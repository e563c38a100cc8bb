"""The Nw/Sw combiner (``dpspark.engine.nw_sw``) without a JVM: any grouping of the items and any merge
order give the counts of one pass, and ``finish`` is Feyisetan et al.'s Nw and Sw of the raw draws."""

from __future__ import annotations

import random
from functools import reduce

import numpy as np
import pytest

from dpspark.engine import nw_sw
from dpspark.mechanisms import Space, parse
from dpspark.rng import batch_generator
from dpspark.stats import plan

# runtime: numpy's unique and the mechanisms' sampling differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

KEY = b"\x07" * 16


@pytest.fixture(scope="module")
def grid(glove):
    space = Space(glove.vectors, np.arange(1500))
    specs = [parse({"name": "tem", "epsilon": 3.0}), parse({"name": "laplace", "epsilon": 12.0})]
    return specs, [s.build(space) for s in specs]


def test_finish_counts_survivals_and_distinct_outputs():
    pairs = {(0, 7, 7): 5, (0, 7, 3): 2, (0, 7, 9): 3, (0, 3, 9): 10, (1, 3, 3): 4}
    assert nw_sw.finish(pairs) == {(0, 7): (5, 3, 10), (0, 3): (0, 1, 10), (1, 3): (4, 1, 4)}
    # the keyed two-step form a reduceByKey backend uses gives the same figures
    shares: dict = {}
    for pair, count in pairs.items():
        key, share = nw_sw.word_partial(pair, count)
        shares[key] = nw_sw.merge_word(shares[key], share) if key in shares else share
    assert shares == nw_sw.finish(pairs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_grouping_and_merge_order_gives_the_one_pass_counts(grid, seed):
    specs, mechs = grid
    items = plan(specs, np.arange(0, 1500, 37), runs=12, words_per_item=8, runs_per_item=5)
    want = nw_sw.counts(items, KEY, mechs)
    parts = [nw_sw.create(it, KEY, mechs) for it in items]
    random.Random(seed).shuffle(parts)
    cut = random.Random(seed + 10).randrange(1, len(parts))  # two "partitions", each folded, then merged
    left, right = reduce(nw_sw.merge, parts[:cut]), reduce(nw_sw.merge, parts[cut:])
    assert nw_sw.merge(right, left) == want
    assert sum(want.values()) == len(specs) * 41 * 12  # every draw counted once


def test_finish_is_nw_and_sw_of_the_raw_draws(grid):
    """Item by item, the draws redone from the item's key (``batch_generator(key, item, 0)``) give the
    same Nw and Sw as the combiner: it neither loses nor invents a draw."""
    specs, mechs = grid
    rows = np.arange(0, 1500, 150)
    items = plan(specs, rows, runs=20, words_per_item=4, runs_per_item=7)
    got = nw_sw.finish(nw_sw.counts(items, KEY, mechs))
    outputs: dict = {}
    for it in items:
        mech = mechs[it.setting]
        r = np.asarray(it.rows, dtype=np.int64)
        out = mech.vocab_rows[mech.sample_copies(r, it.runs, batch_generator(KEY, it.item, 0))]
        for w, o in zip(r, out):
            outputs.setdefault((it.setting, int(w)), []).extend(int(x) for x in o)
    want = {k: (v.count(k[1]), len(set(v)), len(v)) for k, v in outputs.items()}
    assert got == want
    assert all(runs == 20 for _, _, runs in got.values())
    # TEM at ε = 3 moves words; the Laplace mechanism at ε = 12 keeps most of them
    nw = {s: np.mean([v[0] for k, v in got.items() if k[0] == s]) for s in (0, 1)}
    assert nw[0] < nw[1]
