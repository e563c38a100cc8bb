"""dpspark compare end to end on SMS spam: noise off gives the known answers and logs to an active MLflow run (and
the command line, with no run active, to none), a grid of two mechanisms is refined where the re-identification
target falls between its points, and the report holds every section with its images embedded.

The figures are tested on the local engine (the same tables as Spark's, tests/spark/test_local_equals_spark.py);
Spark runs the command end to end once (the run tests/connect compares with) and folds the text metrics on its
executors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dpspark import local
from dpspark.cli import NO_EPSILON_MEETS_BOUNDS, main
from dpspark.config import CompareConfig

pytestmark = pytest.mark.slow  # each test runs compare (seconds locally) or Spark

SECTIONS = (
    "Dataset and embedding",
    "Recommendation",
    "Privacy–utility frontier",
    "Equal empirical privacy",
    "Every setting measured",
    "Guarantees in words",
    "Before and after",
    "Definitions",
)


def compare_run(data, out, **settings):
    """compare on the local engine: its manifest."""
    values = {"input": data, "text_column": "text", "label_column": "label", "output": str(out), "vocab_size": 2000}
    values.update(repeats=1, runs=4, mldp_words=10, mldp_trials=20, refine=0, engine="local")
    return local.compare(CompareConfig.parse({**values, **settings}))


def rows_of(out: Path) -> list[dict]:
    return pq.read_table(out / "compare.parquet").to_pylist()


def file_tracking(mp: pytest.MonkeyPatch, store: Path) -> str:
    """MLflow's tracking store in a folder of the test's own (its file backend: mlflow-skinny has no
    database one; MLflow 3 asks for MLFLOW_ALLOW_FILE_STORE to use it); returns its URI."""
    uri = store.as_uri()
    mp.setenv("MLFLOW_TRACKING_URI", uri)
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


@pytest.mark.spark
@pytest.mark.xdist_group("connect")
def test_compare_end_to_end(classic, compare_on_sms120):
    """The command over laplace and tem at ε = 10 on 120 SMS messages (the run tests/connect compares its own
    with): a row per setting with its figures, the equal-privacy table, every report file. In make test only:
    per runtime, compare on Spark is tests/spark/test_local_equals_spark.py's (equal to the local engine's)."""
    out = classic(compare_on_sms120)
    rows = rows_of(out)
    assert [(r["mechanism"], r["epsilon"]) for r in rows] == [("laplace", 10.0), ("tem", 10.0)]
    for r in rows:
        assert 0 <= r["unchanged"] <= r["top1"] <= 1 and 0 <= r["pp"] <= 1 and 0 <= r["test-time_accuracy"] <= 1
    assert pq.read_table(out / "equal_privacy.parquet").num_rows >= 1
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["status"] == "succeeded" and m["mechanisms"] == ["laplace", "tem"]
    for name in m["files"]:
        assert (out / name).stat().st_size > 0, name
    assert "## Recommendation" in (out / "report.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def noise_off(data, corpus_vocab, tmp_path_factory):
    """The noise-off run (top-1 bound 100%, so a recommendation), inside an active MLflow run whose
    tracking store is a folder of the test's own: (output, manifest, the store's URI, the run's id)."""
    import mlflow  # the test extra's mlflow-skinny

    root = tmp_path_factory.mktemp("noise-off")
    with pytest.MonkeyPatch.context() as mp:
        uri = file_tracking(mp, root / "mlruns")
        with mlflow.start_run() as run:
            m = compare_run(
                data, root / "off", mechanisms="laplace", epsilons="1e6", vocab_file=corpus_vocab,
                max_reidentification=1.0,
            )  # fmt: skip
    return root / "off", m, uri, run.info.run_id


