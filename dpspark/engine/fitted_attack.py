"""The fitted attacker as combiners (``dpspark.engine``): its guesses from the fitting runs' pair counts,
its hits on the scoring runs, for the settings whose mechanism has no closed form (``dpspark.risk``).

The work is cut into **tasks**: one setting and a span of corpus words made of whole work items
(``dpspark.stats.plan``: the privacy statistics' own items, so the draws are theirs, keyed by job key
and item number wherever they run). A task's **state** is its words' pair counts, (w, u) → count, of
the fitting runs and of the scoring runs, drawn once; doubling the fitting runs adds the new items'
draws to the state (``add``), so no run is drawn twice. A backend keeps the states where they were
drawn (Spark: a persisted DataFrame on the executors) and runs the passes over them:

1. **guesses** (``guesses``): per output u, the ``top`` words w of the task with the largest
   prior(w)·count(w → u) in the fitting runs, ties to the smaller row; merged with
   ``exact_attack.merge_guesses`` (a total order: any split, any merge order, the same table). An
   output never seen in the fitting runs keeps score 0 and no word (-1): the attacker guesses the
   output itself.
2. **the model attacker's β** reads the fitting counts of ``risk.model_words`` (``model_pairs``: small,
   counts of public-noise draws, no text);
3. **hits** (``hits``): with the merged guesses of every attacker, each word's scoring runs, the runs it
   came out unchanged and the runs each attacker reads it back top-1 and top-``top``; merged by
   concatenation, finished in word order (``finish_hits``), so that ``risk.shares`` adds the same floats
   in the same order whatever the split.

``risk.reidentification`` is the reference: the same counts give the same per-word table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpspark.engine import exact_attack as ea
from dpspark.engine import nw_sw

TOP = ea.TOP
HIT_COLUMNS = ("n", "unchanged", "bayes_top1", "bayes_top5", "model_top1", "model_top5")


@dataclass(frozen=True)
class Task:
    """One setting and the corpus words at positions [lo, hi) (whole work items)."""

    setting: int
    lo: int
    hi: int


def tasks(items: Sequence[Any], words: np.ndarray, parts: int) -> list[Task]:
    """At most ``parts`` tasks per setting of ``items``, each a contiguous run of whole chunks of words
    (the items' ``rows``, as ``plan`` cut them), as even as whole chunks allow."""
    out = []
    for s in sorted({it.setting for it in items}):
        starts = sorted({int(np.searchsorted(words, it.rows[0])) for it in items if it.setting == s})
        k = min(parts, len(starts))
        cuts = [starts[round(i * len(starts) / k)] for i in range(k)]
        out += [Task(s, a, b) for a, b in zip(cuts, [*cuts[1:], len(words)])]
    return out


def items_of(task: Task, items: Sequence[Any], words: np.ndarray, block: int) -> list[Any]:
    """The items of ``task``'s setting and words in run block ``block``."""
    lo, hi = words[task.lo], words[task.hi - 1]
    return [it for it in items if it.setting == task.setting and it.block == block and lo <= it.rows[0] <= hi]


@dataclass
class State:
    """A task's pair counts, each as (w, u, count) arrays sorted by (w, u): the fitting runs' and the
    scoring runs'."""

    fit: tuple[np.ndarray, np.ndarray, np.ndarray]
    score: tuple[np.ndarray, np.ndarray, np.ndarray]

    def arrays(self) -> list[np.ndarray]:
        return [*self.fit, *self.score]

    @classmethod
    def of(cls, arrays: Sequence[np.ndarray]) -> State:
        return cls(tuple(arrays[:3]), tuple(arrays[3:6]))  # type: ignore[arg-type]


def _pairs(counts: dict[tuple[int, int, int], int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys = sorted(counts)
    w = np.array([k[1] for k in keys], dtype=np.int64)
    u = np.array([k[2] for k in keys], dtype=np.int64)
    return w, u, np.array([counts[k] for k in keys], dtype=np.int64)


def _sum(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w, u, c = (np.concatenate([x, y]) for x, y in zip(a, b))
    keys, inverse = np.unique(np.stack([w, u]), axis=1, return_inverse=True)
    return keys[0], keys[1], np.bincount(inverse.ravel(), weights=c, minlength=keys.shape[1]).astype(np.int64)


def draw(items: Sequence[Any], job_key: bytes, mechanisms: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair counts of ``items`` (``nw_sw.create``: each item's own draws)."""
    counts: dict[tuple[int, int, int], int] = {}
    for it in items:
        nw_sw.merge(counts, nw_sw.create(it, job_key, mechanisms))
    return _pairs(counts)


def create(fit: Sequence[Any], score: Sequence[Any], job_key: bytes, mechanisms: Sequence[Any]) -> State:
    """A task's state: the draws of its fitting items and of its scoring items."""
    return State(draw(fit, job_key, mechanisms), draw(score, job_key, mechanisms))


def add(state: State, more: Sequence[Any], job_key: bytes, mechanisms: Sequence[Any]) -> State:
    """The state with the fitting runs of ``more`` added (new items: new, independent draws)."""
    return State(_sum(state.fit, draw(more, job_key, mechanisms)), state.score) if more else state


def _prior(corpus: ea.Corpus, w: np.ndarray) -> np.ndarray:
    return corpus.f[np.searchsorted(corpus.words, w)]


def empty_guesses(space: Any, top: int = TOP) -> ea.Guesses:
    """No guess for any output: score 0, word -1."""
    return ea.Guesses(np.zeros((top, space.size)), np.full((top, space.size), -1, dtype=np.int64))


def guesses(state: State, space: Any, corpus: ea.Corpus, top: int = TOP) -> ea.Guesses:
    """Pass 1: the task's best ``top`` (prior(w)·count(w → u), w) of every output u of the space (top × V;
    score 0 and word -1 where the fitting runs hold fewer words for u)."""
    w, u, c = state.fit
    score = _prior(corpus, w) * c
    col, _ = space.positions(u)  # outputs are in W
    order = np.lexsort((w, -score, col))  # by output, then score descending, then word
    col, score, w = col[order], score[order], w[order]
    first = np.searchsorted(col, col, side="left")
    rank = np.arange(len(col)) - first
    keep = rank < top
    out = empty_guesses(space, top)
    out.score[rank[keep], col[keep]] = score[keep]
    out.word[rank[keep], col[keep]] = w[keep]
    return out


def model_pairs(state: State, words: np.ndarray) -> dict[tuple[int, int], int]:
    """The fitting counts (w, u) → count of ``words`` (``risk.model_words``): what ``risk.fit_beta`` reads."""
    w, u, c = state.fit
    keep = np.isin(w, words)
    return {(int(a), int(b)): int(n) for a, b, n in zip(w[keep], u[keep], c[keep])}


def nw(state: State) -> tuple[np.ndarray, np.ndarray]:
    """(words, Nw): each word's runs released unchanged, fitting and scoring runs together (the first K
    runs before any doubling, as privacy-stats counts them)."""
    w = np.concatenate([state.fit[0], state.score[0]])
    same = np.concatenate(
        [state.fit[2] * (state.fit[0] == state.fit[1]), state.score[2] * (state.score[0] == state.score[1])]
    )
    words, inverse = np.unique(w, return_inverse=True)
    return words, np.bincount(inverse, weights=same, minlength=len(words)).astype(np.int64)


def _ranks(table: np.ndarray, col: np.ndarray, w: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    g = table[:top, col]  # top × pairs
    return g[0] == w, (g == w[None, :]).any(axis=0)


def hits(
    state: State, space: Any, bayes: ea.Guesses, model: np.ndarray | None, top: int = TOP
) -> dict[str, np.ndarray]:
    """Pass 2: per word of the task (ascending), ``HIT_COLUMNS``: its scoring runs, the runs released
    unchanged, and the runs each attacker reads it back top-1 and top-``top``. ``bayes`` is the merged
    pass-1 table (an output with score 0 was never seen: guessed as itself); ``model`` the model
    attacker's merged words (top × V; None: the setting has no model attacker, its hits are NaN)."""
    w, u, c = state.score
    col, _ = space.positions(u)
    same = w == u
    seen = bayes.score[0, col] > 0
    b1, b5 = _ranks(bayes.word, col, w, top)
    columns = [np.ones(len(w)), same, np.where(seen, b1, same), np.where(seen, b5, same)]
    if model is None:
        columns += [np.full(len(w), np.nan)] * 2
    else:
        columns += list(_ranks(model, col, w, top))
    words, inverse = np.unique(w, return_inverse=True)
    out: dict[str, np.ndarray] = {"word": words}
    for name, values in zip(HIT_COLUMNS, columns):
        out[name] = np.bincount(inverse, weights=c * np.asarray(values, dtype=np.float64), minlength=len(words))
    return out


def finish_hits(parts: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The tasks' per-word tables of one setting as one, in word order (the tasks hold disjoint words)."""
    if not parts:
        return {"word": np.zeros(0, dtype=np.int64), **{k: np.zeros(0) for k in HIT_COLUMNS}}
    table = {k: np.concatenate([p[k] for p in parts]) for k in ("word", *HIT_COLUMNS)}
    order = np.argsort(table["word"], kind="stable")
    return {k: v[order] for k, v in table.items()}
