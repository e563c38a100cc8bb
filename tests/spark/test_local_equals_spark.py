"""Spark = local: for one seed, privacy-stats (and calibrate on it), privacy-risk, evaluate-utility and compare give
the same figures on Spark and on the local engine (``--engine local``): the draws are keyed by work item (a
document's by its row, a release batch's by its partition and number), never by where they run."""

from __future__ import annotations

import contextlib
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.cli import main
from dpspark.errors import PrivacyWarning

pytestmark = pytest.mark.spark  # a Spark = local test per command also runs per runtime (marked below)

TEXTS = [
    "the city is quiet tonight and the river is calm",
    "call london now to win a prize",
    "free money for the city of london",
    "the dog ran home to the river in london",
    None,
]


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def run_both(tmp_path, argv: list[str]) -> dict[str, dict]:
    manifests = {}
    for engine in ("spark", "local"):
        out = tmp_path / engine
        with pytest.warns(UserWarning, match="seed"):
            assert main([*argv, "--engine", engine, "--output", str(out), "--seed", "11"]) == 0
        manifests[engine] = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifests["local"]["engine"] == "local" and manifests["spark"]["engine"] == "spark"
    return manifests


@pytest.mark.parametrize(
    "unit",  # a person's unit (column:user) once, in make test: the document's path with the people's count
    [pytest.param("token", marks=pytest.mark.runtime), pytest.param("document", marks=pytest.mark.runtime), "column"],
)
def test_privacy_stats_is_the_same_on_both_engines(spark, tmp_path, unit):
    """Per token on 30 sampled words; per document on a corpus's words, its rows' shape over two columns (one
    null) counted where the rows are; per person (column:user), each person's tokens over their rows counted
    per keyed hash where the rows are."""
    argv = ["privacy-stats", "--mechanisms", "laplace,custext", "--runs", "12", "--words", "30"]
    if unit == "token":
        argv += ["--epsilons", "5"]
    else:
        corpus = tmp_path / "corpus.parquet"
        table = {"text": TEXTS, "title": ["london", None, "the river", "", "city"], "user": ["a", "b", "a", "c", "b"]}
        pq.write_table(pa.table(table), corpus)
        argv += [
            "--corpus",
            str(corpus),
            "--columns",
            "text,title",
            "--privacy-unit",
            unit.replace("column", "column:user"),
        ]
        argv += ["--unit-budgets", "40"]
    manifests = run_both(tmp_path, [*argv, "--vocab-size", "2000"])
    a, b = (pq.read_table(tmp_path / e / "per_word.parquet") for e in ("spark", "local"))
    assert a.num_rows == 2 * (30 if unit == "token" else manifests["local"]["words"]) and a.schema == b.schema
    assert same(a.to_pylist(), b.to_pylist())
    if unit == "column":  # a: 11 + 9, b: 7 + 1, c: 9 tokens: measured at 40/9
        assert manifests["spark"]["unit_counts"] == manifests["local"]["unit_counts"]
        assert manifests["spark"]["unit_counts"]["tokens_per_unit"] == {"min": 8, "median": 9, "max": 20}
        assert set(a.column("token_epsilon").to_pylist()) == {40 / 9}
    if unit == "document":  # rows of 10 + 1, 7 + 0, 7 + 2, 9 + 0 and 0 + 1 tokens: measured at 40/9
        assert manifests["spark"]["unit_counts"] == manifests["local"]["unit_counts"]
        assert manifests["spark"]["unit_counts"]["tokens_per_unit"] == {"min": 1, "median": 9, "max": 11}
        assert set(a.column("token_epsilon").to_pylist()) == {40 / 9} and a.num_rows > 2 * 15
    # calibrate beside each engine's statistics, on that engine: the same calibration
    for engine in ("spark", "local"):
        argv = ["calibrate", "--stats", str(tmp_path / engine), "--max-nw-fraction", "0.5", "--min-sw", "3"]
        assert main([*argv, "--engine", engine, "--quiet"]) == 0
    a, b = (json.loads((tmp_path / e / "calibration.json").read_text()) for e in ("spark", "local"))
    assert same(a, b) and a["per_setting"]


