"""Tokenising, perturbing and reassembling text, one Arrow array at a time.

Tokens follow GloVe's own conventions so that they find their vectors: text is
lower-cased and composed (Unicode NFC: ``normalize``), words are runs of letters/digits,
clitics are split the way the Stanford tokenizer does ("don't" → "do" "n't", "john's" → "john" "'s"), and every
other non-space character is a token of its own (GloVe has vectors for "," "." "!").
Every non-whitespace character of the input belongs to a token and is therefore
replaced.

The guarantee covers token sequences of a public length; whitespace is not a token,
so how the output is laid out is a separate choice (``LAYOUTS``):

- ``single`` (default, the only layout inside the guarantee): the output tokens
  joined by single spaces, nothing else. The output shows the tokens and their
  count, nothing more about the input.
- ``lines``: line breaks are kept (every break ``str.splitlines`` recognises, written
  as "\\n"), tokens within a line are joined by single spaces. Reveals the line
  structure of the input: outside the guarantee.
- ``keep``: the input's whitespace is copied verbatim (double spaces, tabs, CRLF,
  Unicode spaces). A channel outside the guarantee: opt-in only.

Out-of-vocabulary tokens (no vector in the embedding) cannot enter the mechanism.
Their handling is an explicit policy (``OOV_POLICIES``):

- ``unk`` (default): replaced by a fixed placeholder (``oov_token``, "[UNK]"). The
  output reveals *where* unembeddable tokens were, never what they were.
- ``random``: replaced by a uniformly random vocabulary word, independent of the
  token: reveals nothing about it, and hides the positions less plainly.
- ``drop``: removed. Reveals nothing about the token; changes the token count.
- ``keep``: released verbatim. This publishes the raw token (names, numbers, rare
  spellings are typically OOV) and gives it no protection at all; opt-in only.

A value that is not valid UTF-8 (a corrupt row) is handled as one out-of-vocabulary
token, so one bad row never fails a batch (see ``decode_strings``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from dpspark import units
from dpspark.arrow import strings
from dpspark.embeddings import WordRows

if TYPE_CHECKING:
    from dpspark.mechanisms.base import WordMechanism
    from dpspark.units import Allocated, Allocation, Within

OOV_POLICIES = ("unk", "random", "drop", "keep")
LAYOUTS = ("single", "lines", "keep")
TOKEN_PATTERN = r"\w+(?=n't\b)|n't\b|'\w+|\w+|[^\w\s]"
_SPLIT = re.compile(f"({TOKEN_PATTERN})")
# Exactly the line boundaries of str.splitlines; all of them are whitespace (\s).
_LINE_BREAK = re.compile("\r\n|[\n\v\f\r\x1c\x1d\x1e\x85\u2028\u2029]")

COUNT_NAMES = ("tokens", "placeholders")
# The Arrow type of each type name a mechanism's extra columns use (``MechanismSpec.extra_columns``).
COLUMN_TYPES = {"map<string,int>": pa.map_(pa.string(), pa.int32())}


def normalize(text: str) -> str:
    """``text`` as the tokenizer reads it: lower-cased, then in Unicode NFC (the composed form that
    embeddings' words are written in), so that "Paris", "PARIS" and a decomposed "São" ("Sa" + U+0303
    + "o") find the same word. Every word file (``dpspark.wordfiles.read_word_list``) is read through it too: a
    file's words match the tokens they are meant to match. NFC leaves whitespace as it is, but for two
    old spaces (U+2000, U+2001), which become U+2002 and U+2003 (the ``keep`` layout shows it)."""
    return unicodedata.normalize("NFC", text.lower())


def tokenize(text: str) -> tuple[list[str], list[str]]:
    """Split ``normalize(text)`` into (tokens, gaps) with len(gaps) = len(tokens) + 1.

    Tokens never contain whitespace and gaps contain nothing else.
    ``detokenize(tokens, gaps) == normalize(text)`` whenever no two tokens are adjacent.
    """
    parts = _SPLIT.split(normalize(text))
    return parts[1::2], parts[0::2]


def detokenize(tokens: list[str], gaps: list[str]) -> str:
    """Interleave gaps and tokens (len(gaps) = len(tokens) + 1), whitespace verbatim.

    An empty gap between two tokens becomes one space: adjacent input tokens ("dog!",
    "don't") would otherwise glue into one string after replacement ("dogrequiem");
    the space keeps every output token readable and re-tokenisable. A text without
    tokens comes back as its one gap (whitespace-only text unchanged).
    """
    if not tokens:
        return gaps[0]
    inner = [g or " " for g in gaps[1:-1]]
    return gaps[0] + "".join(chain.from_iterable(zip(tokens, inner))) + tokens[-1] + gaps[-1]


def assemble(tokens: Sequence[str | None], gaps: list[str], layout: str = "single") -> str:
    """The output text of one row: ``tokens`` (None = dropped) laid out by ``layout``.

    ``single``: the kept tokens joined by single spaces. ``lines``: the same, but each
    gap that holds line breaks becomes that many "\\n" (breaks in the gaps around a
    dropped token are kept; a line without tokens is empty). ``keep``: ``detokenize``,
    where a dropped token takes the whitespace before it along (the text's leading
    whitespace stays where it was).
    """
    if layout == "single":
        return " ".join(t for t in tokens if t is not None)
    if layout == "lines":
        parts: list[str] = []
        breaks = 0
        for token, gap in zip(tokens, gaps):
            breaks += len(_LINE_BREAK.findall(gap))
            if token is None:
                continue
            parts.append("\n" * breaks if breaks else " " if parts else "")
            parts.append(token)
            breaks = 0
        breaks += len(_LINE_BREAK.findall(gaps[-1]))
        parts.append("\n" * breaks)
        return "".join(parts)
    kept = [i for i, t in enumerate(tokens) if t is not None]
    if len(kept) < len(tokens):  # a dropped token takes the gap before it along
        if not kept:
            return gaps[0] + gaps[-1]
        gaps = [gaps[0]] + [gaps[i] for i in kept[1:]] + [gaps[-1]]
    return detokenize([t for t in tokens if t is not None], gaps)


def decode_strings(array: pa.Array) -> tuple[list[str | None], np.ndarray]:
    """Python strings of a string array that may hold invalid UTF-8, and where it does.

    Returns (texts, invalid): ``invalid`` is a boolean mask of the rows whose bytes are
    not valid UTF-8; those rows hold their bytes decoded with ``errors="replace"``.
    Nulls stay None. The common case (all valid) costs one ``to_pylist()``.
    """
    try:
        return array.to_pylist(), np.zeros(len(array), dtype=bool)
    except UnicodeDecodeError:
        pass
    if pa.types.is_large_string(array.type):
        raw = array.view(pa.large_binary())
    elif hasattr(pa.types, "is_string_view") and pa.types.is_string_view(array.type):  # pyarrow >= 16
        raw = array.view(pa.binary_view())
    else:
        raw = array.view(pa.binary())
    texts: list[str | None] = []
    invalid = np.zeros(len(array), dtype=bool)
    for i, value in enumerate(raw.to_pylist()):
        if value is None:
            texts.append(None)
            continue
        try:
            texts.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(value.decode("utf-8", errors="replace"))
            invalid[i] = True
    return texts, invalid


@dataclass(frozen=True)
class Split:
    """One string array tokenized (``TextPerturber.split``): its type, decoded texts, which rows were not valid
    UTF-8, each row's (tokens, gaps) (None: a null) and its number of tokens."""

    type: pa.DataType
    texts: list[str | None]
    invalid: np.ndarray
    parts: list[tuple[list[str], list[str]] | None]
    lengths: np.ndarray


