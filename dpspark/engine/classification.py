"""Classification metrics as a combiner (``dpspark.engine``): the utility commands' scores.

The partial is a table of counts: (true class, predicted class, score) → number of rows, with the
score (the probability of class 1) only for two classes. Every figure is a function of that table,
in integers until the last division, so any split of the rows and any merge order give the figures
of one pass bit for bit:

- ``create(y, prediction, score)``: the counts of one batch of rows;
- ``merge(a, b)``: both tables, counts added (a Spark backend does it as ``groupBy(...).count()``);
- ``finish(counts, n_classes)``: binary: accuracy, precision, recall, F1 of class 1, AUC and macro-F1;
  more classes: accuracy and macro-F1 (the mean F1 over classes). Precision of a class never predicted
  is 0 (scikit-learn's default);
- ``majority(counts)``: what a classifier that learned nothing scores on the same rows: the share of
  the most frequent true class (the accuracy of always predicting it), that class and the rows. An
  accuracy near it says the model predicts the prior, however high the figure looks (88% on SMS spam).

AUC is the Mann–Whitney statistic with tied scores counted one half: twice it is the integer
Σ_s pos(s)·(2·neg(<s) + neg(s)) over the distinct scores s, so the only rounding is the division.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np

Counts = Counter  # (y, prediction, score or None) → rows


def create(y: np.ndarray, prediction: np.ndarray, score: np.ndarray | None = None) -> Counts:
    y = np.asarray(y, dtype=np.int64)
    p = np.asarray(prediction, dtype=np.int64)
    s = [None] * len(y) if score is None else np.asarray(score, dtype=np.float64).tolist()
    return Counter(zip(y.tolist(), p.tolist(), s))


def merge(a: Counts, b: Counts) -> Counts:
    a.update(b)
    return a


def from_rows(rows: Iterable[tuple]) -> Counts:
    """A backend's aggregated rows (y, prediction, score or None, count) as the combiner's table."""
    counts: Counts = Counter()
    for y, p, s, c in rows:
        counts[(int(y), int(p), None if s is None else float(s))] += int(c)
    return counts


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def auc(counts: Counts) -> float:
    """ROC AUC of class 1 against the score (NaN when a class is absent or a row has no score)."""
    by_score: dict[float, list[int]] = {}
    for (y, _, s), c in counts.items():
        if s is None:
            return math.nan
        by_score.setdefault(s, [0, 0])[y == 1] += c
    below = twice_u = 0
    for s in sorted(by_score):
        neg, pos = by_score[s]
        twice_u += pos * (2 * below + neg)
        below += neg
    n_pos = sum(pos for _, pos in by_score.values())
    n_neg = below
    return math.nan if n_pos == 0 or n_neg == 0 else twice_u / (2 * n_pos * n_neg)


def finish(counts: Counts, n_classes: int) -> dict[str, float]:
    confusion = np.zeros((n_classes, n_classes), dtype=np.int64)
    for (y, p, _), c in counts.items():
        confusion[y, p] += c
    n = int(confusion.sum())
    if n == 0:
        raise ValueError("no rows to score")
    out = {"accuracy": int(np.trace(confusion)) / n}
    if n_classes == 2:
        tp, fp, fn = int(confusion[1, 1]), int(confusion[0, 1]), int(confusion[1, 0])
        out["precision"], out["recall"], out["f1"] = _prf(tp, fp, fn)
        out["auc"] = auc(counts)
    f1s = []
    for k in range(n_classes):
        tp = int(confusion[k, k])
        f1s.append(_prf(tp, int(confusion[:, k].sum()) - tp, int(confusion[k, :].sum()) - tp)[2])
    out["macro_f1"] = float(np.mean(f1s))  # binary too: F1 of class 1 alone hides a class never predicted
    return out


def majority(counts: Counts) -> dict[str, float]:
    """The rows' reference figures: ``majority_rate``, the share of the most frequent true class (ties to
    the lower class), ``majority_class`` (that class) and ``test_rows`` (the rows scored)."""
    by_class: Counter = Counter()
    for (y, _, _), c in counts.items():
        by_class[y] += c
    n = sum(by_class.values())
    if n == 0:
        raise ValueError("no rows to score")
    top = min(by_class, key=lambda k: (-by_class[k], k))
    return {"majority_rate": by_class[top] / n, "majority_class": top, "test_rows": n}
