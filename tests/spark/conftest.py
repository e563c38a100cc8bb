"""Fixtures of the Spark tests: a tiny release input (test_release_safety.py, test_concurrent_releases.py),
and SMS spam for the evaluations (test_utility.py, test_compare.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.embeddings import load_default
from dpspark.evaluation.datasets import sms_spam
from dpspark.text import tokenize

SMS_ROWS = 600


@pytest.fixture()
def dataset(tmp_path) -> Path:
    d = tmp_path / "raw"
    d.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["the city is quiet", "a dog ran home", None]}), d / "p0.parquet")
    return d


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    """The first 600 SMS messages, each rewritten as its tokens that have a vector (joined by
    spaces): so a mechanism without noise gives back exactly the text the baseline sees."""
    index = load_default().word_index
    table = pq.read_table(sms_spam(tmp_path_factory.mktemp("sms"), rows=SMS_ROWS))
    texts = [" ".join(t for t in tokenize(s)[0] if t in index) for s in table.column("text").to_pylist()]
    path = tmp_path_factory.mktemp("clean") / "sms_embedded.parquet"
    pq.write_table(table.set_column(1, "text", pa.array(texts, pa.string())), path)
    return str(path)


@pytest.fixture(scope="session")
def corpus_vocab(data, tmp_path_factory):
    """Every corpus word as the output vocabulary: with a huge ε the mechanism is the identity
    (noise radius d/ε ≈ 5e-5, far below the distance between two words)."""
    words = sorted({t for s in pq.read_table(data).column("text").to_pylist() for t in s.split()})
    path = tmp_path_factory.mktemp("vocab") / "corpus_words.txt"
    path.write_text("\n".join(words), encoding="utf-8")
    return str(path)