@pytest.mark.parametrize("unit", [pytest.param("token", marks=pytest.mark.runtime), "column"])
def test_privacy_risk_is_the_same_on_both_engines(spark, tmp_path, unit):
    """Per token, and per person (column:user, once in make test: each person's tokens counted where the rows
    are, each budget measured at the median person's per-token ε)."""
    data = tmp_path / "corpus.parquet"
    users = ["a", "b", "a", "c", "b"]
    pq.write_table(pa.table({"text": TEXTS, "user": users}), data)  # one file, one partition: row ids are positions
    words = tmp_path / "sensitive.txt"
    words.write_text("London\nriver\n")
    argv = ["privacy-risk", "--input", str(data), "--text-column", "text", "--mechanisms", "laplace,santext"]
    argv += ["--epsilons", "5"] if unit == "token" else ["--privacy-unit", "column:user", "--unit-budgets", "90"]
    argv += ["--runs", "8", "--vocab-size", "2000", "--sensitive-words", str(words)]
    manifests = run_both(tmp_path, argv)
    if unit == "column":  # a: 10 + 7, b: 7 + 0, c: 9 tokens
        assert manifests["spark"]["unit_counts"] == manifests["local"]["unit_counts"]
        assert manifests["local"]["unit_counts"]["tokens_per_unit"] == {"min": 7, "median": 9, "max": 17}
    a, b = (pq.read_table(tmp_path / e / "risk.parquet") for e in ("spark", "local"))
    assert a.num_rows == 2 and a.schema == b.schema
    assert same(a.to_pylist(), b.to_pylist())
    assert a.column("doc_rows").to_pylist() == [4, 4]  # every row holding london or river
    assert manifests["spark"]["corpus"] == manifests["local"]["corpus"]


@pytest.mark.parametrize(
    "unit",  # per person once, in make test: the document's path with the people's count over both halves
    [
        pytest.param(["--privacy-unit", "document"], marks=pytest.mark.runtime, id="document"),
        pytest.param(["--privacy-unit", "column:user", "--allocation", "cap:40"], id="column-cap"),
    ],
)
def test_evaluate_utility_is_the_same_on_both_engines(tmp_path, sms120, unit):
    """The same split (a keyed hash of each row), the same perturbed copies (one task: batch i draws from
    (key, 0, i) on both), the same fit: results.parquet equal, value for value. Under a document unit, so that the
    units' shape (tokens per row, counted where the rows are) and the allocated draws are compared too (compare's
    test below takes the token unit); per person under a cap, so that each person's walk over both halves (the
    count over train's partitions then test's, and where each person's cap falls) is compared too."""
    data = sms120
    if "column:user" in unit:  # 12 users of 10 messages each, in both halves
        table = pq.read_table(sms120)
        data = str(tmp_path / "users.parquet")
        pq.write_table(table.append_column("user", pa.array([f"u{i % 12}" for i in range(table.num_rows)])), data)
    argv = ["evaluate-utility", "--input", data, "--text-column", "text", "--label-column", "label", *unit]
    argv += ["--unit-budgets", "50", "--lambdas", "0,1", "--mode", "both"]
    manifests = run_both(tmp_path, [*argv, "--repeats", "1", "--vocab-size", "2000"])
    a, b = (pq.read_table(tmp_path / e / "results.parquet") for e in ("spark", "local"))
    assert a.num_rows == 5 and a.schema == b.schema  # the baseline, 2 settings × 2 modes
    assert same(a.to_pylist(), b.to_pylist())
    for key in ("rows", "classes", "split", "model_params", "settings", "unit_counts", "token_epsilons"):
        assert manifests["spark"][key] == manifests["local"][key], key
    if "column:user" in unit:
        assert manifests["local"]["unit_counts"]["units"] == 12 and manifests["local"]["unit_counts"]["tokens_over_cap"]


