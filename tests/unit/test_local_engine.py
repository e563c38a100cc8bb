"""The local engine (``--engine local``, ``dpspark.local``): privacy-stats, privacy-risk, evaluate-utility and
compare over a ``LocalBackend`` in this process, no JVM; what it refuses; and that it runs where pyspark cannot be
imported. Its figures equal Spark's for a seed: tests/spark/test_local_equals_spark.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from refusals import refused

from dpspark import risk
from dpspark.cli import main
from dpspark.engine import exact_attack as ea
from dpspark.engine import nw_sw
from dpspark.errors import ConfigError, InputDataError
from dpspark.prepare import prepare_grid
from dpspark.run.inputs import read_local
from dpspark.run.local import LocalBackend
from dpspark.run.risk import FittedRuns
from dpspark.stats import plan

pytestmark = pytest.mark.runtime

TEXTS = [
    "the city is quiet tonight and the river is calm",
    "call london now to win a prize",
    "free money for the city of london",
    "the dog ran home to the river",
    None,
    "",
]


@pytest.fixture()
def corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    pq.write_table(pa.table({"text": TEXTS, "n": list(range(len(TEXTS)))}), d / "part-0.parquet")
    return d


def test_the_fitted_attacker_on_the_local_backend_equals_the_numpy_reference(glove, tmp_path):
    """FittedRuns over the LocalBackend (keep, ship_arrays, run_items in process): every attacker's figures
    equal ``risk.reidentification`` on the same draws, the model attacker's β included."""
    from dpspark.config import RiskConfig

    config = RiskConfig.parse(
        {"text_column": "t", "output": "o", "mechanisms": "laplace,tem", "epsilons": "5", "vocab_size": 2000}
    )
    grid = prepare_grid(config, config.settings(), tmp_path / "w")
    words = "the a of to and going london money free call win prize".split()
    prior = {glove.word_index[w]: float(100 - 5 * i) for i, w in enumerate(words)}
    sensitive = {glove.word_index["london"]}
    backend = LocalBackend("test")
    ship = backend.ship(grid.write_bundle)
    items = plan(grid.specs, np.array(sorted(prior)), 20, 5, 10)
    mechs = grid.mechanisms()
    runs = FittedRuns(backend, items, b"k" * 16, ship.name, mechs, ea.Corpus.of(prior, sensitive))
    local, betas = runs.attack({0, 1}, {0}, prior)
    runs.release()
    backend.close()
    assert not Path(ship.name).exists()  # the bundle went with the backend
    fit = nw_sw.counts([it for it in items if it.block == risk.FIT_HALF], b"k" * 16, mechs)
    score = nw_sw.counts([it for it in items if it.block == risk.SCORE_HALF], b"k" * 16, mechs)
    beta = risk.fit_beta(mechs[0].space, {(w, u): c for (t, w, u), c in fit.items() if t == 0})
    assert betas == {0: beta}
    reference = risk.reidentification(
        fit, score, prior, sensitive, model=risk.model_guesses(mechs[0].space, beta, prior, 0)
    )
    assert local.keys() == reference.keys() == {0, 1}
    for key in reference:
        assert local[key] == pytest.approx(reference[key], nan_ok=True), key


