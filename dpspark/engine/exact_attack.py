"""The attackers' guesses and the exact attacker's hits as combiners (``dpspark.engine``), so that it runs on
the executors, partitioned by setting and by span of corpus words, never on the driver.

For an output u the attacker guesses the ``top`` corpus words w with the largest
prior(w)·P(u | w), ties to the smaller embedding row (``dpspark.risk``). Its exact shares need
two passes over the corpus words, one block of P(u | w) rows at a time (memory O(top·V), no
words × V matrix):

1. **guesses**: per span of words, the best ``top`` (score, word) of every output; merged by
   keeping the best ``top`` of both. The order (score descending, then word ascending) is total,
   so any split and any merge order give the same table.
2. **hits**: with every setting's merged table, per span, the token-weighted sums [tokens, top-1
   hits, top-5 hits, unchanged, the same over sensitive words] of each block of words, and each
   word's Nw = K·P(w | w). ``finish_hits`` adds the blocks in word order, as a single pass over
   all words would, so the figures do not depend on how the words were split.

A span starts at a multiple of the space's block: each block's P(u | w) rows are the ones a
single pass computes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

TOP = 5


@dataclass(frozen=True)
class Corpus:
    """The attacker's prior: corpus words (embedding rows, ascending), their token counts, and which
    of them are sensitive."""

    words: np.ndarray
    f: np.ndarray
    sensitive: np.ndarray

    @classmethod
    def of(cls, prior: dict[int, float], sensitive: set[int] | frozenset[int] = frozenset()) -> Corpus:
        words = np.array(sorted(prior), dtype=np.int64)
        f = np.array([prior[int(w)] for w in words], dtype=np.float64)
        return cls(words, f, np.array([int(w) in sensitive for w in words], dtype=bool))


def spans(n_words: int, block: int, parts: int) -> list[tuple[int, int]]:
    """At most ``parts`` contiguous spans [start, stop) covering ``n_words`` words, each starting at a
    multiple of ``block`` (whole blocks, as even as whole blocks allow)."""
    blocks = max(1, -(-n_words // block))
    parts = max(1, min(parts, blocks))
    cuts = [round(i * blocks / parts) * block for i in range(parts + 1)]
    return [(a, min(b, n_words)) for a, b in zip(cuts, cuts[1:]) if a < min(b, n_words)]


def has_closed_form(mechanism: Any, corpus: Corpus) -> bool:
    """Whether the attacker with exact likelihoods applies: a corpus word, and a mechanism with a closed form
    (``WordMechanism.closed_form``)."""
    return len(corpus.words) > 0 and mechanism.closed_form


# --- pass 1: the guesses ----------------------------------------------------------------------------


@dataclass
class Guesses:
    """The best ``k ≤ top`` (score, word) of every output u: k × V, by score descending, then word."""

    score: np.ndarray
    word: np.ndarray


def _chunk_top(scores: np.ndarray, words: np.ndarray, top: int) -> Guesses:
    """The best ``top`` rows of each column of ``scores`` (n × V) by (score descending, row ascending),
    without sorting all n: a partition finds each column's top-th value; the rows above it and the
    first rows equal to it (row order) are the ``top`` kept, then sorted."""
    n, v = scores.shape
    if n <= top:
        order = np.argsort(-scores, axis=0, kind="stable")
    else:
        kth = np.partition(scores, n - top, axis=0)[n - top]
        above = scores > kth
        tie = scores == kth
        need = top - above.sum(axis=0)
        take = above | (tie & (np.cumsum(tie, axis=0) <= need))
        _, rows = np.nonzero(take.T)  # column by column, rows ascending: exactly top per column
        rows = rows.reshape(v, top).T
        kept = np.take_along_axis(scores, rows, axis=0)
        order = np.take_along_axis(rows, np.argsort(-kept, axis=0, kind="stable"), axis=0)
    return Guesses(np.take_along_axis(scores, order, axis=0), words[order])


def merge_guesses(a: Guesses, b: Guesses, top: int = TOP) -> Guesses:
    """The best ``top`` of two tables (of disjoint words) by (score descending, word ascending)."""
    score, word = np.vstack([a.score, b.score]), np.vstack([a.word, b.word])
    order = np.lexsort((word, -score), axis=0)[:top]
    return Guesses(np.take_along_axis(score, order, axis=0), np.take_along_axis(word, order, axis=0))


def exact_scores(mechanism: Any, corpus: Corpus) -> Any:
    """The exact attacker's scores of a block of corpus words (from position ``start``): prior(w)·P(u | w)."""

    def scores(start: int, chunk: np.ndarray) -> np.ndarray:
        return corpus.f[start : start + len(chunk), None] * mechanism.distribution(chunk)

    return scores