@pytest.mark.runtime
def test_compare_is_the_same_on_both_engines(tmp_path, sms120):
    """compare's whole table (utility, the attacker, Nw/Sw, the text metrics) and its equal-privacy table, equal
    on both engines but the seconds each setting took: compare's Spark = local test, per runtime (as each
    command's); its figures on Spark, end to end, are tests/spark/test_compare.py's (make test)."""
    argv = ["compare", "--input", sms120, "--text-column", "text", "--label-column", "label", "--repeats", "1"]
    argv += ["--mechanisms", "laplace,tem", "--epsilons", "10", "--runs", "4", "--vocab-size", "2000"]
    manifests = run_both(tmp_path, argv)
    for name in ("compare.parquet", "equal_privacy.parquet"):
        a, b = (pq.read_table(tmp_path / e / name) for e in ("spark", "local"))
        if "time_s" in a.schema.names:
            a, b = a.drop(["time_s"]), b.drop(["time_s"])
        assert a.num_rows >= 1 and a.schema == b.schema, name
        assert same(a.to_pylist(), b.to_pylist()), name
    assert manifests["spark"]["recommended"] == manifests["local"]["recommended"]


@pytest.mark.runtime
@pytest.mark.parametrize("model", ["tfidf-logreg", "embedding-logreg"])
def test_the_classifier_is_the_same_on_both_engines(spark, tmp_path, model):
    """evaluate-utility's and compare's classifier: Spark's driver fit (the features computed on the executors,
    in Arrow batches of 40 rows) and the local engine's of the same rows give the same weights and the same
    scores, bit for bit."""
    from pyspark.sql import functions as F

    from dpspark.config import PerturbConfig
    from dpspark.embeddings import embeddings_of
    from dpspark.prepare import prepare
    from dpspark.run.local import LocalBackend
    from dpspark.run.settings import LABEL, TEXT
    from dpspark.spark import io
    from dpspark.spark.sparkbackend import SparkBackend

    words = "free prize win call now city river london dog home quiet calm money the a to".split()
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(words, 6)) for _ in range(150)]
    labels = [float(("free" in t) or ("prize" in t)) for t in texts]
    table = pa.table({TEXT: texts, LABEL: labels})
    df = spark.createDataFrame(table.to_pandas()).coalesce(1).select(F.col(TEXT), F.col(LABEL))
    config = PerturbConfig(columns=[TEXT], epsilon=5.0, vocab_size=2000)
    prepared = prepare(config, embeddings_of(config))
    spark_backend, local = SparkBackend(spark, "t"), LocalBackend("t")
    with local:
        ships = [spark_backend.ship(prepared.write_bundle), local.ship(prepared.write_bundle)]
        try:
            with io.SqlConf(spark, {"spark.sql.execution.arrow.maxRecordsPerBatch": "40"}):
                on_spark = spark_backend.classifier(model, 2)
                fitted = on_spark.fit(df, ships[0].name)
                spark_scores = on_spark.score(fitted, df, ships[0].name)
            here = local.classifier(model, 2)
            fitted_here = here.fit(table, ships[1].name)
            assert fitted.weights.tobytes() == fitted_here.weights.tobytes()
            assert same(spark_scores, here.score(fitted_here, table, ships[1].name))
            assert spark_scores["accuracy"] > spark_scores["majority_rate"]
        finally:
            ships[0].close()


# What a release's manifest says of where and when it ran: every other field is the same on both engines.
RUN_FIELDS = ("run_id", "started_at", "finished_at", "duration_s", "timings", "output", "engine", "spark", "ledger")