def test_privacy_stats_and_risk_run_locally_and_say_so(corpus, tmp_path, capsys):
    stats = tmp_path / "stats"
    argv = ["privacy-stats", "--engine", "local", "--output", str(stats), "--mechanisms", "laplace,santext"]
    argv += ["--epsilons", "5", "--runs", "10", "--words", "20", "--vocab-size", "2000", "--seed", "3"]
    with pytest.warns(UserWarning, match="seed"):
        assert main(argv) == 0
    assert "engine: local" in capsys.readouterr().out
    manifest = json.loads((stats / "_dpspark_manifest.json").read_text())
    assert manifest["engine"] == "local" and manifest["status"] == "succeeded"
    table = pq.read_table(stats / "per_word.parquet").to_pylist()
    assert len(table) == 2 * 20 and all(r["runs"] == 10 and 0 <= r["nw"] <= 10 and 1 <= r["sw"] <= 10 for r in table)
    # SanText has a closed form: its Monte Carlo Nw agrees with E[Nw] over the 20 words (K = 10 each)
    santext = [r for r in table if r["mechanism"] == "santext"]
    assert sum(r["nw"] for r in santext) == pytest.approx(sum(r["exact_nw"] for r in santext), rel=0.25)

    out = tmp_path / "risk"
    argv = ["privacy-risk", "--engine", "local", "--input", str(corpus), "--text-column", "text", "--output", str(out)]
    argv += ["--mechanisms", "laplace,santext", "--epsilons", "5", "--runs", "8", "--vocab-size", "2000"]
    assert main(argv) == 0
    assert "engine: local" in capsys.readouterr().out
    rows = pq.read_table(out / "risk.parquet").to_pylist()
    assert [r["mechanism"] for r in rows] == ["laplace", "santext"]
    assert all(0.0 <= r["top1"] <= 1.0 and r["top1_lo"] <= r["top1"] <= r["top1_hi"] for r in rows)
    assert rows[1]["likelihood"] == "exact (closed form)"
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["engine"] == "local" and manifest["corpus"]["words_measured"] > 10


def test_every_engine_command_runs_locally_and_a_spark_only_one_would_be_refused(raw, tmp_path):
    """Every command that takes --engine has a local engine; a command without one (none today) is refused in one
    sentence that names what to install."""
    from dpspark import config, local
    from dpspark.cli import COMMANDS

    engines = [name for name, cmd in COMMANDS.items() if "engine" in getattr(config, cmd.model).__fields__]
    assert sorted(engines) == sorted(local.LOCAL_COMMANDS)
    settings = config.VectorsConfig(input=str(raw), output=str(tmp_path / "out"), column="text", epsilon=1.0)
    with pytest.raises(ConfigError, match=r"a-new-command runs on Spark only.*dpspark\[spark\]"):
        local.engine_for("a-new-command", settings.copy(update={"engine": "local"}))


def test_release_vectors_runs_locally_and_refuses_what_spark_refuses(tmp_path, capsys):
    """release-vectors on the local engine: PrivEmb of a double column (nulls kept, Φ beside the data), and the
    column refusals of Spark's check, each leaving nothing behind."""
    rng = np.random.default_rng(1)
    good = [rng.normal(size=6).tolist() for _ in range(4)] + [None]
    path = tmp_path / "vectors.parquet"
    pq.write_table(pa.table({"vec": good, "mixed": [[1.0, 2.0], [1.0], None, [0.0, 1.0], [2.0, 2.0]]}), path)
    out = tmp_path / "released"
    argv = ["release-vectors", "--engine", "local", "--input", str(path), "--output", str(out), "--epsilon", "5"]
    with pytest.warns(UserWarning, match="seed"):
        assert main([*argv, "--column", "vec", "--dim", "3", "--seed", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "local"
    released = pq.read_table(out)
    assert released.schema.field("vec").type == pa.list_(pa.float64())
    assert [None if v is None else len(v) for v in released.column("vec").to_pylist()] == [3, 3, 3, 3, None]
    assert np.load(out / "_dpspark_projection.npy").shape == (3, 6)
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["input_dimension"] == 6 and manifest["output_dimension"] == 3
    assert manifest["ledger"]["releases"] == 1
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"nan": [[1.0, float("nan")], [1.0, 2.0]], "n": [1, 2], "e": [None, None]}), bad)
    pq.write_table(pa.table({"e": pa.array([None, None], pa.list_(pa.float64()))}), tmp_path / "empty.parquet")
    other = ["release-vectors", "--engine", "local", "--output", str(tmp_path / "out"), "--epsilon", "5"]
    for given, column, phrase in [
        (path, "mixed", "different lengths (1 to 2)"),
        (bad, "nan", "1 vectors contain NaN"),
        (bad, "n", "has type int64"),
        (bad, "body", "'body' is not in the input"),
        (tmp_path / "empty.parquet", "e", "no non-null vectors"),
    ]:
        refused(capsys, tmp_path, [*other, "--input", str(given), "--column", column], 3, phrase)


def _perturb_local(argv: list[str], runs: bool = True) -> int:
    """perturb on the local engine with a seed (warned where the run gets as far as drawing)."""
    argv = ["perturb", "--engine", "local", "--seed", "5", "--vocab-size", "2000", *argv]
    if not runs:
        return main(argv)
    with pytest.warns(UserWarning, match="seed"):
        return main(argv)