@dataclass(frozen=True)
class Documents:
    """A text-level mechanism's rows of one array (``TextPerturber.documents``): the decoded texts, the
    in-vocabulary rows of their tokens (row by row), how many each row has and where they start, each row's
    number of draws, and the array's type."""

    texts: list[str | None]
    sources: np.ndarray
    have: np.ndarray
    start: np.ndarray
    draws: np.ndarray
    type: pa.DataType


def split_array(array: pa.Array) -> Split:
    """One string array tokenized: its tokens per row (``Split.lengths``: a null 0, a value that is not valid
    UTF-8 one), which a privacy unit's allocation counts before the draws."""
    texts, invalid = decode_strings(array)
    parts: list[tuple[list[str], list[str]] | None] = [
        None if t is None else ([t], ["", ""]) if bad else tokenize(t) for t, bad in zip(texts, invalid)
    ]
    lengths = np.array([len(s[0]) if s is not None else 0 for s in parts], dtype=np.int64)
    return Split(array.type, texts, invalid, parts, lengths)


def row_tokens(data: pa.RecordBatch | pa.Table, columns: list[str]) -> np.ndarray:
    """Each row's tokens over ``columns`` together (``split_array``'s lengths: what a unit's allocation counts)."""
    arrays = (data.column(c) for c in columns)
    lengths = (split_array(a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a).lengths for a in arrays)
    return sum(lengths, np.zeros(data.num_rows, np.int64))


