"""load_embeddings reads every supported format to the same words and vectors; select_vocabulary."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.embeddings import Embeddings, WordRows, load_embeddings, select_vocabulary
from dpspark.errors import EmbeddingError

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

V, D = 60, 5


@pytest.fixture(scope="module")
def reference() -> tuple[list[str], np.ndarray]:
    """60 words (one non-ASCII, to exercise UTF-8) × 5 float32 dimensions."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(V - 1)] + ["café"]
    return words, rng.standard_normal((V, D)).astype(np.float32)


def _lines(words: list[str], vectors: np.ndarray) -> list[str]:
    # repr of the float32 value as a Python float round-trips exactly through float64 → float32
    return [w + " " + " ".join(repr(float(x)) for x in row) for w, row in zip(words, vectors, strict=True)]


def write_glove(path: Path, words: list[str], vectors: np.ndarray) -> Path:
    path.write_text("\n".join(_lines(words, vectors)) + "\n", encoding="utf-8")
    return path


def write_word2vec_text(path: Path, words: list[str], vectors: np.ndarray) -> Path:
    header = f"{len(words)} {vectors.shape[1]}"
    path.write_text("\n".join([header, *_lines(words, vectors)]) + "\n", encoding="utf-8")
    return path


def write_word2vec_binary(path: Path, words: list[str], vectors: np.ndarray) -> Path:
    with open(path, "wb") as f:
        f.write(f"{len(words)} {vectors.shape[1]}\n".encode())
        for w, row in zip(words, vectors, strict=True):
            f.write(w.encode("utf-8") + b" ")
            f.write(struct.pack(f"<{len(row)}f", *row.tolist()))
            f.write(b"\n")
    return path


def write_npy(path: Path, words: list[str], vectors: np.ndarray, words_path: Path | None = None) -> Path:
    np.save(path, vectors)
    (words_path or path.with_suffix(".txt")).write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


