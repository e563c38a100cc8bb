"""Fixtures shared by the unit tests of one subject (the re-identification attackers)."""

from __future__ import annotations

import numpy as np
import pytest

from dpspark.mechanisms import Space

WORDS = "the of and to in a for is on that by with was he it".split()


@pytest.fixture(scope="module")
def world(glove):
    """15 frequent words with a falling prior over a 1,500-word vocabulary, two of them sensitive
    (test_risk_attackers.py, test_exact_risk.py)."""
    vocab = np.arange(1500)
    words = sorted(glove.word_index[w] for w in WORDS)
    prior = {int(w): float(60 - 3 * i) for i, w in enumerate(words)}
    return Space(glove.vectors, vocab), prior, {int(words[0]), int(words[5])}


@pytest.fixture()
def raw(tmp_path):
    """A small labelled Parquet input under tmp_path (the hostile-use refusal tests: ``refusals.py``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "raw"
    d.mkdir()
    pq.write_table(
        pa.table({"text": ["the city is quiet", "a dog ran home"], "label": ["a", "b"]}), d / "part-0.parquet"
    )
    return d