def length_counts(data: pa.RecordBatch | pa.Table, columns: list[str]) -> dict[int, int]:
    """Tokens in a row (over ``columns`` together: ``row_tokens``) → rows: a document unit's shape (a partial: add
    them over batches)."""
    lengths, rows = np.unique(row_tokens(data, columns), return_counts=True)
    return dict(zip(lengths.tolist(), rows.tolist()))


class TextPerturber:
    """Applies a WordMechanism to every token of string arrays.

    Args:
        mechanism: the word mechanism.
        words: the embedding's words (``WordRows``), row-aligned with ``mechanism.vectors``.
        oov: one of OOV_POLICIES.
        oov_token: the placeholder of the ``unk`` policy (non-empty, no whitespace).
        layout: one of LAYOUTS; only ``single`` stays inside the guarantee.
        unit_budget: a document unit's budget E (``perturb_units``); None: the token unit, each token at the
            mechanism's ε.
        allocation: how E is spread over a unit's tokens (``dpspark.units.Allocation``; default ``scale``).
    """

    def __init__(
        self,
        mechanism: WordMechanism,
        words: WordRows,
        oov: str = "unk",
        oov_token: str = "[UNK]",
        *,
        layout: str = "single",
        unit_budget: float | None = None,
        allocation: Allocation | None = None,
    ) -> None:
        if oov not in OOV_POLICIES:
            raise ValueError(f"oov policy must be one of {OOV_POLICIES}, got {oov!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if not oov_token or any(c.isspace() for c in oov_token):
            raise ValueError(f"oov_token must be non-empty and hold no whitespace, got {oov_token!r}")
        self.mechanism = mechanism
        self.words = words
        self.oov, self.oov_token, self.layout = oov, oov_token, layout
        self.vocab_words = words.take(mechanism.vocab_rows)
        self.unit_budget = unit_budget
        self.allocation = allocation if allocation is not None else units.Allocation()

    def perturb_units(
        self, arrays: Sequence[pa.Array], rng: np.random.Generator, within: Callable[[np.ndarray], Within] | None = None
    ) -> list[tuple[pa.Array, np.ndarray]]:
        """Units: each row of ``arrays`` (a batch's text columns, in the order given) is one unit (a document),
        or with ``within`` a part of one (a ``column:`` unit: ``within(tokens per row)`` gives each row's unit
        total and the unit's tokens before it, ``dpspark.unit_table.Cursor``). The unit's tokens share
        ``unit_budget`` by ``allocation`` (``dpspark.units.allocate_rows``: row by row, a row's columns in
        order); a text-level mechanism's (SynTF's) draws stand for its tokens (``documents``). Returns
        ``perturb``'s (array, extra columns, per-row counts) per column."""
        if self.unit_budget is None:
            raise ValueError("perturb_units needs a unit budget (unit_budget=E)")
        if self.text_level:  # a document's draws are its tokens here: they share E as tokens do
            plans = [self.documents(a) for a in arrays]
            allocated = units.allocate_rows([d.draws for d in plans], self.unit_budget, self.allocation, within)
            return [self._documents_out(d, rng, a) for d, a in zip(plans, allocated)]
        splits = [self.split(a) for a in arrays]
        allocated = units.allocate_rows([s.lengths for s in splits], self.unit_budget, self.allocation, within)
        return [
            (out, {}, per_row) for out, per_row in (self.perturb_array(s, rng, a) for s, a in zip(splits, allocated))
        ]

    def split(self, array: pa.Array) -> Split:
        """``split_array``: ``perturb_array``'s first step."""
        return split_array(array)

    def perturb_array(
        self, array: pa.Array | Split, rng: np.random.Generator, allocated: Allocated | None = None
    ) -> tuple[pa.Array, np.ndarray]:
        """Perturb one string array (or its ``split``).

        Rows that are not valid UTF-8 become one out-of-vocabulary token each (under
        ``keep``: their bytes decoded with replacement characters).

        ``allocated``: a privacy unit's allocation of this array's tokens, in order (``dpspark.units``):
        token i is drawn at its own εᵢ (``WordMechanism.sample_at``), and a token over the unit's cap is
        released as the placeholder (``oov_token``) whatever it is. None: every token at the mechanism's ε.

        Returns:
            (new array of the same type, per-row counts: an (n_rows × 2) int64 array with
            the columns of COUNT_NAMES). Nulls stay null, empty strings stay empty.
            The counts are read off the output text alone, so publishing them adds
            nothing to what the released text shows: ``tokens`` = whitespace-separated
            tokens of the output row, ``placeholders`` = those equal to ``oov_token``
            under the ``unk`` policy or a cap (0 otherwise). No count of replaced or OOV input
            tokens is made: it would reveal what the output hides.
        """
        prepared = array if isinstance(array, Split) else self.split(array)
        texts, invalid, split, lengths = prepared.texts, prepared.invalid, prepared.parts, prepared.lengths
        tokens = list(chain.from_iterable(s[0] for s in split if s is not None))
        rows = self.words.rows(tokens)
        known = (rows >= 0) & ~np.repeat(invalid, lengths)
        capped = None
        if allocated is not None:
            if allocated.drawn.shape != (len(tokens),):
                raise ValueError(f"an allocation of {allocated.drawn.size} tokens for an array of {len(tokens)}")
            capped = ~allocated.drawn
            known &= allocated.drawn

        out = np.empty(len(tokens), dtype=object)
        if allocated is None:
            out[known] = self.vocab_words[self.mechanism.perturb_rows(rows[known], rng)]
        else:
            out[known] = self.vocab_words[self.mechanism.sample_at(rows[known], allocated.epsilons[known], rng)]
            known |= capped  # over the cap: the placeholder below, under any policy
        n_oov = int((~known).sum())
        if n_oov:
            if self.oov == "unk":
                out[~known] = self.oov_token
            elif self.oov == "random":
                out[~known] = self.vocab_words[rng.integers(0, len(self.vocab_words), n_oov)]
            elif self.oov == "keep":
                out[~known] = np.asarray(tokens, dtype=object)[~known]
            else:  # drop: marked None, left out by assemble
                out[~known] = None

        if capped is not None:
            out[capped] = self.oov_token
        result: list[str | None] = []
        per_row = np.zeros((len(texts), len(COUNT_NAMES)), dtype=np.int64)
        pos = 0
        for r, (s, n) in enumerate(zip(split, lengths)):
            if s is None:
                result.append(None)
                continue
            text = assemble(out[pos : pos + n], s[1], self.layout)
            pos += n
            result.append(text)
            fields = text.split()
            per_row[r, 0] = len(fields)
            if self.oov == "unk" or capped is not None:
                per_row[r, 1] = fields.count(self.oov_token)
        return strings(result, prepared.type), per_row

    @property
    def text_level(self) -> bool:
        """Whether the mechanism releases each text as a whole (``perturb_documents``) instead of token by
        token (``perturb_array``)."""
        return self.mechanism.spec is not None and self.mechanism.spec.text_level

    def perturb(self, array: pa.Array, rng: np.random.Generator) -> tuple[pa.Array, dict[str, pa.Array], np.ndarray]:
        """The perturbed column at the mechanism's level, its extra columns by the suffixes the spec names
        (``extra_columns``: a text-level mechanism's counts of the drawn words, SynTF's ``tf``) and the
        per-row counts (``COUNT_NAMES``)."""
        if self.text_level:
            return self._documents_out(self.documents(array), rng)
        out, per_row = self.perturb_array(array, rng)
        return out, {}, per_row

    def perturb_batch(
        self,
        batch: pa.RecordBatch,
        rng: np.random.Generator,
        columns: Sequence[str],
        keep: bool = False,
        extra: Sequence[str] = (),
        within: Callable[[np.ndarray], Within] | None = None,
    ) -> tuple[list[str], list[pa.Array], np.ndarray]:
        """One record batch of a release: its ``columns`` perturbed in place (document units: a row's columns
        share the unit's budget, ``perturb_units``), then ``<col>_<suffix>`` for each of the mechanism's
        ``extra`` columns, then ``<col>_original`` if ``keep``. Returns (names, arrays, per-row counts summed
        over the columns: ``COUNT_NAMES``). Every engine's release runs this per batch; ``within``: a ``column:``
        unit's rows (``perturb_units``)."""
        names, arrays = list(batch.schema.names), list(batch.columns)
        at = [names.index(col) for col in columns]
        originals = [arrays[i] for i in at]
        if self.unit_budget is not None:
            done = self.perturb_units(originals, rng, within)
        else:
            done = [self.perturb(array, rng) for array in originals]
        totals = np.zeros((batch.num_rows, len(COUNT_NAMES)), np.int64)
        added: dict[str, list[pa.Array]] = {suffix: [] for suffix in extra}
        for i, (array, columns_of, per_row) in zip(at, done):
            arrays[i] = array
            for suffix in extra:
                added[suffix].append(columns_of[suffix])
            totals += per_row
        for suffix in extra:
            names += [f"{c}_{suffix}" for c in columns]
            arrays += added[suffix]
        if keep:
            names += [f"{c}_original" for c in columns]
            arrays += originals
        return names, arrays, totals

    def _documents_out(
        self, documents: Documents, rng: np.random.Generator, allocated: Allocated | None = None
    ) -> tuple[pa.Array, dict[str, pa.Array], np.ndarray]:
        """``perturb_documents`` as ``perturb`` returns it: the drawn words' counts under the spec's one extra
        column's suffix (SynTF's ``tf``)."""
        out, counts, per_row = self.perturb_documents(documents, rng, allocated)
        (suffix,) = self.mechanism.spec.extra_columns  # the one extra column: the drawn words' counts
        return out, {suffix: counts}, per_row

    def documents(self, array: pa.Array) -> Documents:
        """``perturb_documents``' first step: each row's in-vocabulary tokens and its number of draws n (the
        spec's ``draws``, or the number of those tokens; 0 for a null row or one without them)."""
        texts, invalid = decode_strings(array)
        token_lists = [[] if t is None or bad else tokenize(t)[0] for t, bad in zip(texts, invalid)]
        lengths = np.array([len(t) for t in token_lists], dtype=np.int64)
        rows = self.words.rows(list(chain.from_iterable(token_lists)))
        known = rows >= 0
        row_of = np.repeat(np.arange(len(texts)), lengths)[known]
        have = np.bincount(row_of, minlength=len(texts))
        start = np.concatenate([[0], np.cumsum(have)[:-1]]).astype(np.int64)
        fixed = self.mechanism.spec.draws
        n = np.where(have > 0, fixed if fixed is not None else have, 0).astype(np.int64)
        n[[t is None for t in texts]] = 0
        return Documents(texts, rows[known], have, start, n, array.type)

    def perturb_documents(
        self, array: pa.Array | Documents, rng: np.random.Generator, allocated: Allocated | None = None
    ) -> tuple[pa.Array, pa.Array, np.ndarray]:
        """SynTF's synthetic document of each row: n words, each the mechanism's draw from a word taken
        uniformly from the row's in-vocabulary tokens (its term frequencies), n = the spec's ``draws`` or
        the number of those tokens (``documents``). Out-of-vocabulary tokens are left out (no policy applies).

        ``allocated``: a privacy unit's allocation of the array's draws, in order (``dpspark.units``, as
        ``perturb_array`` takes one for tokens): draw i is made at its own εᵢ, and a draw over the unit's cap is
        released as the placeholder (``oov_token``). None: every draw at the mechanism's ε.

        Returns (the drawn words in sorted order joined by single spaces, of ``array``'s type; their
        counts as map<string, int32> (keys sorted); per-row counts as ``perturb_array``: under an allocation
        ``placeholders`` counts the draws over the cap). Nulls stay null; a row without in-vocabulary tokens
        (and no fixed ``draws``) gives "" and an empty map.
        """
        d = array if isinstance(array, Documents) else self.documents(array)
        texts, n = d.texts, d.draws
        which = np.repeat(np.arange(len(texts)), n)
        picked = d.start[which] + np.floor(rng.random(len(which)) * d.have[which]).astype(np.int64)
        if allocated is None:
            drawn = self.vocab_words[self.mechanism.perturb_rows(d.sources[picked], rng)]
        else:
            if allocated.drawn.shape != (len(which),):
                raise ValueError(f"an allocation of {allocated.drawn.size} draws for documents of {len(which)}")
            made = allocated.drawn
            drawn = np.full(len(which), self.oov_token, dtype=object)
            drawn[made] = self.vocab_words[
                self.mechanism.sample_at(d.sources[picked][made], allocated.epsilons[made], rng)
            ]
        result: list[str | None] = []
        maps: list[list[tuple[str, int]] | None] = []
        per_row = np.zeros((len(texts), len(COUNT_NAMES)), dtype=np.int64)
        at = 0
        for r, t in enumerate(texts):
            if t is None:
                result.append(None)
                maps.append(None)
                continue
            words = sorted(drawn[at : at + n[r]])
            at += n[r]
            result.append(" ".join(words))
            keys, counts = np.unique(np.array(words, dtype=object), return_counts=True) if words else ([], [])
            maps.append([(str(k), int(c)) for k, c in zip(keys, counts)])
            per_row[r, 0] = len(words)
            if allocated is not None:
                per_row[r, 1] = words.count(self.oov_token)
        tf = pa.array(maps, type=pa.map_(pa.string(), pa.int32()))
        return strings(result, d.type), tf, per_row

    def perturb_texts(self, texts: list[str | None], rng: np.random.Generator) -> list[str | None]:
        """Convenience for plain Python lists (tests, notebooks, a report's examples); under a privacy unit each
        text is one unit (``perturb_units``)."""
        array = pa.array(texts, type=pa.string())
        if self.unit_budget is not None:
            return self.perturb_units([array], rng)[0][0].to_pylist()
        return self.perturb_array(array, rng)[0].to_pylist()


def count_tokens(texts: pa.ChunkedArray | pa.Array) -> Counter[str]:
    """Token → occurrences over ``texts`` (dpspark's tokenizer; nulls and empty strings count nothing): what a
    task counts of its partition, and the local engine of a whole column."""
    counts: Counter[str] = Counter()
    for chunk in texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]:
        counts.update(t for s in decode_strings(chunk)[0] if s for t in tokenize(s)[0])
    return counts


def count_column_tokens(data: pa.RecordBatch | pa.Table, columns: list[str]) -> Counter[str]:
    """Token → occurrences over ``columns`` of ``data`` together (``count_tokens`` of each): a corpus's counts,
    a task's partial ones."""
    counts: Counter[str] = Counter()
    for col in columns:
        counts.update(count_tokens(data.column(col)))
    return counts


def most_frequent(counts: Mapping[str, int], words: Mapping[str, int], size: int) -> list[str]:
    """The ``size`` most frequent tokens of ``counts`` that are in ``words``, ties by the token (a corpus-derived
    vocabulary: data-dependent, published by the output)."""
    return sorted((t for t in counts if t in words), key=lambda t: (-counts[t], t))[:size]