def test_noise_off_gives_the_known_answers(noise_off):
    out, m, _, _ = noise_off
    (row,) = rows_of(out)
    assert row["pp"] == 0.0 and row["low"] == 1.0 and row["cs"] == pytest.approx(1.0, abs=1e-12)
    assert row["mldp_nw"] == 20 and row["mldp_sw"] == 0
    assert row["unchanged"] == pytest.approx(1.0) and row["top1"] >= row["unchanged"]
    for mode in ("train-time", "test-time"):
        assert row[f"{mode}_accuracy"] == pytest.approx(m["baseline"]["accuracy"], abs=1e-12), mode
    assert 0.5 < row["dictionary"] <= 1.0
    # The vocabulary covers the corpus: the vocabulary only row (ε = ∞) is the baseline, and the report says
    # how much of the corpus the vocabulary covers.
    for mode in ("train-time", "test-time"):
        assert m["vocabulary_only"][f"{mode}_accuracy"] == pytest.approx(m["baseline"]["accuracy"], abs=1e-12), mode
    corpus = m["corpus"]
    assert corpus["vocabulary_coverage"] == corpus["tokens_in_vocabulary"] / corpus["tokens"] > 0.9
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"Vocabulary coverage: {100 * corpus['vocabulary_coverage']:.1f}% of the corpus's" in report
    assert "| vocabulary only | ∞ |" in report and "The vocabulary caps utility" not in report
    assert m["files"] == ["compare.parquet", "equal_privacy.parquet", "frontier.png", "report.md", "report.html"]


def test_an_active_mlflow_run_gets_the_figures_the_settings_and_the_report(noise_off, tmp_path, monkeypatch):
    """Inside ``mlflow.start_run()``: every finite figure of compare.parquet as a metric of its setting,
    the comparison's settings and recommendation as parameters, the report's files as artifacts."""
    from mlflow.tracking import MlflowClient

    out, m, uri, run_id = noise_off
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    (experiment,) = client.search_experiments()
    (run,) = client.search_runs([experiment.experiment_id])  # the one the test started, no other
    assert run.info.run_id == run_id
    (row,) = rows_of(out)
    metrics = run.data.metrics
    assert metrics["laplace_eps_1e06/pp"] == 0.0 and metrics["laplace_eps_1e06/low"] == 1.0
    assert metrics["laplace_eps_1e06/top1"] == row["top1"] and metrics["laplace_eps_1e06/mldp_nw"] == 20
    assert metrics["laplace_eps_1e06/train-time_accuracy"] == row["train-time_accuracy"]
    numbers = {k for k, v in row.items() if isinstance(v, float) and math.isfinite(v) and k != "epsilon"}
    assert set(metrics) == {f"laplace_eps_1e06/{k}" for k in numbers}
    assert run.data.params == {
        "dpspark_compare_mechanisms": "laplace",
        "dpspark_compare_epsilons": "1e+06",
        "dpspark_compare_utility_metric": "accuracy",
        "dpspark_compare_model": m["model"],
        "dpspark_compare_repeats": "1",
        "dpspark_compare_runs": "4",
        "dpspark_compare_target_reidentification": "0.1",
        "dpspark_compare_setting": "laplace",
        "dpspark_compare_epsilon": "1e+06",
    }
    logged = {Path(a.path).name for a in client.list_artifacts(run_id, "dpspark_compare")}
    assert logged == set(m["files"])
    for name in ("report.md", "report.html"):
        copy = client.download_artifacts(run_id, f"dpspark_compare/{name}", str(tmp_path))
        assert Path(copy).read_bytes() == (out / name).read_bytes(), name


@pytest.fixture(scope="module")
def two_mechanisms(data, tmp_path_factory):
    """The command line's run (no MLflow run active, a tracking store of the test's own in the environment)."""
    root = tmp_path_factory.mktemp("compare")
    out = root / "two"
    with pytest.MonkeyPatch.context() as mp:
        file_tracking(mp, root / "mlruns")
        code = main(
            [
                "compare", "--input", data, "--text-column", "text", "--label-column", "label", "--output", str(out),
                "--mechanisms", "laplace,tem", "--epsilons", "1,30", "--vocab-size", "2000", "--repeats", "1",
                "--runs", "6", "--mldp-words", "10", "--mldp-trials", "20", "--refine", "1", "--quiet",
                "--target-reidentification", "0.4", "--engine", "local",
            ]
        )  # fmt: skip
    assert code == 0
    return out, json.loads((out / "_dpspark_manifest.json").read_text())


