"""The executor bundle: what the driver writes is what an executor rebuilds, and it stays small."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dpspark.arrow import strings
from dpspark.bundle import load_bundle, perturber_from, save_bundle
from dpspark.errors import EmbeddingError
from dpspark.mechanisms import Space, parse
from dpspark.mechanisms.geometry import geometry

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

SETTINGS = {
    "settings": [{"name": "mahalanobis", "epsilon": 10.0, "lambda": 1.0}],
    "oov": "unk",
    "oov_token": "[UNK]",
    "layout": "single",
    "nn": "exact",
    "nn_params": {},
}


def test_default_vocabulary_ships_as_its_size(glove, tmp_path):
    rows = np.arange(3000)
    space = Space(glove.vectors, rows)
    names = parse(SETTINGS["settings"][0]).prepare(space)  # Mahalanobis at λ = 1 prepares its noise matrix A
    d = save_bundle(tmp_path / "b", glove, SETTINGS, rows, artefacts=space.artefacts(names))
    # The default embedding and a prefix vocabulary: a few kilobytes, no row array.
    assert not (d / "vocab_rows.npy").exists() and not (d / "vectors.npy").exists()
    assert sum(p.stat().st_size for p in d.iterdir()) < 50_000
    res = load_bundle(d)
    assert np.array_equal(res.vocab_rows, rows) and res.index.size == 3000
    assert np.array_equal(res.mechanisms()[0].a, geometry(glove.vectors[rows], 1.0).a)  # the shipped A, not computed
    assert len(names) == 1 and names[0] in res.artefacts
    rng = np.random.default_rng(0)
    assert perturber_from(res).perturb_texts(["the cat sat"], rng)[0].count(" ") == 2


def test_an_executor_perturbs_without_importing_pandas(glove, tmp_path):
    """Loading a bundle and perturbing a batch, as a fresh Python worker does, never imports
    pandas (≈ 0.2 s per worker; dpspark.arrow): the output equals the in-process one."""
    d = save_bundle(tmp_path / "b", glove, SETTINGS, np.arange(3000))
    code = (
        "import sys, numpy as np; from dpspark.arrow import strings; "
        "from dpspark.bundle import load_bundle, perturber_from; "
        f"p = perturber_from(load_bundle({str(d)!r})); "
        "out, counts = p.perturb_array(strings(['the cat sat', None, 'zzqxv x']), np.random.default_rng(0)); "
        "print(out.to_pylist(), counts.tolist(), 'pandas' in sys.modules)"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    out, counts = perturber_from(load_bundle(d)).perturb_array(
        strings(["the cat sat", None, "zzqxv x"]), np.random.default_rng(0)
    )
    assert got == f"{out.to_pylist()} {counts.tolist()} False"


def test_word_list_vocabulary_ships_its_rows(glove, tmp_path):
    rows = np.array([5, 17, 400, 1234] + list(range(2000, 2100)))
    d = save_bundle(tmp_path / "b", glove, SETTINGS, rows)
    assert (d / "vocab_rows.npy").exists()
    assert np.array_equal(load_bundle(d).vocab_rows, rows)


def test_executor_refuses_another_default_embedding(glove, tmp_path):
    import json

    d = save_bundle(tmp_path / "b", glove, SETTINGS, np.arange(100))
    meta = json.loads((d / "settings.json").read_text())
    meta["embeddings"]["sha256"] = "0" * 64
    (d / "settings.json").write_text(json.dumps(meta))
    with pytest.raises(EmbeddingError, match="differs from the driver"):
        load_bundle(d)


def _user_embedding(glove, n=3000):
    from dpspark.embeddings import Embeddings

    return Embeddings(list(glove.words[:n]), np.array(glove.vectors[:n]), "/data/my-vectors.txt", "ab" * 32)


def test_user_embedding_is_shipped_without_a_shared_directory(glove, tmp_path):
    emb = _user_embedding(glove)
    d = save_bundle(tmp_path / "b", emb, SETTINGS, np.arange(3000))
    assert (d / "vectors.npy").exists() and (d / "words.arrow").exists()
    assert load_bundle(d).words.array.to_pylist() == emb.words


def test_user_embedding_travels_once_through_a_shared_directory(glove, tmp_path):
    emb = _user_embedding(glove)
    shared = tmp_path / "volume"
    shared.mkdir()
    first = save_bundle(tmp_path / "b1", emb, SETTINGS, np.arange(3000), embeddings_dir=str(shared))
    (store,) = shared.iterdir()  # stored once, content-addressed, no temporary left
    assert store.name == f"dpspark-embedding-{emb.sha256}"
    stamp = (store / "vectors.npy").stat().st_mtime_ns
    second = save_bundle(tmp_path / "b2", emb, SETTINGS, np.arange(3000), embeddings_dir=str(shared))
    assert (store / "vectors.npy").stat().st_mtime_ns == stamp and len(list(shared.iterdir())) == 1
    for d in (first, second):  # the bundles carry a reference only: a few kilobytes
        assert not (d / "vectors.npy").exists() and sum(p.stat().st_size for p in d.iterdir()) < 50_000
    res = load_bundle(second)
    assert res.words.array.to_pylist() == emb.words and np.array_equal(res.vectors, emb.vectors)
    rng = np.random.default_rng(0)
    assert perturber_from(res).perturb_texts(["the cat sat"], rng)[0].count(" ") == 2


def test_changed_shared_embedding_is_refused(glove, tmp_path):
    from dpspark import bundle

    emb = _user_embedding(glove)
    d = save_bundle(tmp_path / "b", emb, SETTINGS, np.arange(3000), embeddings_dir=str(tmp_path))
    store = tmp_path / f"dpspark-embedding-{emb.sha256}"
    v = np.load(store / "vectors.npy")
    v[0, 0] += 1.0
    np.save(store / "vectors.npy", v)
    bundle._VERIFIED.pop(str(store), None)
    with pytest.raises(EmbeddingError, match="changed since the driver stored it"):
        load_bundle(d)


def test_missing_shared_directory_is_a_clear_error(glove, tmp_path):
    with pytest.raises(EmbeddingError, match="does not exist: create it on storage that every executor"):
        save_bundle(tmp_path / "b", _user_embedding(glove), SETTINGS, embeddings_dir=str(tmp_path / "nope"))


def test_vocabulary_only_keeps_vocabulary_words_and_maps_the_others_to_their_nearest(glove, tmp_path):
    """compare's "vocabulary only" row: no noise, every word its nearest vocabulary word (itself when it
    is one), a token without a vector the placeholder, through the release's own text path."""
    rows = np.arange(3000)
    res = load_bundle(save_bundle(tmp_path / "b", glove, SETTINGS, rows))
    p = perturber_from(res, vocabulary_only=True)
    assert p.mechanism.spec is None and not p.text_level
    rare = next(w for w in ("zebras", "sunflowers", "kayaking") if glove.word_index[w] >= 3000)
    v = glove.vectors[glove.word_index[rare]].astype(np.float64)
    nearest = glove.words[int(np.argmin(np.linalg.norm(glove.vectors[:3000].astype(np.float64) - v, axis=1)))]
    assert max(glove.word_index[w] for w in "the people said".split()) < 3000
    out = p.perturb_texts(["the people said", f"a {rare} zzqxv", None], np.random.default_rng(0))
    assert out == ["the people said", f"a {nearest} [UNK]", None]
