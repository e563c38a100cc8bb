"""Hostile and careless use, round 4 (issue 30), the parts that need no JVM: cached artefacts carry a
digest of what they were computed from and of their own bytes (defects 5 and 12), the shared embedding
store is checked against the embedding (5), a cache directory that is a file is refused in one line
(12), and a full disk reported by Spark is exit 5 in one line (10)."""

from __future__ import annotations

import errno
import logging
import os

import numpy as np
import pytest

from dpspark import jvm_cache
from dpspark.bundle import save_bundle, store_embedding
from dpspark.cli import explain_failure
from dpspark.errors import ConfigError, EmbeddingError
from dpspark.mechanisms import Space, parse
from dpspark.prepare import cache_dir

V = 2000


def _cached(directory):
    return sorted(directory.glob("dpspark-artefact-*.npy"))


@pytest.fixture
def custext_cache(glove, tmp_path):
    """CusText+'s groups (K = 20) computed once and kept in a cache directory: (spec, groups, cache file)."""
    spec = parse({"name": "custext-plus", "epsilon": 5, "top_k": 20})
    groups = np.array(spec.groups(Space(glove.vectors, np.arange(V), cache_dir=tmp_path, words=glove.word_rows)))
    (path,) = _cached(tmp_path)
    return spec, groups, path


def test_a_replaced_custext_group_table_is_computed_again(glove, tmp_path, custext_cache, caplog):
    """Defect 5: one group per word (a well-formed array of the right shape) in place of the cached table
    made every vocabulary word its own output. Its bytes no longer match the digest beside it: the groups
    are computed again (and said in one line), the cache is repaired, and a third run reads it."""
    spec, groups, path = custext_cache
    forged = np.arange(groups.size, dtype=groups.dtype).reshape(groups.shape)
    assert not np.array_equal(forged, groups)
    np.save(path, forged)
    with caplog.at_level(logging.WARNING, logger="dpspark"):
        again = spec.groups(Space(glove.vectors, np.arange(V), cache_dir=tmp_path, words=glove.word_rows))
    np.testing.assert_array_equal(again, groups)
    said = [r.getMessage() for r in caplog.records if "does not match its digest" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0]
    np.testing.assert_array_equal(np.load(path), groups)  # repaired on disk
    # Without the words the groups cannot be computed: the third space can only have read the repaired file.
    np.testing.assert_array_equal(spec.groups(Space(glove.vectors, np.arange(V), cache_dir=tmp_path)), groups)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(b"not an array at all"),  # corrupt
        lambda p: p.write_bytes(p.read_bytes()[:100]),  # truncated
        lambda p: np.save(p, np.zeros((3, 2))),  # wrong shape
        lambda p: p.with_name(p.name + ".sha256").unlink(),  # its digest lost
    ],
    ids=["corrupt", "truncated", "wrong-shape", "no-digest"],
)
def test_a_damaged_cache_file_is_computed_again_and_poisons_no_later_run(glove, tmp_path, custext_cache, damage):
    """Defect 12: a corrupt or wrong-shape cache file gave a traceback in every later run until someone
    deleted it by hand. Now it is computed again and rewritten: the next run reads a sound file."""
    spec, groups, path = custext_cache
    damage(path)
    again = spec.groups(Space(glove.vectors, np.arange(V), cache_dir=tmp_path, words=glove.word_rows))
    np.testing.assert_array_equal(again, groups)
    np.testing.assert_array_equal(spec.groups(Space(glove.vectors, np.arange(V), cache_dir=tmp_path)), groups)
    assert _cached(tmp_path) == [path]


def test_a_cache_directory_that_is_a_file_is_refused_in_one_line(tmp_path, monkeypatch):
    """Defect 12: a cache directory that is a file; both ways of naming it ($DPSPARK_CACHE_DIR, --embeddings-dir)."""

    class Run:
        embeddings_dir = None

    blocker = tmp_path / "cache"
    blocker.write_bytes(b"a file")
    monkeypatch.setenv("DPSPARK_CACHE_DIR", str(blocker))
    with pytest.raises(ConfigError) as refused:
        cache_dir(Run())
    assert str(refused.value) == (
        f"the artefact cache {blocker} is a file, not a directory: remove it or name a directory ($DPSPARK_CACHE_DIR)"
    )
    Run.embeddings_dir = str(blocker)
    with pytest.raises(ConfigError, match=r"the embeddings directory .* is a file.*\(--embeddings-dir\)$"):
        cache_dir(Run())
    assert blocker.read_bytes() == b"a file"