@pytest.mark.heavy
def test_without_an_active_mlflow_run_nothing_is_logged(two_mechanisms):
    """MLflow's logging calls would start a run of their own: compare logs only into one already active."""
    from mlflow.tracking import MlflowClient

    out, _ = two_mechanisms
    with pytest.MonkeyPatch.context() as mp:
        client = MlflowClient(tracking_uri=file_tracking(mp, out.parent / "mlruns"))
        assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


@pytest.mark.heavy
def test_the_grid_is_refined_where_the_target_falls_between_two_points(two_mechanisms):
    out, m = two_mechanisms
    rows = rows_of(out)
    grid = [r for r in rows if r["stage"] == "grid"]
    points = sorted((r["mechanism"], r["epsilon"]) for r in grid)
    assert points == [("laplace", 1), ("laplace", 30), ("tem", 1), ("tem", 30)]
    equal = {(e["setting"], e["figure"]): e for e in m["equal_privacy"]}
    for (setting, figure), e in equal.items():
        if figure != "top1" or e["epsilon"] is None:
            continue
        assert 1 < e["epsilon"] < 30 and e["status"].startswith("between")
        # the first crossing was measured in the refinement round: it is now an end of a narrower bracket
        (extra,) = [r for r in rows if r["setting"] == setting and r["stage"] == "refinement 1"]
        assert 1 < extra["epsilon"] < 30
        assert extra["epsilon"] in (e["bracket_lo"], e["bracket_hi"])
        assert e["bracket_lo"] <= e["epsilon"] <= e["bracket_hi"]
    assert any(r["stage"] == "refinement 1" for r in rows)
    for r in rows:
        assert r["top1"] >= r["unchanged"] - 1e-12 and r["top1_lo"] <= r["top1"] <= r["top1_hi"]
        assert 0 <= r["pp"] <= 1 and 0 <= r["low"] <= 1 and -1 <= r["cs"] <= 1 and r["time_s"] > 0
        assert r["guarantee_type"] == ("metric" if r["mechanism"] == "laplace" else "metric")
    by = {(r["mechanism"], r["epsilon"]): r for r in grid}
    for name in ("laplace", "tem"):  # more ε, more of the text survives
        assert by[(name, 30)]["pp"] < by[(name, 1)]["pp"] and by[(name, 30)]["cs"] > by[(name, 1)]["cs"]
    assert m["timings"]["per_grid_point_s"] > 0 and m["recommendation"]


@pytest.mark.heavy
def test_the_report_has_every_section_and_embeds_its_plot(two_mechanisms):
    out, m = two_mechanisms
    md = (out / "report.md").read_text(encoding="utf-8")
    html = (out / "report.html").read_text(encoding="utf-8")
    for title in SECTIONS:
        assert f"## {title}" in md and f"<h2>{title}</h2>" in html, title
    assert "](frontier.png)" in md and 'src="data:image/png;base64,' in html and "https://" not in html
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert "PUC" in md and "could not be checked" in md  # the composite says what it is
    # laplace and tem: the same guarantee type and unit (Euclidean), each series' unit stated
    assert "Unit of ε, **laplace**: ε per unit of Euclidean distance" in md and "ε is one scale across them" in md
    # three rows before and after, the recommended setting's (or the most private one's)
    assert md.count("| original | perturbed |") == 1


