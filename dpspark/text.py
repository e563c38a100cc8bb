"""Tokenising, perturbing and reassembling text, one Arrow array at a time.

Tokens follow GloVe's own conventions so that they find their vectors: text is
lower-cased, words are runs of letters/digits, clitics are split the way the
Stanford tokenizer does ("don't" → "do" "n't", "john's" → "john" "'s"), and every
other non-space character is a token of its own (GloVe has vectors for "," "." "!").
Every non-whitespace character of the input belongs to a token and is therefore
replaced; only the whitespace between tokens is kept, so the output has the same
token count and line structure as the input (the guarantee compares strings of
equal length n).

Out-of-vocabulary tokens (no vector in the embedding) cannot enter the mechanism.
Their handling is an explicit policy (``OOV_POLICIES``):

- ``unk`` (default): replaced by a fixed placeholder (``oov_token``, "[UNK]"). The
  output reveals *where* unembeddable tokens were, never what they were.
- ``random``: replaced by a uniformly random vocabulary word, independent of the
  token: reveals nothing about it, and hides the positions less plainly.
- ``drop``: removed together with the whitespace before it. Reveals nothing about
  the token; changes the token count.
- ``keep``: released verbatim. This publishes the raw token (names, numbers, rare
  spellings are typically OOV) and gives it no protection at all; opt-in only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from itertools import chain

import numpy as np
import pyarrow as pa

from dpspark.mechanisms import WordMechanism

OOV_POLICIES = ("unk", "random", "drop", "keep")
TOKEN_PATTERN = r"\w+(?=n't\b)|n't\b|'\w+|\w+|[^\w\s]"
_SPLIT = re.compile(f"({TOKEN_PATTERN})")


def tokenize(text: str) -> tuple[list[str], list[str]]:
    """Split lower-cased ``text`` into (tokens, gaps) with len(gaps) = len(tokens) + 1.

    ``detokenize(tokens, gaps) == text.lower()`` for any string.
    """
    parts = _SPLIT.split(text.lower())
    return parts[1::2], parts[0::2]


def detokenize(tokens: list[str], gaps: list[str]) -> str:
    """Interleave gaps and tokens; an empty gap between two tokens becomes one space.

    Adjacent input tokens ("dog!", "don't") would otherwise glue into one string
    after replacement ("dogrequiem"); the space keeps every output token readable and
    re-tokenisable. ``detokenize(*tokenize(t))`` is ``t.lower()`` up to those spaces.
    """
    inner = [g or " " for g in gaps[1:-1]]
    return gaps[0] + "".join(chain.from_iterable(zip(tokens, inner))) + (tokens[-1] if tokens else "") + gaps[-1]


COUNT_NAMES = ("tokens", "in_vocabulary", "oov", "replaced")


@dataclass
class Counts:
    """What a perturbation did; adds up over batches, columns and tasks."""

    tokens: int = 0
    in_vocabulary: int = 0
    oov: int = 0
    replaced: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @classmethod
    def from_rows(cls, per_row: np.ndarray) -> Counts:
        return cls(*(int(x) for x in per_row.sum(axis=0)))

    def as_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}


class TextPerturber:
    """Applies a WordMechanism to every token of string arrays.

    Args:
        mechanism: the word mechanism.
        words: the embedding's words, row-aligned with ``mechanism.vectors``.
        word_index: word → embedding row.
        oov: one of OOV_POLICIES.
        oov_token: the placeholder of the ``unk`` policy.
    """

    def __init__(
        self,
        mechanism: WordMechanism,
        words: list[str] | np.ndarray,
        word_index: dict[str, int],
        oov: str = "unk",
        oov_token: str = "[UNK]",
    ) -> None:
        if oov not in OOV_POLICIES:
            raise ValueError(f"oov policy must be one of {OOV_POLICIES}, got {oov!r}")
        self.mechanism = mechanism
        self.word_index = word_index
        self.oov, self.oov_token = oov, oov_token
        self.vocab_words = np.asarray(words, dtype=object)[mechanism.vocab_rows]

    def perturb_array(self, array: pa.Array, rng: np.random.Generator) -> tuple[pa.Array, np.ndarray]:
        """Perturb one string array.

        Returns:
            (new array of the same type, per-row counts: an (n_rows × 4) int64 array with
            the columns of COUNT_NAMES). Nulls stay null, empty strings stay empty.
        """
        texts = array.to_pylist()
        split = [tokenize(t) if t is not None else None for t in texts]
        lengths = np.array([len(s[0]) if s is not None else 0 for s in split], dtype=np.int64)
        tokens = list(chain.from_iterable(s[0] for s in split if s is not None))
        lookup = self.word_index.get
        rows = np.fromiter((lookup(t, -1) for t in tokens), np.int64, len(tokens))
        known = rows >= 0

        out = np.empty(len(tokens), dtype=object)
        out[known] = self.vocab_words[self.mechanism.perturb_rows(rows[known], rng)]
        n_oov = int((~known).sum())
        if n_oov:
            if self.oov == "unk":
                out[~known] = self.oov_token
            elif self.oov == "random":
                out[~known] = self.vocab_words[rng.integers(0, len(self.vocab_words), n_oov)]
            elif self.oov == "keep":
                out[~known] = np.asarray(tokens, dtype=object)[~known]
            else:  # drop: marked None, removed below with the gap before it
                out[~known] = None

        changed = out != np.asarray(tokens, dtype=object) if tokens else np.zeros(0, bool)
        row_of_token = np.repeat(np.arange(len(texts)), lengths)
        per_row = np.zeros((len(texts), len(COUNT_NAMES)), dtype=np.int64)
        per_row[:, 0] = lengths
        per_row[:, 1] = np.bincount(row_of_token, weights=known, minlength=len(texts))
        per_row[:, 2] = lengths - per_row[:, 1]
        per_row[:, 3] = np.bincount(row_of_token, weights=changed, minlength=len(texts))

        result: list[str | None] = []
        pos = 0
        for s, n in zip(split, lengths):
            if s is None:
                result.append(None)
                continue
            new_tokens = out[pos : pos + n]
            pos += n
            gaps = s[1]
            if self.oov == "drop" and n:
                # A dropped token takes the whitespace before it along (the leading
                # whitespace of the text stays where it was).
                keep = [i for i in range(n) if new_tokens[i] is not None]
                kept_gaps = [gaps[0]] + [gaps[i] for i in keep[1:]] + [gaps[-1]]
                result.append(detokenize([new_tokens[i] for i in keep], kept_gaps) if keep else gaps[0] + gaps[-1])
            else:
                result.append(detokenize(list(new_tokens), gaps))
        return pa.array(result, type=array.type), per_row

    def perturb_texts(self, texts: list[str | None], rng: np.random.Generator) -> list[str | None]:
        """Convenience for plain Python lists (tests, notebooks)."""
        return self.perturb_array(pa.array(texts, type=pa.string()), rng)[0].to_pylist()
