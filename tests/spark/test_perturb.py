"""End-to-end: the perturb job and the Python API on a real local[2] Spark session."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark.cli import main
from dpspark.rng import SeededRunWarning

pytestmark = pytest.mark.spark

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"
FAST = ["--vocab-size", "5000", "--quiet"]


def run_cli(tmp_path, name, *extra, quiet=True):
    out = tmp_path / name
    flags = FAST if quiet else FAST[:-1]
    code = main(["perturb", "--input", str(SAMPLE), "--output", str(out), "--columns", "text,title", *flags, *extra])
    assert code == 0
    return out


def by_id(path):
    return {r["id"]: r for r in pq.read_table(path).to_pylist()}


@pytest.mark.runtime
def test_output_is_faithful(spark, tmp_path, check_faithful):
    out = run_cli(tmp_path, "o", "--epsilon", "10")
    check_faithful(out)
    assert spark.read.parquet(str(out)).schema == spark.read.parquet(str(SAMPLE)).schema


@pytest.mark.runtime
def test_manifest(spark, tmp_path):
    with pytest.warns(SeededRunWarning):
        out = run_cli(tmp_path, "m", "--epsilon", "10", "--seed", "987654321", quiet=False)
    text = (out / "_dpspark_manifest.json").read_text()
    m = json.loads(text)
    for key in (
        "dpspark_version",
        "mechanism",
        "epsilon",
        "lambda",
        "euclidean_epsilon_bound",
        "embeddings",
        "dimension",
        "vocabulary",
        "nearest_neighbour",
        "counts",
        "duration_s",
        "status",
        "timings",
    ):
        assert key in m, key
    assert m["status"] == "succeeded" and m["mechanism"] == "mahalanobis" and m["lambda"] == 1.0
    assert m["euclidean_epsilon_bound"] == pytest.approx(10 / np.sqrt(m["xi_min"]))
    assert len(m["embeddings"]["sha256"]) == 64 and m["dimension"] == 50 and m["vocabulary"]["size"] == 5000
    assert m["nearest_neighbour"]["method"] == "exact" and m["nearest_neighbour"]["recall_at_1"] == 1.0
    c = m["counts"]
    # Only what the published output shows: its rows, its tokens, its [UNK] placeholders.
    assert set(c) == {"rows", "tokens", "placeholders"}
    published = [t for r in pq.read_table(out).to_pylist() for col in ("text", "title") for t in (r[col] or "").split()]
    assert c["rows"] == 500 and c["tokens"] == len(published) and c["placeholders"] == published.count("[UNK]")
    # No seed, no key, no text in the manifest.
    assert "987654321" not in text and "seed" not in {k.lower() for k in m}
    assert "customer service" not in text and "Springfield" not in text


def test_seed_reproduces_and_warns_and_unseeded_runs_differ(spark, tmp_path):
    with pytest.warns(SeededRunWarning):
        a = run_cli(tmp_path, "a", "--epsilon", "10", "--seed", "7", quiet=False)
    with pytest.warns(SeededRunWarning):
        b = run_cli(tmp_path, "b", "--epsilon", "10", "--seed", "7", quiet=False)
    c = run_cli(tmp_path, "c", "--epsilon", "10")
    d = run_cli(tmp_path, "d", "--epsilon", "10")
    assert by_id(a) == by_id(b)
    assert by_id(c) != by_id(d) and by_id(c) != by_id(a)


@pytest.mark.runtime
def test_api_twice_evaluated_gives_identical_text(spark):
    df = spark.read.parquet(str(SAMPLE)).repartition(3, "id")
    out = dpspark.perturb_text(df, columns=["text"], epsilon=10, vocab_size=5000)
    first = {r["id"]: r["text"] for r in out.collect()}
    second = {r["id"]: r["text"] for r in out.collect()}
    assert first == second
    other = dpspark.perturb_text(df, columns=["text"], epsilon=10, vocab_size=5000)
    assert {r["id"]: r["text"] for r in other.collect()} != first
    assert out.schema == df.schema


def test_oov_never_verbatim_and_key_never_logged(spark, tmp_path, caplog, monkeypatch):
    secret = bytes.fromhex("00112233445566778899aabbccddeeff")
    import dpspark.run.perturb as job  # the job key and the preparation: the job on every engine

    monkeypatch.setattr(job, "new_job_key", lambda seed=None: secret)
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": ["call zqxwvkj at 555", "zqxwvkj zqxwvkj"]}), src)
    caplog.set_level(logging.DEBUG)
    out = tmp_path / "o"
    assert (
        main(["perturb", "--input", str(src), "--output", str(out), "--columns", "text", "--epsilon", "1000", *FAST])
        == 0
    )
    texts = [r["text"] for r in pq.read_table(out).to_pylist()]
    assert all("zqxwvkj" not in t for t in texts)
    logged = caplog.text + (out / "_dpspark_manifest.json").read_text()
    assert secret.hex() not in logged and str(secret) not in logged and "zqxwvkj" not in logged


def test_keep_original_is_opt_in(spark, tmp_path):
    with pytest.warns(dpspark.PrivacyWarning, match="NOT PRIVATE"):
        out = run_cli(tmp_path, "k", "--epsilon", "10", "--keep-original", quiet=False)
    row = next(r for r in pq.read_table(out).to_pylist() if r["text"])
    assert "text_original" in row and row["text_original"] == by_id(SAMPLE)[row["id"]]["text"]
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["keep_original"] is True and m["guarantee"].startswith("NONE: THIS OUTPUT IS NOT PRIVATE")
    assert any("keep_original" in note for note in m["outside_guarantee"])
    assert "text_original" not in pq.read_table(run_cli(tmp_path, "nk", "--epsilon", "10")).column_names


def test_laplace_and_annoy_paths(spark, tmp_path):
    out = run_cli(
        tmp_path, "l", "--epsilon", "40", "--mechanism", "laplace", "--nn", "annoy", "--recall-queries", "500"
    )
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["lambda"] == 0.0 and m["euclidean_epsilon_bound"] == pytest.approx(40.0)
    nn = m["nearest_neighbour"]
    assert nn["method"] == "annoy" and nn["recall_queries"] == 500 and 0 < nn["recall_at_1"] <= 1
    assert nn["params"]["n_trees"] == 50


def test_overwrite_mode_replaces_output(spark, tmp_path):
    out = run_cli(tmp_path, "w", "--epsilon", "10")
    (out / "marker").write_text("old")
    assert (
        main(
            [
                "perturb",
                "--input",
                str(SAMPLE),
                "--output",
                str(out),
                "--columns",
                "text",
                "--epsilon",
                "10",
                "--mode",
                "overwrite",
                "--allow-rerelease",  # the same records again: a re-release, on purpose
                *FAST,
            ]
        )
        == 0
    )
    assert not (out / "marker").exists() and (out / "_dpspark_manifest.json").exists()


@pytest.mark.runtime
def test_vocabulary_from_corpus_is_explicit_and_warned(spark, tmp_path, caplog, glove):
    src = tmp_path / "in.parquet"
    pool = [w for w in glove.words[200:600] if w.isalpha()][:120]
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(pool, 12)) for _ in range(200)]
    pq.write_table(pa.table({"id": list(range(len(corpus))), "text": corpus}), src)
    out = tmp_path / "o"
    args = ["perturb", "--input", str(src), "--output", str(out), "--columns", "text", "--epsilon", "5"]
    with pytest.warns(dpspark.PrivacyWarning, match="derived from the private corpus"):
        assert main([*args, "--vocab-from-corpus", "--vocab-size", "80"]) == 0
    words = {w for r in pq.read_table(out).to_pylist() for w in r["text"].split()}
    assert words <= set(" ".join(corpus).split())
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert "data-dependent" in m["vocabulary"]["source"] and m["vocabulary"]["size"] == 80


@pytest.mark.runtime
def test_read_splits_one_task_for_a_tiny_input_several_for_a_large_one(spark, tmp_path, glove):
    from dpspark.spark import io

    def tasks(path):
        with io.SqlConf(spark, io.read_splits(spark, path.stat().st_size, None)):
            return spark.read.parquet(str(path)).rdd.getNumPartitions()

    # 16 KB in one row group: one task (Spark alone would cut it per core, the extra splits empty).
    assert tasks(SAMPLE) == 1
    rng = np.random.default_rng(0)
    words = np.asarray(glove.words[:20000], dtype=object)
    texts = [" ".join(row) for row in words[rng.integers(0, len(words), size=(16_000, 20))]]
    big = tmp_path / "big.parquet"
    pq.write_table(pa.table({"text": texts}), big, row_group_size=1000)
    assert big.stat().st_size > 8 * (64 << 10)
    assert tasks(big) >= 4 * spark.sparkContext.defaultParallelism  # about four per core


def test_user_embedding_from_a_shared_directory(spark, tmp_path, glove):
    # A user's GloVe-format file; --embeddings-dir stores it once where executors read it.
    src = tmp_path / "vectors.txt"
    with open(src, "w", encoding="utf-8") as f:
        for w, v in zip(glove.words[:6000], glove.vectors[:6000]):
            f.write(w + " " + " ".join(f"{x:.5f}" for x in v) + "\n")
    shared = tmp_path / "volume"
    shared.mkdir()
    flags = ["--epsilon", "10", "--embeddings", str(src), "--embeddings-dir", str(shared)]
    first, second = run_cli(tmp_path, "o1", *flags), run_cli(tmp_path, "o2", *flags)
    (store,) = shared.iterdir()
    assert store.name.startswith("dpspark-embedding-") and (store / "vectors.npy").exists()
    vocab = set(glove.words[:5000]) | {"[UNK]"}
    for out in (first, second):
        texts = [r["text"] for r in by_id(out).values() if r["text"]]
        assert texts and all(set(t.split()) <= vocab for t in texts)
    m = json.loads((second / "_dpspark_manifest.json").read_text())
    assert m["embeddings"]["name"] == str(src)


def _fresh_perturb(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    """`dpspark perturb` of the sample in a fresh process, whose local JVM dpspark starts with its
    own settings (none of the test session's JVM options, submit arguments or local IP)."""
    unset = ("SPARK_SUBMIT_OPTS", "PYSPARK_SUBMIT_ARGS", "SPARK_LOCAL_IP")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    args = ["perturb", "--input", str(SAMPLE), "--output", str(tmp_path / "out"), "--columns", "text"]
    args += ["--vocab-size", "2000", "--epsilon", "10", "--master", "local[1]", *extra]
    code = f"import sys; from dpspark.cli import main; sys.exit(main({args!r}))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.runtime
def test_quiet_command_prints_its_result_and_nothing_else(tmp_path):
    """--quiet in a fresh process: no Spark log lines (the loopback host, native Hadoop, "Setting
    default log level", I/O encryption without RPC encryption), no logs, and not the java launcher's own notice
    of Spark 4's incubator module (its JVM starts with --add-modules=jdk.incubator.vector: dpspark drops that
    line while the JVM starts). The result still prints: one line on stdout naming the output, the engine and
    the manifest's public counts; stderr is empty."""
    done = _fresh_perturb(tmp_path, "--quiet")
    out = tmp_path / "out"
    counts = json.loads((out / "_dpspark_manifest.json").read_text())["counts"]
    assert set(counts) == {"rows", "tokens", "placeholders"} and counts["rows"] == 500
    shown = ", ".join(f"{v:,} {k}" for k, v in counts.items())
    assert done.stdout == f"dpspark perturb: released {out} (engine: spark): {shown}; manifest and ledger beside it\n"
    assert "incubator" not in done.stderr and done.stderr.strip() == "", done.stderr


@pytest.mark.runtime
def test_local_command_binds_to_loopback_without_a_warning(tmp_path):
    """Without --quiet, a fresh local run logs its events but not Spark's "hostname resolves to
    a loopback address" warning: a local JVM talks only to itself, so dpspark binds it to
    127.0.0.1 (SPARK_LOCAL_IP, unless the user set one)."""
    done = _fresh_perturb(tmp_path)
    assert '"event": "perturb_finished"' in done.stderr
    assert "loopback" not in done.stderr and "SPARK_LOCAL_IP" not in done.stderr, done.stderr


@pytest.mark.runtime
def test_an_input_of_one_large_row_group_is_spread_over_every_core(spark, tmp_path, glove):
    """Parquet splits at row-group boundaries only: a one-group file of over 2 MiB would run as one
    task on a two-core session. The session encrypts local I/O, so the release spreads its rows over
    both cores through the (encrypted) shuffle and says so in the manifest; the same rows in many
    groups read as several tasks and are not shuffled. Neither draws the few-tasks warning, whose
    text (for sessions without encryption) names the cause and both fixes and no input figure."""
    from dpspark.errors import DPSparkWarning
    from dpspark.spark import io

    assert io.encrypts_local_io(spark)
    EPS10_SMALL = ["--epsilon", "10", "--vocab-size", "2000"]
    # Bytes, not tokens, decide the splits: few long random tokens (out of the vocabulary, so
    # no search) make a file of over 2 MiB that perturbs in seconds.
    rng = np.random.default_rng(1)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    texts = [" ".join("".join(rng.choice(letters, 24)) for _ in range(4)) for _ in range(24_000)]
    one, many = tmp_path / "one.parquet", tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": texts}), one)  # one row group (pyarrow: up to 1 M rows each)
    pq.write_table(pa.table({"text": texts}), many, row_group_size=2_000)
    assert pq.ParquetFile(one).metadata.num_row_groups == 1
    assert one.stat().st_size > 2 * io.WORTH_A_CORE  # enough for a split per core

    def release(src, name):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = tmp_path / name
            assert main(["perturb", "--input", str(src), "--output", str(out), "--columns", "text"] + EPS10_SMALL) == 0
        manifest = json.loads((out / "_dpspark_manifest.json").read_text())
        assert manifest["counts"]["rows"] == len(texts)
        with_rows = [f for f in out.glob("*.parquet") if pq.ParquetFile(f).metadata.num_rows > 0]
        return manifest, len(with_rows), [str(w.message) for w in caught if issubclass(w.category, DPSparkWarning)]

    manifest, files, said = release(one, "out_one")
    assert manifest["spread"] == {"tasks": 2, "local_io_encrypted": True} and files == 2
    assert not [w for w in said if "row group" in w]
    manifest, files, said = release(many, "out_many")
    assert manifest["spread"] is None and files >= 2 and not [w for w in said if "row group" in w]
    # Without encryption the rows stay put and the warning names the cause, not the input's size.
    splits = io.read_splits(spark, one.stat().st_size, None)
    fs = io.FileSystem(spark)
    assert io.spread_tasks(fs, [str(one)], 2) == 2 and io.spread_tasks(fs, [str(many)], 2) is None
    # Repetitive text compresses many times over: the footers' uncompressed size decides, not the file's.
    repeated = tmp_path / "repeated.parquet"
    pq.write_table(pa.table({"text": ["the city is quiet tonight and the river runs"] * 100_000}), repeated)
    assert repeated.stat().st_size < io.WORTH_A_CORE and io.spread_tasks(fs, [str(repeated)], 2) == 2
    assert io.spread_tasks(fs, [str(repeated)], 1) is None  # one core: nothing to spread over
    written = tmp_path / "one_task"
    written.mkdir()
    pq.write_table(pa.table({"text": texts}), written / "part-00000-x.parquet")
    said = io.few_read_tasks(fs, str(written), one.stat().st_size, splits, 2)
    assert "read as 1 task(s) with rows for 2 cores" in said and "spark.io.encryption.enabled" in said
    assert "row_group_size=" in said and "MiB" not in said


@pytest.mark.parametrize(
    "name,flags,parameters",
    [
        ("vickrey", ["--t", "0.25"], {"t": 0.25, "lambda": 0.0}),
        ("tem", ["--beta", "0.01"], {"beta": 0.01}),
        ("santext", [], {}),
    ],
)
def test_every_mechanism_releases_with_its_own_guarantee(spark, tmp_path, check_faithful, name, flags, parameters):
    """perturb takes every registered mechanism: a faithful output, and a manifest that names the
    mechanism, its parameters, its guarantee type and sentence and its paper."""
    out = run_cli(tmp_path, name, "--epsilon", "5", "--mechanism", name, *flags)
    check_faithful(out)
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["mechanism"] == name and m["epsilon"] == 5.0
    assert m["mechanism_parameters"] == {"name": name, "epsilon": 5.0, **parameters}
    assert m["guarantee_type"] == "metric" and m["paper"] and "5" in m["guarantee"]
    assert ("euclidean_epsilon_bound" in m) == (name == "vickrey")
    (entry,) = [json.loads(f.read_text()) for f in (out / "_dpspark_ledger").glob("*.json")]
    assert entry["mechanism"] == name and entry["epsilon"] == 5.0


def test_a_parameter_of_another_mechanism_is_refused(spark, tmp_path, capsys):
    out = tmp_path / "o"
    code = main(["perturb", "--input", str(SAMPLE), "--output", str(out), "--columns", "text", "--epsilon", "5",
                 "--mechanism", "laplace", "--t", "0.5"])  # fmt: skip
    assert code == 2 and "t: is not a parameter of laplace" in capsys.readouterr().err and not out.exists()


def test_perturb_text_takes_a_mechanism_and_its_parameters(spark):
    df = spark.read.parquet(str(SAMPLE)).limit(20)
    out = dpspark.perturb_text(df, "text", 3.0, mechanism="tem", gamma=3.0, vocab_size=5000).collect()
    assert len(out) == 20 and all(isinstance(r["text"], str) or r["text"] is None for r in out)


def test_an_epsilon_that_keeps_most_tokens_warns_and_the_manifest_says_how_many(spark, tmp_path):
    with pytest.warns(dpspark.PrivacyWarning, match=r"about \d+% of tokens unchanged"):
        out = run_cli(tmp_path, "large", "--epsilon", "60", "--mechanism", "laplace", quiet=False)
    m = json.loads((out / "_dpspark_manifest.json").read_text())["expected_unchanged"]
    assert m["warned"] and m["share"] > 0.9 and m["method"] == "estimated" and m["words"] == 200
    with warnings.catch_warnings():
        warnings.simplefilter("error", dpspark.PrivacyWarning)
        out = run_cli(tmp_path, "usual", "--epsilon", "5", "--mechanism", "tem", quiet=False)
    m = json.loads((out / "_dpspark_manifest.json").read_text())["expected_unchanged"]
    assert not m["warned"] and m["share"] < 0.9 and m["method"] == "exact"