@pytest.mark.heavy
@pytest.mark.slow
def test_bounds_nothing_meets_exit_6_and_say_where_to_look(data, tmp_path, capsys):
    out = tmp_path / "none"
    code = main(
        [
            "compare", "--input", data, "--text-column", "text", "--label-column", "label", "--output", str(out),
            "--mechanisms", "tem,syntf", "--epsilons", "1,2", "--vocab-size", "2000", "--repeats", "1", "--runs", "4",
            "--mldp-words", "5", "--mldp-trials", "4", "--refine", "0", "--max-utility-loss", "0.0001",
            "--max-reidentification", "0.5", "--engine", "local",
        ]
    )  # fmt: skip
    assert code == NO_EPSILON_MEETS_BOUNDS
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    assert m["recommended"] is None
    assert "No setting of the grid meets them" in m["recommendation"]
    assert "larger ε raise re-identification" in m["recommendation"] or "add ε values" in m["recommendation"]
    assert "add larger ε" not in m["recommendation"]
    assert "no setting of the grid meets" in capsys.readouterr().err
    assert not math.isnan(m["baseline"]["accuracy"])
    # a 2,000-word vocabulary alone loses more than the 0.0001 allowed: the report says the vocabulary caps it
    only = m["vocabulary_only"]
    loss = m["baseline"]["accuracy"] - min(only[f"{mode}_accuracy"] for mode in ("train-time", "test-time"))
    md = (out / "report.md").read_text(encoding="utf-8")
    assert loss > 0.0001 and "**The vocabulary caps utility**" in md and f"{loss:.4f} below the baseline" in md
    # SynTF's synthetic documents (bags of drawn words) get PP and LOW as bags: defined, in range
    rows = {r["mechanism"]: r for r in rows_of(out) if r["epsilon"] == 1}
    assert 0.5 < rows["syntf"]["pp"] <= 1 and 0 <= rows["syntf"]["low"] <= 1


@pytest.mark.spark
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "bag-of-words"])
def test_the_text_metrics_folded_on_the_executors_equal_the_one_pass_figures(spark, data, tmp_path, aligned):
    """The field's text metrics (``field_metrics``' partial sums) summed over Arrow batches on the executors
    equal the one-pass figures on the driver: PP, LOW and the dictionary share exactly (sums of counts), CS
    to rounding (a sum of cosines in another order)."""
    import numpy as np

    from dpspark.config import StatsConfig
    from dpspark.evaluation import field_metrics as fm
    from dpspark.prepare import prepare_grid
    from dpspark.run.compare import finish_text_metrics
    from dpspark.run.settings import ORIGINAL, TEXT
    from dpspark.spark import resources
    from dpspark.spark.sparkbackend import text_metric_sums
    from dpspark.text import tokenize

    texts = [r[0] for r in spark.read.parquet(data).select("text").collect()]
    orig = [tokenize(t)[0] for t in texts]
    pert = [["the" if i % 3 == 0 else w for i, w in enumerate(tokens)] for tokens in orig]  # a third replaced
    if not aligned:
        pert = [sorted(p) for p in pert]  # SynTF's documents are compared as bags of words
    df = spark.createDataFrame([(" ".join(p), t) for p, t in zip(pert, texts)], f"{TEXT} string, {ORIGINAL} string")
    config = StatsConfig.parse({"epsilons": "5", "vocab_size": 2000})
    grid = prepare_grid(config, config.settings(), tmp_path / "w")
    shipment = resources.ship(spark, grid.write_bundle)
    try:
        rare = fm.least_occurring({t: n for t, n in fm.word_counts(orig).items() if fm.is_word(t)}, 300)
        got = finish_text_metrics(text_metric_sums(df.repartition(5), shipment.name, rare, None, aligned))
        res = resources.resources(shipment.name)
        want = {
            "pp": fm.finish(fm.perturbation_partial(orig, pert, None, aligned)),
            "low": fm.finish(fm.low_partial(orig, pert, rare, aligned)),
            "cs": fm.cosine_similarity(orig, pert, fm.mean_vector_encoder(res.vectors, res.words)),
            "dictionary": fm.dictionary_share(
                pert, fm.english_words(fallback=res.words.take(np.arange(len(res.words))))
            ),
        }
    finally:
        shipment.close()
    assert {k: got[k] for k in ("pp", "low", "dictionary")} == {k: want[k] for k in ("pp", "low", "dictionary")}
    assert got["cs"] == pytest.approx(want["cs"], rel=1e-12)
    assert 0.2 < got["pp"] < 0.5 and 0 < got["cs"] < 1 and np.isfinite(got["low"])