def model_scores(space: Any, beta: float, corpus: Corpus) -> Any:
    """The model attacker's scores (``dpspark.risk.fit_beta``): ln prior(w) + ln P_β(u | w), with
    P_β(u | w) ∝ exp(−β·d(w, u)) over the vocabulary."""
    logf = np.log(corpus.f)

    def scores(start: int, chunk: np.ndarray) -> np.ndarray:
        logits = -beta * space.distance_rows(chunk)
        top = logits.max(axis=1, keepdims=True)
        log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        return logf[start : start + len(chunk), None] + logits - log_z[:, None]

    return scores


def create_guesses(scores: Any, space: Any, corpus: Corpus, span: tuple[int, int], top: int = TOP) -> Guesses:
    """Pass 1 over the words ``corpus.words[span[0]:span[1]]``, one block of ``space.block`` words at a
    time: ``scores(start, words)`` (``exact_scores``, ``model_scores``) gives a block's n × V scores."""
    step = space.block
    best = Guesses(np.zeros((0, space.size)), np.zeros((0, space.size), dtype=np.int64))
    for start in range(span[0], span[1], step):
        chunk = corpus.words[start : min(start + step, span[1])]
        best = merge_guesses(best, _chunk_top(scores(start, chunk), chunk, top), top)
    return best


# --- pass 2: the hits -------------------------------------------------------------------------------


@dataclass
class Hits:
    """Per block of words (by its first word's position): the 8 weighted sums and the words' Nw."""

    blocks: dict[int, tuple[np.ndarray, np.ndarray]]


def create_hits(
    mechanism: Any, corpus: Corpus, span: tuple[int, int], best_word: np.ndarray, runs: int, top: int = TOP
) -> Hits:
    """Pass 2 over ``span`` with the merged guesses' words ``best_word`` (k × V)."""
    space = mechanism.space
    step = space.block
    pos, found = space.positions(corpus.words[span[0] : span[1]])
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for start in range(span[0], span[1], step):
        chunk = corpus.words[start : min(start + step, span[1])]
        here = slice(start - span[0], start - span[0] + len(chunk))
        p = mechanism.distribution(chunk)
        weight = corpus.f[start : start + len(chunk)]
        hit1 = (p * (best_word[0][None, :] == chunk[:, None])).sum(axis=1)
        hit5 = (p * (best_word[:top][None, :, :] == chunk[:, None, None]).any(axis=1)).sum(axis=1)
        same = np.where(found[here], p[np.arange(len(chunk)), np.maximum(pos[here], 0)], 0.0)
        sens = corpus.sensitive[start : start + len(chunk)].astype(np.float64)
        row = np.stack([np.ones_like(weight), hit1, hit5, same], axis=1) * weight[:, None]
        sums = np.concatenate([row.sum(axis=0), (row * sens[:, None]).sum(axis=0)])
        out[start] = (sums, runs * same)
    return Hits(out)


def merge_hits(a: Hits, b: Hits) -> Hits:
    return Hits({**a.blocks, **b.blocks})


def finish_hits(h: Hits) -> tuple[np.ndarray, float]:
    """(the 8 sums, the mean Nw over the corpus words): the blocks added in word order."""
    sums = np.zeros(8)
    for start in sorted(h.blocks):
        sums[:4] += h.blocks[start][0][:4]
        sums[4:] += h.blocks[start][0][4:]
    nw = np.concatenate([h.blocks[s][1] for s in sorted(h.blocks)]) if h.blocks else np.zeros(0)
    return sums, float(nw.mean())