def write_parquet(path: Path, words: list[str], vectors: np.ndarray) -> Path:
    table = pa.table(
        {
            "word": pa.array(words, pa.string()),
            "vector": pa.array([row.tolist() for row in vectors], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, path)
    return path


def assert_same(emb: Embeddings, words: list[str], vectors: np.ndarray) -> None:
    assert emb.words == words
    assert emb.vectors.dtype == np.float32
    assert emb.vectors.shape == (V, D)
    np.testing.assert_array_equal(emb.vectors, vectors)
    assert emb.dim == D and len(emb) == V
    assert emb.index_of("café") == V - 1 and emb.index_of("absent") == -1
    assert len(emb.sha256) == 64


# --- each format, explicitly named -------------------------------------------------------------


def test_glove_text(tmp_path, reference):
    path = write_glove(tmp_path / "vectors.txt", *reference)
    assert_same(load_embeddings(str(path), "glove"), *reference)


def test_word2vec_text(tmp_path, reference):
    path = write_word2vec_text(tmp_path / "vectors.txt", *reference)
    assert_same(load_embeddings(str(path), "word2vec"), *reference)


def test_fasttext_vec(tmp_path, reference):
    path = write_word2vec_text(tmp_path / "vectors.vec", *reference)
    assert_same(load_embeddings(str(path), "fasttext"), *reference)


def test_word2vec_binary(tmp_path, reference):
    path = write_word2vec_binary(tmp_path / "vectors.bin", *reference)
    assert_same(load_embeddings(str(path), "word2vec-binary"), *reference)


def test_word2vec_binary_without_trailing_newlines(tmp_path, reference):
    words, vectors = reference
    path = tmp_path / "vectors.bin"
    with open(path, "wb") as f:
        f.write(f"{V} {D}\n".encode())
        for w, row in zip(words, vectors, strict=True):
            f.write(w.encode("utf-8") + b" " + struct.pack(f"<{D}f", *row.tolist()))
    assert_same(load_embeddings(str(path), "word2vec-binary"), words, vectors)


def test_npy_with_default_word_list(tmp_path, reference):
    path = write_npy(tmp_path / "vectors.npy", *reference)
    assert_same(load_embeddings(str(path), "npy"), *reference)


def test_npy_with_explicit_word_list(tmp_path, reference):
    words_path = tmp_path / "my_words.list"
    path = write_npy(tmp_path / "vectors.npy", *reference, words_path=words_path)
    assert_same(load_embeddings(str(path), "npy", str(words_path)), *reference)


def test_npy_without_word_list_names_the_missing_file(tmp_path, reference):
    path = tmp_path / "vectors.npy"
    np.save(path, reference[1])
    with pytest.raises(EmbeddingError, match="vectors.txt not found"):
        load_embeddings(str(path), "npy")


def test_parquet(tmp_path, reference):
    path = write_parquet(tmp_path / "vectors.parquet", *reference)
    assert_same(load_embeddings(str(path), "parquet"), *reference)


def test_parquet_without_expected_columns(tmp_path, reference):
    path = tmp_path / "vectors.parquet"
    pq.write_table(pa.table({"token": reference[0]}), path)
    with pytest.raises(EmbeddingError, match="'word'.*'vector'"):
        load_embeddings(str(path))


def test_all_formats_agree(tmp_path, reference):
    loaded = [
        load_embeddings(str(write_glove(tmp_path / "g.txt", *reference)), "glove"),
        load_embeddings(str(write_word2vec_text(tmp_path / "w.txt", *reference)), "word2vec"),
        load_embeddings(str(write_word2vec_text(tmp_path / "f.vec", *reference)), "fasttext"),
        load_embeddings(str(write_word2vec_binary(tmp_path / "b.bin", *reference)), "word2vec-binary"),
        load_embeddings(str(write_npy(tmp_path / "n.npy", *reference)), "npy"),
        load_embeddings(str(write_parquet(tmp_path / "p.parquet", *reference)), "parquet"),
    ]
    first = loaded[0]
    for emb in loaded[1:]:
        assert emb.words == first.words
        np.testing.assert_array_equal(emb.vectors, first.vectors)


# --- auto-detection ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "writer"),
    [
        ("glove.txt", write_glove),  # no header → GloVe
        ("glove", write_glove),  # no suffix at all
        ("w2v.txt", write_word2vec_text),  # header "V d" → word2vec text
        ("ft.vec", write_word2vec_text),  # .vec → fastText
        ("w2v.bin", write_word2vec_binary),  # .bin → word2vec binary
        ("m.npy", write_npy),  # .npy (+ .txt word list)
        ("e.parquet", write_parquet),  # .parquet
        ("E.PARQUET", write_parquet),  # suffixes are case-insensitive
    ],
)
def test_auto_detection(tmp_path, reference, name, writer):
    path = writer(tmp_path / name, *reference)
    assert_same(load_embeddings(str(path)), *reference)
    assert_same(load_embeddings(str(path), "auto"), *reference)


def test_explicit_format_overrides_suffix(tmp_path, reference):
    path = write_glove(tmp_path / "glove_named.vec", *reference)
    assert_same(load_embeddings(str(path), "glove"), *reference)


def test_glove_file_read_as_word2vec_explains_the_header(tmp_path, reference):
    path = write_glove(tmp_path / "glove.txt", *reference)
    with pytest.raises(EmbeddingError, match="header line 'V d'"):
        load_embeddings(str(path), "word2vec")


def test_unknown_format(tmp_path, reference):
    path = write_glove(tmp_path / "glove.txt", *reference)
    with pytest.raises(EmbeddingError, match="unknown embeddings format 'csv'"):
        load_embeddings(str(path), "csv")


def test_missing_file(tmp_path):
    with pytest.raises(EmbeddingError, match="not found"):
        load_embeddings(str(tmp_path / "nope.txt"))


def test_ragged_text_names_the_line(tmp_path, reference):
    path = write_glove(tmp_path / "glove.txt", *reference)
    with open(path, "a", encoding="utf-8") as f:
        f.write("short 1.0 2.0\n")
    with pytest.raises(EmbeddingError, match=f"line {V + 1} has 2 values, expected {D}"):
        load_embeddings(str(path))


def test_nan_vector_names_the_word(tmp_path, reference):
    words, vectors = reference
    bad = vectors.copy()
    bad[7, 2] = np.nan
    path = write_glove(tmp_path / "glove.txt", words, bad)
    with pytest.raises(EmbeddingError, match="NaN or Inf.*'w7'"):
        load_embeddings(str(path))


def test_duplicate_word_names_it(tmp_path, reference):
    words, vectors = reference
    path = write_glove(tmp_path / "glove.txt", [*words[:-1], "w3"], vectors)
    with pytest.raises(EmbeddingError, match="duplicate word 'w3' at rows 4 and 60"):
        load_embeddings(str(path))


# --- select_vocabulary ---------------------------------------------------------------------------


@pytest.fixture
def emb(tmp_path, reference) -> Embeddings:
    return load_embeddings(str(write_glove(tmp_path / "glove.txt", *reference)))


def test_vocabulary_first_n_rows(emb):
    np.testing.assert_array_equal(select_vocabulary(emb, 10), np.arange(10))


def test_vocabulary_all_rows_by_default(emb):
    np.testing.assert_array_equal(select_vocabulary(emb), np.arange(V))


def test_vocabulary_larger_than_embedding_is_capped(emb):
    np.testing.assert_array_equal(select_vocabulary(emb, 10 * V), np.arange(V))


def test_vocabulary_too_small(emb):
    with pytest.raises(EmbeddingError, match="at least 2"):
        select_vocabulary(emb, 1)


def test_vocabulary_from_word_list(emb):
    rows = select_vocabulary(emb, 3, ["w12", "café", "w2", "w12"])
    np.testing.assert_array_equal(rows, [2, 12, V - 1])  # sorted, unique; the size is ignored
    assert [emb.words[i] for i in rows] == ["w2", "w12", "café"]


def test_vocabulary_word_list_with_unknown_word(emb):
    with pytest.raises(EmbeddingError, match="no vector") as info:
        select_vocabulary(emb, word_list=["w1", "zyzzyva", "w2"])
    assert "zyzzyva" in str(info.value)
    assert "1 vocabulary words" in str(info.value)


def test_word_rows_finds_what_a_dict_finds(reference):
    """WordRows.rows equals a word → row dict lookup: repeated, unknown, empty and non-ASCII tokens,
    string and chunked Arrow input alike."""
    words, _ = reference
    index = dict(zip(words, range(len(words))))
    tokens = ["w3", "café", "nope", "w3", "", "w59", "W3", "w0", "nope", "w58"]
    expected = [index.get(t, -1) for t in tokens]
    for given in (words, pa.array(words), pa.chunked_array([words[:20], words[20:]])):
        rows = WordRows(given)
        assert rows.rows(tokens).tolist() == expected and len(rows) == V
        assert rows.rows([]).tolist() == [] and rows.rows(["nope"]).tolist() == [-1]
        assert rows.take(np.array([59, 0, 59])).tolist() == ["café", "w0", "café"]


def test_mean_vectors_average_the_embedded_tokens(reference):
    from dpspark.run.transform import mean_vectors

    words, vectors = reference
    texts = ["w1 w2 nope", None, "", "nope", "café w1 w1", "w5"]
    x, valid = mean_vectors(texts, vectors, WordRows(words))
    assert valid.tolist() == [True, False, True, True, True, True]
    expected = [vectors[[1, 2]].mean(0), np.zeros(D), np.zeros(D), vectors[[59, 1, 1]].mean(0), vectors[5]]
    np.testing.assert_allclose(x, np.array(expected, np.float64), rtol=1e-6)
