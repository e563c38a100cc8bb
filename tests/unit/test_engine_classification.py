"""The classification combiner (``dpspark.engine.classification``) without a JVM: scikit-learn's figures, and
any split of the rows and any merge order give the one-pass figures bit for bit."""

from __future__ import annotations

import math
import random
from functools import reduce

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score

from dpspark.engine import classification as cl


def rows(seed: int, n: int, classes: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    p = np.where(rng.random(n) < 0.7, y, rng.integers(0, classes, n))
    s = np.round(np.clip(0.5 * (y == 1) + 0.6 * rng.random(n), 0, 1), 2) if classes == 2 else None  # many ties
    return y, p, s


@pytest.mark.parametrize("seed", range(4))
def test_binary_figures_are_scikit_learns(seed):
    y, p, s = rows(seed, 500, 2)
    got = cl.finish(cl.create(y, p, s), 2)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, p), abs=1e-15)
    assert got["precision"] == pytest.approx(precision_score(y, p, zero_division=0), abs=1e-15)
    assert got["recall"] == pytest.approx(recall_score(y, p), abs=1e-15)
    assert got["f1"] == pytest.approx(f1_score(y, p), abs=1e-15)
    assert got["auc"] == pytest.approx(roc_auc_score(y, s), abs=1e-15)
    assert got["macro_f1"] == pytest.approx(f1_score(y, p, average="macro", zero_division=0), abs=1e-15)


def test_the_majority_class_is_the_share_of_the_most_frequent_true_label():
    """Issue 39 (12): the reference a model that learned nothing scores, whatever it predicted: on SMS spam's
    shape (88.1% ham) a model predicting ham for every row has that accuracy and a macro-F1 of about 0.47."""
    y = np.array([0] * 133 + [1] * 18)
    always = np.zeros_like(y)
    got = cl.majority(cl.create(y, always))
    assert got == {"majority_rate": 133 / 151, "majority_class": 0, "test_rows": 151}
    assert cl.finish(cl.create(y, always), 2)["accuracy"] == got["majority_rate"] == accuracy_score(y, always)
    assert cl.finish(cl.create(y, always), 2)["macro_f1"] == pytest.approx(f1_score(y, always, average="macro"))
    assert cl.majority(cl.create([2, 1, 1, 2], [0, 0, 0, 0]))["majority_class"] == 1  # a tie: the lower class


@pytest.mark.parametrize("classes", [3, 5])
def test_macro_f1_is_scikit_learns_with_a_class_never_predicted(classes):
    y, p, _ = rows(classes, 300, classes)
    p[p == classes - 1] = 0  # the last class is never predicted: its precision is 0
    got = cl.finish(cl.create(y, p), classes)
    assert set(got) == {"accuracy", "macro_f1"}
    assert got["macro_f1"] == pytest.approx(f1_score(y, p, average="macro", zero_division=0), abs=1e-15)


@pytest.mark.parametrize("classes", [2, 4])
def test_any_split_and_merge_order_gives_the_one_pass_figures(classes):
    y, p, s = rows(11, 700, classes)
    want = cl.finish(cl.create(y, p, s), classes)
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(len(y))
        cuts = sorted(random.Random(seed).sample(range(1, len(y)), 6))
        parts = [
            cl.create(y[i], p[i], None if s is None else s[i]) for i in np.split(order, cuts)
        ]  # seven batches of shuffled rows
        random.Random(seed).shuffle(parts)
        assert cl.finish(reduce(cl.merge, parts), classes) == want


def test_a_missing_class_or_score_gives_nan_auc_and_no_rows_is_refused():
    assert math.isnan(cl.finish(cl.create([1, 1], [1, 0], [0.2, 0.9]), 2)["auc"])
    assert math.isnan(cl.finish(cl.create([1, 0], [1, 0]), 2)["auc"])
    assert cl.from_rows([(1.0, 0.0, 0.25, 3), (0.0, 0.0, None, 2)]) == {(1, 0, 0.25): 3, (0, 0, None): 2}
    with pytest.raises(ValueError, match="no rows"):
        cl.finish(cl.create([], []), 2)