def test_a_changed_shared_embedding_store_is_refused(glove, tmp_path):
    """Defect 5: --embeddings-dir is a shared volume; a store whose vectors another user changed was
    trusted (executors check the files against the digest the driver took of those same files)."""
    from dpspark.embeddings import Embeddings

    emb = Embeddings(list(glove.words[:3000]), np.array(glove.vectors[:3000]), "/data/my-vectors.txt", "ab" * 32)
    store, _ = store_embedding(emb, tmp_path)
    vectors = np.load(store / "vectors.npy")
    vectors[0] = vectors[1]  # "the" now sits where "," does
    np.save(store / "vectors.npy", vectors)
    before = (store / "vectors.npy").read_bytes()
    with pytest.raises(EmbeddingError) as refused:
        save_bundle(tmp_path / "b", emb, {"settings": []}, np.arange(3000), embeddings_dir=str(tmp_path))
    assert str(refused.value) == (
        f"the stored embedding {store} does not hold the embedding /data/my-vectors.txt it is named after (changed "
        "or damaged): remove that directory, and dpspark stores it again"
    )
    assert (store / "vectors.npy").read_bytes() == before


def test_a_full_disk_reported_by_spark_is_exit_5_in_one_line(capsys):
    """Defect 10: Spark reports a full disk as its own exception types (a failed job, a Java IOException),
    not as Python's OSError: it was exit 1 with a traceback."""
    failure = RuntimeError(
        "An error occurred while calling o123.parquet.\n: org.apache.spark.SparkException: Job aborted due to "
        f"stage failure: java.io.IOException: {os.strerror(errno.ENOSPC)}\n\tat java.io.FileOutputStream.writeBytes"
    )
    assert explain_failure("perturb", failure) == 5
    err = capsys.readouterr().err
    assert err == "dpspark perturb: error: a disk is full: free space or choose another --output\n"


@pytest.mark.parametrize("how", ["embeddings-dir", "cache-env", "cache-is-a-file"])
def test_a_store_or_cache_inside_the_input_is_refused_before_spark_starts(tmp_path, monkeypatch, capsys, how):
    """Defects 2 and 12, before any Spark work: a local input, and the embeddings directory or the artefact
    cache inside it (or a cache directory that is a file) are refused by the command's preflight, without
    starting a session (the command's Spark side would fail the test) and without a byte written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import dpspark.spark.perturb
    from dpspark.cli import main

    def no_spark(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the command reached Spark")

    monkeypatch.setattr(dpspark.spark.perturb, "run_perturb", no_spark)
    data = tmp_path / "in"
    data.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "text": ["the city is quiet", "a dog ran home"]}), data / "p0.parquet")
    where = []
    if how == "embeddings-dir":
        where = ["--embeddings-dir", str(data)]
    elif how == "cache-env":
        monkeypatch.setenv("DPSPARK_CACHE_DIR", str(data / "cache"))
    else:
        (tmp_path / "cache").write_bytes(b"a file")
        monkeypatch.setenv("DPSPARK_CACHE_DIR", str(tmp_path / "cache"))
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = ["perturb", "--input", str(data), "--output", str(tmp_path / "out"), "--columns", "text"]
    code = main([*argv, "--epsilon", "1000", "--mechanism", "truncated-gumbel", *where, "--quiet"])
    err = capsys.readouterr().err
    assert code == ConfigError.exit_code, err
    assert len(err.strip().splitlines()) == 1
    if how == "cache-is-a-file":
        assert "the artefact cache" in err and "is a file, not a directory" in err
    else:
        what = "the embeddings directory" if how == "embeddings-dir" else "the artefact cache"
        assert f"error: {what} " in err
        assert f"lies inside the input {data}: dpspark would write into the raw data" in err
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_the_artefact_cache_follows_the_xdg_cache_directory(tmp_path, monkeypatch):
    """$DPSPARK_CACHE_DIR, else $XDG_CACHE_HOME/dpspark, else ~/.cache/dpspark; the JVM's class cache sits
    beside it (jvm/) under the same rule."""

    class Run:
        embeddings_dir = None

    monkeypatch.delenv("DPSPARK_CACHE_DIR", raising=False)
    monkeypatch.delenv("DPSPARK_JVM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir(Run()) == tmp_path / "home" / ".cache" / "dpspark"
    assert jvm_cache.folder() == tmp_path / "home" / ".cache" / "dpspark" / "jvm"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir(Run()) == tmp_path / "xdg" / "dpspark"
    assert jvm_cache.folder() == tmp_path / "xdg" / "dpspark" / "jvm"
    monkeypatch.setenv("DPSPARK_CACHE_DIR", str(tmp_path / "own"))
    assert cache_dir(Run()) == tmp_path / "own"