def test_perturb_releases_a_csv_locally_with_its_manifest_and_ledger(tmp_path, capsys):
    """A CSV in, a Parquet release out, in this process: every row and column kept, the text columns perturbed
    (tokens and placeholders counted as the output shows them), the manifest and ledger entry Spark's release
    writes (tests/spark/test_local_equals_spark.py: the same, value for value), and the ledger's refusals."""
    path = tmp_path / "tickets.csv"
    texts = ["the city is quiet tonight", "call london now", "", "the dog ran home to the river xqzv"]
    pacsv.write_csv(pa.table({"id": [1, 2, 3, 4], "text": texts, "note": ["a", "b", "c", "d"]}), path)
    before = path.read_bytes()
    out = tmp_path / "released"
    assert _perturb_local(["--input", str(path), "--output", str(out), "--columns", "text", "--epsilon", "5"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["engine"] == "local" and printed["status"] == "succeeded"
    released = pq.read_table(out)
    assert released.column_names == ["id", "text", "note"] and released.num_rows == 4
    assert released.column("id").to_pylist() == [1, 2, 3, 4] and released.column("note").to_pylist() == list("abcd")
    got = [t or "" for t in released.column("text").to_pylist()]
    assert [len(t.split()) for t in got] == [5, 3, 0, 8] and got != texts
    assert got[3].split()[-1] == "[UNK]"  # a word without a vector: the placeholder (--oov unk, the default)
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["engine"] == "local" and manifest["spark"] is None and manifest["status"] == "succeeded"
    assert manifest["counts"] == {"rows": 4, "tokens": 16, "placeholders": 1}
    assert manifest["input"] == str(path.resolve()) and manifest["output"] == str(out.resolve())
    assert manifest["ledger"]["releases"] == 1 and len(list((out / "_dpspark_ledger").glob("*.json"))) == 1
    assert path.read_bytes() == before
    # the same output again: refused as a second release of the same records, then made on purpose
    again = ["--input", str(path), "--output", str(out), "--columns", "text", "--epsilon", "5", "--mode", "overwrite"]
    assert _perturb_local(again, runs=False) == 7
    assert "--allow-rerelease" in capsys.readouterr().err
    assert _perturb_local([*again, "--allow-rerelease", "--quiet"], runs=False) == 0  # quiet: no warning
    assert "(engine: local)" in capsys.readouterr().out
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["ledger"]["releases"] == 2 and manifest["ledger"]["rerelease"] is True
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("_")]  # no stage, no lock left


def test_perturb_units_run_locally_with_their_shape(tmp_path):
    """A document unit and a column: unit on the local engine: the unit's budget shared over its tokens, the
    shape counted from the rows (document) or the count pass over the ids (column), as the manifest states."""
    path = tmp_path / "in.parquet"
    users = ["u1", "u2", "u1", "u3", "u2", "u1"]
    pq.write_table(pa.table({"text": TEXTS, "user": users}), path)
    lengths = [len(t.split()) if t else 0 for t in TEXTS]
    base = ["--input", str(path), "--columns", "text", "--unit-budget", "30"]
    assert _perturb_local([*base, "--output", str(tmp_path / "doc"), "--privacy-unit", "document"]) == 0
    doc = json.loads((tmp_path / "doc" / "_dpspark_manifest.json").read_text())
    held = sorted(n for n in lengths if n)
    assert doc["unit_counts"]["tokens_per_unit"] == {"min": held[0], "median": held[1], "max": held[-1]}
    assert doc["unit_counts"]["token_epsilon"]["max"] == pytest.approx(30 / held[0])
    assert doc["unit_bound"]["bound"] == pytest.approx(30 * doc["unit_bound"]["diameter"])
    assert _perturb_local([*base, "--output", str(tmp_path / "col"), "--privacy-unit", "column:user"]) == 0
    col = json.loads((tmp_path / "col" / "_dpspark_manifest.json").read_text())
    per_user = sorted(sum(n for n, u in zip(lengths, users) if u == v) for v in set(users))
    assert col["unit_counts"]["units"] == 3 and col["unit_counts"]["tokens_per_unit"]["max"] == per_user[-1]
    assert col["privacy_unit"]["column"] == "user"
    assert pq.read_table(tmp_path / "col").column("user").to_pylist() == users


def test_syntf_per_person_shares_the_budget_over_their_rows_draws(tmp_path, capsys):
    """SynTF under a column: unit (issue 41): a person's draws over all their rows share E, counted with the
    vocabulary once the bundle is shipped. One row per person is the document unit, draw for draw; two rows per
    person spread E over both rows' draws; under cap:K a person's draws after the K-th (rows in order) are the
    placeholder, and --over-cap refuse names the people over the cap."""
    path = tmp_path / "in.parquet"
    pairs = ["a", "a", "b", "b", "c", "c"]  # draws (tokens with a vector): a 10 + 7, b 7 + 7, c 0 + 0
    pq.write_table(pa.table({"text": TEXTS, "user": [f"p{i}" for i in range(6)], "pair": pairs}), path)
    base = ["--input", str(path), "--columns", "text", "--mechanism", "syntf", "--unit-budget", "40"]
    runs = {"doc": ["document"], "user": ["column:user"], "pair": ["column:pair"]}
    runs["cap"] = ["column:pair", "--allocation", "cap:12"]
    for name, unit in runs.items():
        assert _perturb_local([*base, "--output", str(tmp_path / name), "--privacy-unit", *unit]) == 0
    read = {name: pq.read_table(tmp_path / name) for name in runs}
    manifest = {name: json.loads((tmp_path / name / "_dpspark_manifest.json").read_text()) for name in runs}
    for column in ("text", "text_tf"):
        assert read["user"].column(column).equals(read["doc"].column(column)), column
    pair, counts = manifest["pair"], manifest["pair"]["unit_counts"]
    assert counts["units"] == 3 and counts["tokens_per_unit"]["max"] == 17
    per_draw = counts["token_epsilon"]
    assert per_draw["min"] == pytest.approx(40 / 17) and per_draw["max"] == pytest.approx(40 / 14)
    assert pair["privacy_unit"]["column"] == "pair" and "draw of a synthetic document" in pair["guarantee"]
    placeholders = [t.split().count("[UNK]") if t else 0 for t in read["cap"].column("text").to_pylist()]
    assert placeholders == [0, 5, 0, 2, 0, 0]  # a: 10 drawn, then 2 of 7; b: 7, then 5 of 7
    assert manifest["cap"]["counts"]["placeholders"] == 7
    argv = ["perturb", "--engine", "local", "--vocab-size", "2000", *base, "--output", str(tmp_path / "out")]
    argv += ["--privacy-unit", "column:pair", "--allocation", "cap:12", "--over-cap", "refuse"]
    refused(capsys, tmp_path, argv, 2, "2 unit(s) hold more than the cap of 12 tokens (the longest 17)")
    # The cap counts draws, not tokens: 4 tokens of which 2 have a vector are 2 draws, within cap:3.
    short = tmp_path / "short.parquet"
    pq.write_table(pa.table({"text": ["the city qqzzxxw wwvvyyq", "river"], "user": ["a", "b"]}), short)
    argv = ["--input", str(short), "--columns", "text", "--mechanism", "syntf", "--unit-budget", "40"]
    argv += ["--privacy-unit", "column:user", "--allocation", "cap:3", "--over-cap", "refuse"]
    assert _perturb_local([*argv, "--output", str(tmp_path / "short_out")]) == 0


def test_perturb_keeps_a_partitioned_directory_partitioned(tmp_path):
    """A Hive-partitioned input (date=…) comes back partitioned the same way, its values read as strings (as
    Spark's release reads them)."""
    root = tmp_path / "events"
    for date, texts in (("2026-01-01", TEXTS[:3]), ("2026-01-02", TEXTS[3:5])):
        (root / f"date={date}").mkdir(parents=True)
        pq.write_table(pa.table({"text": texts}), root / f"date={date}" / "part-0.parquet")
    out = tmp_path / "released"
    assert _perturb_local(["--input", str(root), "--output", str(out), "--columns", "text", "--epsilon", "5"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("date=")) == ["date=2026-01-01", "date=2026-01-02"]
    released = read_local(str(out))
    assert (
        released.num_rows == 5
        and sorted(released.column("date").to_pylist()) == ["2026-01-01"] * 3 + ["2026-01-02"] * 2
    )


def test_perturb_refusals_on_the_local_engine_leave_nothing_behind(raw, tmp_path, capsys):
    base = ["perturb", "--engine", "local", "--columns", "text", "--epsilon", "5"]
    out = ["--output", str(tmp_path / "out")]
    refused(capsys, tmp_path, [*base, "--input", str(raw), *out, "--partition", "date=1"], 2, "--engine spark")
    refused(capsys, tmp_path, [*base, "--input-table", "db.t", *out], 2, "catalog table", "--engine spark")
    refused(capsys, tmp_path, [*base, "--input", str(raw), "--output", str(raw / "out")], 2, "inside the input")
    refused(capsys, tmp_path, [*base, "--input", str(raw), *out, "--columns", "label,body"], 3, "'body'")
    refused(capsys, tmp_path, [*base, "--input", "s3://b/x", *out], 2, "--engine spark")


def test_local_engine_refusals_leave_nothing_behind(raw, tmp_path, capsys, monkeypatch):
    base = ["privacy-risk", "--engine", "local", "--output", str(tmp_path / "out"), "--epsilons", "5"]
    refused(capsys, tmp_path, [*base, "--input", str(raw), "--text-column", "body"], InputDataError.exit_code, "'body'")
    refused(capsys, tmp_path, [*base, "--input", "s3://bucket/x", "--text-column", "text"], 2, "--engine spark")
    refused(
        capsys, tmp_path, [*base, "--input", str(raw), "--text-column", "text", "--master", "local[2]"], 2, "--master"
    )
    calibrate = ["calibrate", "--engine", "local", "--max-reidentification", "0.5", "--output", str(tmp_path / "out")]
    refused(capsys, tmp_path, [*calibrate, "--risk", "s3://bucket/risk"], 2, "--engine spark")
    monkeypatch.setattr("dpspark.run.inputs.MAX_BYTES", 100)
    refused(capsys, tmp_path, [*base, "--input", str(raw), "--text-column", "text"], InputDataError.exit_code, "Spark")


def test_without_pyspark_the_default_engine_is_local(corpus, tmp_path):
    """A machine where pyspark cannot be imported: privacy-risk, calibrate, compare and perturb with no --engine run
    locally and say so."""
    blocker = tmp_path / "nopyspark"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['pyspark'] = None  # as if not installed\n")
    out = tmp_path / "risk"
    argv = ["privacy-risk", "--input", str(corpus), "--text-column", "text", "--output", str(out)]
    argv += ["--mechanisms", "santext", "--epsilons", "3", "--runs", "4", "--vocab-size", "2000", "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from dpspark.cli import main; import pyspark"
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "pyspark" in probe.stderr  # the blocker works
    run = [sys.executable, "-c", "import sys; from dpspark.cli import main; sys.exit(main(sys.argv[1:]))", *argv]
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "engine: local" in done.stdout
    assert json.loads((out / "_dpspark_manifest.json").read_text())["engine"] == "local"
    # calibrate on that output, with no JVM either
    cal = tmp_path / "calibration"
    argv = ["calibrate", "--risk", str(out), "--max-reidentification", "1", "--output", str(cal), "--quiet"]
    done = subprocess.run([*run[:3], *argv], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((cal / "_dpspark_manifest.json").read_text())
    assert manifest["engine"] == "local" and manifest["best"]["epsilon"] == 3.0
    # compare on a CSV, as after `pip install dpspark` on a machine without Java
    out = tmp_path / "compare"
    argv = ["compare", "--input", str(labelled_csv(tmp_path)), "--text-column", "text", "--label-column", "label"]
    argv += ["--mechanisms", "laplace", "--epsilons", "10", "--repeats", "1", "--runs", "4", "--vocab-size", "2000"]
    done = subprocess.run([*run[:3], *argv, "--output", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "engine: local" in done.stdout and (out / "report.md").is_file()
    # perturb on that CSV: a release with its manifest and ledger, no JVM
    out = tmp_path / "released"
    argv = ["perturb", "--input", str(labelled_csv(tmp_path)), "--columns", "text", "--epsilon", "10", "--quiet"]
    done = subprocess.run([*run[:3], *argv, "--output", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "(engine: local)" in done.stdout and pq.read_table(out).num_rows == 120


def labelled_csv(directory: Path, rows: int = 120) -> Path:
    """The first ``rows`` SMS messages as a CSV file (text, label), as a user's export would be."""
    from dpspark.evaluation.datasets import sms_spam

    table = pq.read_table(sms_spam(directory, rows=rows)).select(["text", "label"])
    path = directory / "sms.csv"
    pacsv.write_csv(table, path)
    return path


def test_evaluate_utility_and_compare_run_locally_on_a_csv(tmp_path, capsys):
    """The labelled commands without Spark: a CSV in, the split, the perturbed copies, the classifier and (compare)
    the attacker and text metrics in this process; the outputs and manifests as on Spark (their figures equal
    Spark's: tests/spark/test_local_equals_spark.py)."""
    csv = labelled_csv(tmp_path)
    base = ["--engine", "local", "--input", str(csv), "--text-column", "text", "--label-column", "label"]
    base += ["--epsilons", "10", "--repeats", "1", "--vocab-size", "2000"]
    out = tmp_path / "utility"
    assert main(["evaluate-utility", *base, "--lambdas", "1", "--mode", "both", "--output", str(out)]) == 0
    assert "engine: local" in capsys.readouterr().out
    rows = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["mode"] for r in rows] == ["baseline", "train-time", "test-time"]
    baseline = rows[0]
    assert baseline["accuracy"] >= baseline["majority_rate"] and 0.5 <= baseline["auc"] <= 1.0
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["engine"] == "local" and manifest["rows"]["train"] + manifest["rows"]["test"] == 120
    assert manifest["classes"] == [{"label": "ham", "rows": 101}, {"label": "spam", "rows": 19}]
    assert manifest["model_params"]["optimizer"].startswith("L-BFGS") and "keyed hash" in manifest["split"]["method"]

    out = tmp_path / "compare"
    assert main(["compare", *base, "--mechanisms", "laplace,santext", "--runs", "4", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "engine: local" in printed and "## Recommendation" in (out / "report.md").read_text(encoding="utf-8")
    table = pq.read_table(out / "compare.parquet").to_pylist()
    assert [r["mechanism"] for r in table] == ["laplace", "santext"]
    assert all(0.0 <= r["top1"] <= 1.0 and 0.0 <= r["train-time_accuracy"] <= 1.0 for r in table)
    assert json.loads((out / "_dpspark_manifest.json").read_text())["engine"] == "local"


def test_the_local_labelled_commands_refuse_bad_labels_and_leave_nothing(tmp_path, capsys):
    """The refusals of Spark's labelled input, before any work: a null label, one class, a text column that is
    not text, too few rows of a class for the split; each one sentence, its exit code, nothing written."""
    rows = 40
    texts = [f"message number {i} about {'money' if i % 4 == 0 else 'dinner'}" for i in range(rows)]
    tables = {
        "null.parquet": pa.table({"text": texts, "label": [None if i == 3 else i % 4 == 0 for i in range(rows)]}),
        "one.parquet": pa.table({"text": texts, "label": ["ham"] * rows}),
        "numbers.parquet": pa.table({"text": list(range(rows)), "label": [i % 2 for i in range(rows)]}),
        "rare.parquet": pa.table({"text": texts, "label": ["spam" if i == 0 else "ham" for i in range(rows)]}),
    }
    for name, table in tables.items():
        pq.write_table(table, tmp_path / name)
    want = {
        "null.parquet": "1 null or NaN value(s)",
        "one.parquet": "only the value 'ham'",
        "numbers.parquet": "expected string",
        "rare.parquet": "too few rows for the split",
    }
    for name, phrase in want.items():
        for command in ("evaluate-utility", "compare"):
            argv = [command, "--engine", "local", "--input", str(tmp_path / name), "--text-column", "text"]
            argv += ["--label-column", "label", "--epsilons", "5", "--output", str(tmp_path / "out")]
            refused(capsys, tmp_path, argv, InputDataError.exit_code, phrase)
