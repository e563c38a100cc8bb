"""The executor bundle: what the driver writes is what an executor rebuilds, and it stays small."""

from __future__ import annotations

import numpy as np
import pytest

from dpspark.bundle import load_bundle, perturber_from, save_bundle
from dpspark.errors import EmbeddingError
from dpspark.geometry import geometry

SETTINGS = {"epsilon": 10.0, "oov": "unk", "oov_token": "[UNK]", "layout": "single", "nn": "exact", "nn_params": {}}


def test_default_vocabulary_ships_as_its_size(glove, tmp_path):
    rows = np.arange(3000)
    a = geometry(glove.vectors[rows], 1.0).a
    d = save_bundle(tmp_path / "b", glove, SETTINGS, rows, {1.0: a})
    # The default embedding and a prefix vocabulary: a few kilobytes, no row array.
    assert not (d / "vocab_rows.npy").exists() and not (d / "vectors.npy").exists()
    assert sum(p.stat().st_size for p in d.iterdir()) < 50_000
    res = load_bundle(d)
    assert np.array_equal(res.vocab_rows, rows) and res.index.size == 3000
    assert np.array_equal(res.a_by_lambda[1.0], a)
    rng = np.random.default_rng(0)
    assert perturber_from(res).perturb_texts(["the cat sat"], rng)[0].count(" ") == 2


def test_word_list_vocabulary_ships_its_rows(glove, tmp_path):
    rows = np.array([5, 17, 400, 1234] + list(range(2000, 2100)))
    d = save_bundle(tmp_path / "b", glove, SETTINGS, rows, {0.0: np.eye(glove.dim)})
    assert (d / "vocab_rows.npy").exists()
    assert np.array_equal(load_bundle(d).vocab_rows, rows)


def test_executor_refuses_another_default_embedding(glove, tmp_path):
    import json

    d = save_bundle(tmp_path / "b", glove, SETTINGS, np.arange(100), {0.0: np.eye(glove.dim)})
    meta = json.loads((d / "settings.json").read_text())
    meta["embeddings"]["sha256"] = "0" * 64
    (d / "settings.json").write_text(json.dumps(meta))
    with pytest.raises(EmbeddingError, match="differs from the driver"):
        load_bundle(d)