@pytest.mark.parametrize(
    "unit",
    [  # per runtime the token unit: the units are variants of that path (tests/spark/test_privacy_units.py's)
        pytest.param(["--epsilon", "8"], marks=pytest.mark.runtime, id="token"),
        pytest.param(["--privacy-unit", "document", "--unit-budget", "60", "--allocation", "cap:6"], id="document-cap"),
        pytest.param(["--privacy-unit", "column:user", "--unit-budget", "60"], id="column"),
        pytest.param(
            ["--mechanism", "syntf", "--privacy-unit", "document", "--unit-budget", "30", "--keep-original"],
            id="syntf-document",
        ),
        pytest.param(  # each person's draws counted by the shipped bundle, the bundle shipped again with the table
            ["--mechanism", "syntf", "--privacy-unit", "column:user", "--unit-budget", "30", "--allocation", "cap:8"],
            id="syntf-column",
        ),
    ],
)
def test_perturb_is_the_same_on_both_engines(spark, tmp_path, unit):
    """perturb's release of one file (one task on Spark: batch i draws from (key, 0, i) on both): the same text,
    the same placeholders and the same manifest and ledger entry but where and when it ran; per token, per
    document under a cap, per person (the count pass and the walk through each person's tokens), and SynTF's
    synthetic documents per document with their term-frequency columns and the raw text kept on request, and per
    person under a cap (each person's draws counted where the rows are)."""
    data = tmp_path / "input.parquet"
    user = ["ann", "bob", "ann", "cy", "bob"]
    pq.write_table(pa.table({"text": TEXTS, "title": ["london", None, "the river", "", "city"], "user": user}), data)
    argv = ["perturb", "--input", str(data), "--columns", "text,title", "--vocab-size", "2000", *unit]
    with contextlib.ExitStack() as kept:
        if "--keep-original" in unit:  # said on both engines, as every run says it
            kept.enter_context(pytest.warns(PrivacyWarning, match="THIS OUTPUT IS NOT PRIVATE"))
        manifests = run_both(tmp_path, argv)
    a, b = (pq.read_table(tmp_path / e) for e in ("spark", "local"))
    columns = ["text", "title", "user"]
    if "syntf" in unit:  # its term frequencies, then the raw text kept on request, per text column
        columns += ["text_tf", "title_tf"] + (["text_original", "title_original"] if "--keep-original" in unit else [])
    assert a.num_rows == 5 and a.column_names == b.column_names == columns and a.schema == b.schema
    assert a.to_pylist() == b.to_pylist()
    assert a.column("user").to_pylist() == user and a.column("text").to_pylist() != TEXTS
    spark_m, local_m = ({k: v for k, v in m.items() if k not in RUN_FIELDS} for m in manifests.values())
    assert spark_m["input"] == local_m["input"] or spark_m["input"].endswith(local_m["input"])
    assert same({**spark_m, "input": None}, {**local_m, "input": None})
    entries = [m["ledger"]["releases"] for m in manifests.values()]
    assert entries[0] == entries[1] == 1
    if "--unit-budget" in unit:
        assert local_m["unit_counts"]["units"] == (5 if "document" in unit else 3)


@pytest.mark.parametrize("source", ["vectors", "text"])
def test_release_vectors_is_the_same_on_both_engines(spark, tmp_path, source):
    """release-vectors of one file: PrivEmb of a float column (Φ drawn from the seed's own stream, the same file on
    both) and M1 of a text column's mean word vectors (the embedding shipped as a bundle): the same vectors, bit
    for bit, and the same manifest but where and when it ran."""
    data = tmp_path / "input.parquet"
    rng = np.random.default_rng(3)
    vectors = [rng.normal(size=8).astype(np.float32).tolist() for _ in range(5)]
    vectors[2] = None
    pq.write_table(pa.table({"vec": pa.array(vectors, pa.list_(pa.float32())), "text": TEXTS}), data)
    argv = ["release-vectors", "--input", str(data), "--epsilon", "5"]
    argv += ["--column", "vec", "--dim", "4"] if source == "vectors" else ["--column", "text", "--mechanism", "m1"]
    manifests = run_both(tmp_path, argv)
    a, b = (pq.read_table(tmp_path / e) for e in ("spark", "local"))
    assert a.schema == b.schema and a.to_pylist() == b.to_pylist()
    column = "vec" if source == "vectors" else "text"
    released = a.column(column).to_pylist()
    assert released[2 if source == "vectors" else 4] is None
    assert len(released[0]) == (4 if source == "vectors" else 50)
    if source == "vectors":
        assert (tmp_path / "spark" / "_dpspark_projection.npy").read_bytes() == (
            tmp_path / "local" / "_dpspark_projection.npy"
        ).read_bytes()
    spark_m, local_m = ({k: v for k, v in m.items() if k not in (*RUN_FIELDS, "input")} for m in manifests.values())
    assert same(spark_m, local_m)
