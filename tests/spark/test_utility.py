"""evaluate-utility, privacy-risk and joint calibration end to end on SMS spam (issue 10).

The figures are tested on the local engine (the same tables as Spark's, tests/spark/test_local_equals_spark.py);
Spark runs each command end to end once (the runs tests/connect compare with), refuses bad input, and fits and
scores the classifier on its executors."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark import local, report, risk
from dpspark.cli import NO_EPSILON_MEETS_BOUNDS, main
from dpspark.config import EvaluateUtilityConfig, RiskConfig
from dpspark.embeddings import load_default
from dpspark.errors import PrivacyWarning
from dpspark.evaluation.datasets import sms_spam_table
from dpspark.rng import SeededRunWarning

pytestmark = pytest.mark.slow  # each test runs a command (seconds locally) or Spark


def utility_run(data, out, **settings):
    """evaluate-utility on the local engine: its manifest."""
    values = {"input": data, "text_column": "text", "label_column": "label", "output": str(out), "vocab_size": 2000}
    return local.evaluate_utility(EvaluateUtilityConfig.parse({**values, "engine": "local", **settings}))


def risk_run(data, out, **settings):
    """privacy-risk on the local engine: its manifest."""
    values = {"input": data, "text_column": "text", "output": str(out), "vocab_size": 2000}
    return local.privacy_risk(RiskConfig.parse({**values, "engine": "local", **settings}))


def summary_row(manifest, mode):
    (row,) = [s for s in manifest["summary"] if s["mode"] == mode]
    return row


@pytest.mark.spark
@pytest.mark.runtime
@pytest.mark.xdist_group("connect")
def test_evaluate_utility_end_to_end(classic, utility_on_sms120):
    """The command on 120 SMS messages (the run tests/connect compares its own with): the baseline and the
    test-time row, a classifier that works, every row split into train and test."""
    out = classic(utility_on_sms120)
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["mode"] for r in rows] == ["baseline", "test-time"]
    base = rows[0]
    assert base["accuracy"] > 0.85 and base["auc"] > 0.9
    assert all(0 <= r["accuracy"] <= 1 and 0 <= r["auc"] <= 1 for r in rows)
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["rows"]["train"] + m["rows"]["test"] == 120


@pytest.fixture(scope="module")
def identity_run(data, corpus_vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("u") / "identity"
    m = utility_run(data, out, epsilons="1e6", lambdas="1", repeats=1, vocab_file=corpus_vocab)
    return m, out


@pytest.mark.spark  # the premise: Spark's perturb_text at ε = 1e6 is the identity
@pytest.mark.statistical
def test_noise_disabled_gives_the_baseline(spark, data, corpus_vocab, identity_run):
    from dpspark.spark.perturb import perturb_text

    # The premise, checked: at ε = 1e6 the output is the input.
    df = spark.read.parquet(data).limit(200)
    with pytest.warns(UserWarning, match="seed"), pytest.warns(PrivacyWarning, match="100% of tokens unchanged"):
        out = perturb_text(df, "text", 1e6, vocab_file=corpus_vocab, seed=1).toPandas()
    assert (out["text"] == df.toPandas()["text"]).all()

    m, out_dir = identity_run
    base = summary_row(m, "baseline")
    assert base["accuracy_mean"] > 0.93 and base["auc_mean"] > 0.95  # the classifier works (power for the next test)
    for mode in ("train-time", "test-time"):
        row = summary_row(m, mode)
        for metric in ("accuracy", "f1", "auc"):
            assert abs(row[f"{metric}_mean"] - base[f"{metric}_mean"]) <= 0.005, (mode, metric)
    names = {p.name for p in out_dir.iterdir()}
    assert {"results.parquet", "summary.md", "utility_train_time.png", "utility_test_time.png"} <= names
    results = pq.read_table(out_dir / "results.parquet")
    assert results.num_rows == 3  # baseline + one per mode
    assert results.column_names[:9] == [
        "model", "mode", "mechanism", "setting", "epsilon", "lambda", "beta", "gamma", "t",
    ]  # fmt: skip
    # Later mechanisms' axes follow (null here), then the repeat and the metrics.
    axes = report.axis_names()
    assert results.column_names[9 : 5 + len(axes)] == axes[4:] and results.column_names[5 + len(axes)] == "repeat"
    assert results.column("setting").to_pylist() == [None, "mahalanobis λ=1", "mahalanobis λ=1"]
    manifest = json.loads((out_dir / "_dpspark_manifest.json").read_text())
    assert manifest["split"]["seed"] == 42 and manifest["positive_class"] == "spam" and not manifest["seeded"]
    assert "not a release" in manifest["privacy_note"]


@pytest.mark.statistical
def test_a_grid_of_mechanisms_has_a_row_per_setting(data, tmp_path):
    out = tmp_path / "mechanisms"
    args = ["--input", data, "--text-column", "text", "--label-column", "label", "--output", str(out)]
    grid = ["--mechanisms", "laplace,tem,santext", "--epsilons", "5,20", "--repeats", "1", "--vocab-size", "2000"]
    assert main(["evaluate-utility", *args, *grid, "--quiet", "--engine", "local"]) == 0
    settings = ["laplace", "tem β=0.001", "santext"]
    results = pq.read_table(out / "results.parquet").to_pylist()
    measured = [r for r in results if r["mode"] != "baseline"]
    assert len(measured) == len(settings) * 2 * 2  # setting × ε × mode, R = 1
    assert {(r["setting"], r["epsilon"], r["mode"], r["repeat"]) for r in measured} == {
        (s, e, mode, 0) for s in settings for e in (5.0, 20.0) for mode in ("train-time", "test-time")
    }
    by = {r["setting"]: r for r in measured}
    assert by["laplace"]["mechanism"] == "laplace" and by["laplace"]["lambda"] == 0.0
    assert by["tem β=0.001"]["beta"] == 0.001 and by["tem β=0.001"]["lambda"] is None
    assert all(by["santext"][a] is None for a in ("lambda", "beta", "gamma", "t"))
    assert all(0 <= r["accuracy"] <= 1 for r in measured)
    summary = pq.read_table(out / "summary.parquet")
    assert summary.num_rows == 1 + len(settings) * 2 * 2 and summary.schema.field("gamma").type == pa.float64()
    md = (out / "summary.md").read_text(encoding="utf-8")
    table = md.split("## test-time accuracy", 1)[1].split("| setting \\ ε | 5 | 20 |", 1)[1].split("\n\n", 1)[0]
    assert [line.split(" | ")[0].removeprefix("| ") for line in table.strip().splitlines()[1:]] == settings
    assert "| tem β=0.001 | 0." in table and " (" not in table  # R = 1: the mean alone, no interval
    assert "same guarantee type" in md
    assert "against Laplace" in md and "- no interval to compare with R = 1" in md
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["mechanisms"] == ["laplace", "tem", "santext"]
    facts = manifest["settings"]
    assert [(f["mechanism"], f["parameters"]["epsilon"]) for f in facts] == [
        (m, e) for m in ("laplace", "tem", "santext") for e in (5.0, 20.0)
    ]
    assert all(f["guarantee_type"] == "metric" and f["guarantee"] and f["paper"] for f in facts)
    assert facts[2]["parameters"]["beta"] == 0.001
    assert manifest["lambdas"] == [0.0] and len(manifest["euclidean_epsilon_factor"]) == 1
    assert manifest["timings"]["grid_points"] == len(settings) * 2


@pytest.mark.statistical
def test_noise_disabled_reidentification_is_the_unchanged_share(data, corpus_vocab, tmp_path):
    m = risk_run(data, tmp_path / "risk", epsilons="1e6", lambdas="1", runs=4, vocab_file=corpus_vocab)
    (r,) = m["results"]
    assert r["unchanged"] > 0.99
    assert abs(r["top1"] - r["unchanged"]) < 0.01


@pytest.mark.statistical
def test_shuffled_labels_give_chance_level_utility(data, tmp_path, identity_run):
    table = pq.read_table(data)
    labels = np.array(table.column("label").to_pylist(), dtype=object)
    shuffled = table.set_column(2, "label", pa.array(np.random.default_rng(0).permutation(labels).tolist()))
    path = tmp_path / "shuffled.parquet"
    pq.write_table(shuffled, path)
    # A fixed noise seed: with noise from the OS the AUC once fell outside the band.
    with pytest.warns(SeededRunWarning):
        m = utility_run(str(path), tmp_path / "u", epsilons="20", lambdas="1", repeats=2, mode="train-time", seed=11)
    for mode in ("baseline", "train-time"):
        row = summary_row(m, mode)
        assert 0.35 <= row["auc_mean"] <= 0.65, (mode, row["auc_mean"])
    # The same pipeline on the true labels is far from chance (identity_run's baseline): the test has power.
    assert summary_row(identity_run[0], "baseline")["auc_mean"] > 0.9


@pytest.mark.spark
@pytest.mark.statistical  # Spark = numpy for the attack per runtime: test_risk.py
def test_risk_job_matches_the_reference_and_catches_a_leak(spark, data, tmp_path, monkeypatch):
    from dpspark.bundle import save_bundle
    from dpspark.embeddings import select_vocabulary
    from dpspark.engine import exact_attack as ea
    from dpspark.engine import nw_sw
    from dpspark.mechanisms import Space, parse
    from dpspark.run.risk import FittedRuns
    from dpspark.spark import resources
    from dpspark.spark.sparkbackend import SparkBackend
    from dpspark.stats import plan

    emb = load_default()
    vocab = select_vocabulary(emb, 2000)
    words = "the a of to and going london money free call win prize uk nokia text".split()
    prior = {emb.word_index[w]: float(100 - 5 * i) for i, w in enumerate(words)}
    sensitive = {emb.word_index["london"], emb.word_index["nokia"]}
    specs = [parse({"name": "laplace", "epsilon": e}) for e in (5.0, 10.0)]
    bundle = {"settings": [s.parameters() for s in specs], "nn": "exact", "nn_params": {}}
    ship = resources.ship(spark, lambda d: save_bundle(d, emb, bundle, vocab))
    items = plan(specs, np.array(sorted(prior)), 20, 5, 10)
    mechs = [s.build(Space(emb.vectors, vocab)) for s in specs]
    fit = nw_sw.counts([it for it in items if it.block == risk.FIT_HALF], b"k" * 16, mechs)
    score = nw_sw.counts([it for it in items if it.block == risk.SCORE_HALF], b"k" * 16, mechs)
    runs = FittedRuns(SparkBackend(spark, "test"), items, b"k" * 16, ship.name, mechs, ea.Corpus.of(prior, sensitive))
    on_spark, _ = runs.attack({0, 1}, set(), prior)
    runs.release()
    reference = risk.reidentification(fit, score, prior, sensitive)
    assert on_spark.keys() == reference.keys()
    for key in reference:
        assert on_spark[key] == pytest.approx(reference[key]), key

    # The job scores on the held-out half; an injected leak (scoring on the fitted half) shows.
    settings = {"epsilons": "3", "lambdas": "1", "runs": 4, "seed": 7}
    with pytest.warns(UserWarning, match="seed"):
        held = risk_run(data, tmp_path / "held", **settings)["results"][0]
    monkeypatch.setattr(risk, "SCORE_HALF", risk.FIT_HALF)
    with pytest.warns(UserWarning, match="seed"):
        leaked = risk_run(data, tmp_path / "leaked", **settings)["results"][0]
    assert leaked["top1"] > held["top1"] + 0.1
    assert leaked["unchanged"] == pytest.approx(held["unchanged"], abs=0.05)  # same runs, only the scoring moved


@pytest.mark.statistical
@pytest.mark.slow
def test_joint_calibration_meets_its_bounds_in_a_fresh_run(data, corpus_vocab, tmp_path):
    # ε = 2 is private but useless, ε = 400 useful but no protection, ε = 10 in between.
    grid = {"epsilons": "2,10,400", "lambdas": "1", "vocab_file": corpus_vocab}
    utility_run(data, tmp_path / "u", repeats=2, mode="train-time", **grid)
    risk_run(data, tmp_path / "r", runs=4, **grid)
    args = ["calibrate", "--utility", str(tmp_path / "u"), "--risk", str(tmp_path / "r"), "--quiet"]
    bounds = ["--max-utility-loss", "0.03", "--max-reidentification", "0.95"]
    assert main([*args, *bounds, "--output", str(tmp_path / "cal")]) == 0
    result = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    rows = {(r["epsilon"], r["lambda"]): r for r in result["rows"]}
    assert not rows[(2.0, 1.0)]["met"] and not rows[(400.0, 1.0)]["met"]
    assert result["best"] == {"epsilon": 10.0, "lambda": 1.0, "setting": "mahalanobis λ=1", "mechanism": "mahalanobis"}
    assert {p.name for p in (tmp_path / "cal").iterdir()} >= {"calibration.md", "frontier.csv", "frontier.png"}
    # A fresh run at the chosen setting (new noise) meets the bounds.
    point = {"epsilons": "10", "lambdas": "1", "vocab_file": corpus_vocab}
    fresh = utility_run(data, tmp_path / "u2", repeats=2, mode="train-time", **point)
    loss = summary_row(fresh, "baseline")["accuracy_mean"] - summary_row(fresh, "train-time")["accuracy_mean"]
    assert loss <= 0.03
    assert risk_run(data, tmp_path / "r2", runs=4, **point)["results"][0]["top1"] <= 0.95
    # Nothing qualifies: the documented exit code, and the frontier is still written.
    strict = ["--max-utility-loss", "0", "--max-reidentification", "0"]
    assert main([*args, *strict, "--output", str(tmp_path / "none")]) == NO_EPSILON_MEETS_BOUNDS
    assert (tmp_path / "none" / "frontier.csv").is_file()


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    t = sms_spam_table(40)
    pq.write_table(t, d / "good.parquet")
    pq.write_table(t.drop(["label"]), d / "nolabel.parquet")
    pq.write_table(t.set_column(2, "label", pa.array(["ham"] * 40)), d / "oneclass.parquet")
    pq.write_table(t.set_column(1, "text", pa.array(range(40), pa.int64())), d / "numbers.parquet")
    pq.write_table(sms_spam_table(3), d / "tiny.parquet")
    return d


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "extra", "code", "message"),
    [
        ("nolabel.parquet", [], 3, "label column 'label' is not in the input"),
        ("oneclass.parquet", [], 3, "only the value 'ham'"),
        ("numbers.parquet", [], 3, "text column 'text' has type bigint, expected string"),
        ("tiny.parquet", [], 3, "too few rows for the split"),
        ("good.parquet", ["--epsilons", ""], 2, "epsilons: the grid is empty"),
    ],
)
def test_bad_input_is_refused_and_leaves_no_output(bad_inputs, spark, tmp_path, capsys, name, extra, code, message):
    out = tmp_path / "out"
    args = ["--input", str(bad_inputs / name), "--text-column", "text", "--output", str(out), "--vocab-size", "500"]
    assert main(["evaluate-utility", *args, "--label-column", "label", *extra]) == code
    assert message in capsys.readouterr().err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith("_dpspark")]
    if name == "numbers.parquet":
        assert main(["privacy-risk", *args]) == 3
        assert not out.exists()


@pytest.mark.spark
@pytest.mark.runtime
def test_mllib_fits_and_predicts_after_a_release_in_the_same_session(spark, data, tmp_path):
    """A release, then an MLlib model in the same session (a notebook's perturb, then
    evaluate-utility). On classic Spark 4.0.x an Observation made the session unserializable and
    every transform of a model fitted afterwards failed with "Task not serializable"."""
    out = tmp_path / "released"
    args = ["--input", data, "--columns", "text", "--output", str(out), "--epsilon", "10", "--vocab-size", "2000"]
    code = main(["perturb", *args, "--quiet"])
    assert code == 0
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense([float(i), float(i % 3)]), float(i % 2)) for i in range(40)]
    train = spark.createDataFrame(rows, ["features", "label"])
    model = LogisticRegression(maxIter=5).fit(train)
    predicted = model.transform(train).select("prediction").collect()
    assert len(predicted) == 40 and {r[0] for r in predicted} <= {0.0, 1.0}
    assert spark.read.parquet(str(out)).count() == pq.read_table(data).num_rows


@pytest.mark.spark
@pytest.mark.parametrize("classes", [2, 3])
def test_the_executors_fold_of_the_metrics_equals_the_numpy_combiner(spark, data, classes):
    """``Model.score`` counts (label, prediction, score) on the executors and only the counts reach the
    driver; the figures equal ``engine.classification`` over the rows scored in this process, bit for bit."""
    from pyspark.sql import functions as F

    from dpspark.engine import classification, logreg
    from dpspark.run.settings import LABEL, TEXT
    from dpspark.spark.sparkbackend import Model

    spam = (F.col("label") == "spam").cast("double")
    df = spark.read.parquet(data).select(F.col("text").alias(TEXT), spam.alias(LABEL))
    if classes == 3:  # a third class: ham of odd length
        df = df.withColumn(LABEL, F.when((F.col(LABEL) == 0) & (F.length(TEXT) % 2 == 1), 2.0).otherwise(F.col(LABEL)))
    model = Model("tfidf-logreg", classes)
    fitted = model.fit(df, "")
    counts = model.counts(fitted, df.repartition(5), "")
    rows = df.collect()
    y, p, s = logreg.scored(fitted, logreg.block("tfidf-logreg", [r[0] for r in rows], [r[1] for r in rows]))
    assert counts == classification.create(y, p, s)
    counted = classification.create(y, p, s)
    want = {**classification.finish(counted, classes), **classification.majority(counted)}
    assert model.score(fitted, df, "") == want
    assert want["majority_rate"] == np.bincount(y).max() / len(y)
    assert 0.5 < want["accuracy"] <= 1.0 and len(set(p.tolist())) > 1


@pytest.mark.spark
def test_a_large_training_half_is_fitted_where_it_is_as_on_the_driver(spark, data):
    """Above ``driver_fit_bytes`` each optimiser step is a Spark job summing the blocks' loss and gradient
    (here forced with a limit of 0, over 3 partitions): the same objective as the driver's fit of the same
    rows, so the same model to the optimiser's tolerance and the same predictions."""
    from pyspark.sql import functions as F

    from dpspark.run.settings import LABEL, TEXT
    from dpspark.spark.sparkbackend import Model

    spam = (F.col("label") == "spam").cast("double")
    df = spark.read.parquet(data).select(F.col("text").alias(TEXT), spam.alias(LABEL)).repartition(3)
    on_driver = Model("tfidf-logreg", 2).fit(df, "")
    where_it_is = Model("tfidf-logreg", 2, driver_fit_bytes=0).fit(df, "")
    assert np.array_equal(on_driver.idf, where_it_is.idf)
    assert np.allclose(on_driver.weights, where_it_is.weights, rtol=1e-4, atol=1e-6)
    model = Model("tfidf-logreg", 2)
    ours, theirs = model.score(on_driver, df, ""), model.score(where_it_is, df, "")
    assert {k: ours[k] for k in ("accuracy", "f1", "precision", "recall")} == {
        k: theirs[k] for k in ("accuracy", "f1", "precision", "recall")
    }
    assert abs(ours["auc"] - theirs["auc"]) < 1e-3
