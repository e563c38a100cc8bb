"""The Databricks notebooks run end to end through dpspark.notebook_runner on a local session."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from dpspark.notebook_runner import NotebookError, WidgetError, parse_cells, python_source, run_notebook

pytestmark = [pytest.mark.spark, pytest.mark.runtime]  # the notebooks' runner

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
REVIEWS = ROOT / "examples" / "reviews.parquet"


def frames(result: dict, *columns: str) -> list[pd.DataFrame]:
    return [d for d in result["displayed"] if isinstance(d, pd.DataFrame) and set(columns) <= set(d.columns)]


@pytest.mark.parametrize("name", ["perturb_text.py", "privacy_stats.py", "release_vectors.py", "compare.py"])
def test_notebook_format(name):
    text = (NOTEBOOKS / name).read_text(encoding="utf-8")
    assert text.splitlines()[0] == "# Databricks notebook source"
    cells = parse_cells(text)
    assert len(cells) >= 5
    assert cells[0].startswith("# MAGIC %md")
    pip = [i for i, c in enumerate(cells) if c.startswith("# MAGIC %pip install")]
    # dpspark with its dependencies first, then any data packages without theirs; one restart after them.
    assert pip and pip == list(range(pip[0], pip[-1] + 1))
    assert cells[pip[-1] + 1].strip() == "dbutils.library.restartPython()"
    assert not any(python_source(cells[i]).strip() for i in pip) and not python_source(cells[pip[-1] + 1]).strip()
    assert "--no-deps" not in cells[pip[0]] and "dpspark-" in cells[pip[0]]
    assert "dbutils.widgets.get(" in text


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.py")))
def test_notebooks_need_no_spark_context(name):
    """Serverless and standard access mode have no SparkContext: no ``sc``, RDD or JVM handle in any
    cell (tests/connect runs every notebook on a Spark Connect session)."""
    code = "\n".join(python_source(c) for c in parse_cells((NOTEBOOKS / name).read_text(encoding="utf-8")))
    assert not re.findall(r"\bsc\b|\.rdd\b|sparkContext|_jvm|_jsc", code)


def test_perturb_text_notebook(spark, tmp_path):
    out = tmp_path / "private"
    result = run_notebook(
        NOTEBOOKS / "perturb_text.py", {"input": str(REVIEWS), "output": str(out), "epsilon": "10"}, spark=spark
    )
    original = pq.read_table(REVIEWS).to_pandas().set_index("id")
    (released,) = frames(result, "id", "text", "title", "rating")
    assert len(released) == 20
    changed = sum(row.text != original.loc[row.id, "text"] for row in released.itertuples())
    assert changed >= 15
    assert (released.set_index("id")["title"] == original.loc[released["id"], "title"]).all()
    (before_after,) = frames(result, "id", "text_before", "text_after")
    assert len(before_after) == 10 and (before_after["text_before"] != before_after["text_after"]).sum() >= 8
    written = pq.read_table(out).to_pandas()
    assert len(written) == len(original) and set(written.columns) == set(original.reset_index().columns)
    assert result["namespace"]["config"].epsilon == 10.0
    # The notebook's release is a release: manifest and ledger entry, like the CLI's.
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["command"] == "perturb" and manifest["epsilon"] == 10.0
    (entry,) = [json.loads(p.read_text()) for p in (out / "_dpspark_ledger").glob("*.json")]
    assert entry["run_id"] == manifest["run_id"] and entry["partition"] is None and entry["epsilon"] == 10.0


def test_perturb_text_notebook_takes_every_mechanisms_parameters(spark, tmp_path):
    """One widget per parameter of the registry: SanText+'s p reaches the release and its manifest."""
    out = tmp_path / "private"
    widgets = {"input": str(REVIEWS), "output": str(out), "epsilon": "3", "mechanism": "santext-plus", "p": "0.5"}
    run_notebook(NOTEBOOKS / "perturb_text.py", widgets, spark=spark)
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["mechanism"] == "santext-plus" and manifest["guarantee_type"] == "umldp"
    assert manifest["mechanism_parameters"]["p"] == 0.5
    assert any("verbatim with probability 1 - p = 0.5" in n for n in manifest["outside_guarantee"])
    with pytest.raises(NotebookError, match="t: is not a parameter of santext-plus"):
        run_notebook(NOTEBOOKS / "perturb_text.py", {**widgets, "t": "0.5"}, spark=spark)


def test_perturb_text_notebook_takes_a_privacy_unit(spark, tmp_path):
    """The privacy unit's widgets reach the release: every row of one rating (a column: unit, its id space
    named) shares the budget, capped at 20 tokens."""
    out = tmp_path / "private"
    widgets = {
        "input": str(REVIEWS),
        "output": str(out),
        "privacy_unit": "column",
        "unit_column": "rating@stars",
        "unit_budget": "40",
        "vocab_size": "2000",
    }
    run_notebook(NOTEBOOKS / "perturb_text.py", {**widgets, "allocation": "cap:20"}, spark=spark)
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["privacy_unit"] == {"kind": "column", "column": "rating", "id_space": "stars"}
    assert manifest["unit_budget"] == 40.0 and manifest["unit_counts"]["units"] == 5
    assert manifest["epsilon"] is None and manifest["allocation"]["cap"] == 20


def test_perturb_text_notebook_rejects_bad_settings_by_name(spark, tmp_path):
    with pytest.raises(NotebookError, match=r"cell \d+ failed.*ConfigError.*epsilon") as info:
        run_notebook(
            NOTEBOOKS / "perturb_text.py",
            {"input": str(REVIEWS), "output": str(tmp_path / "o"), "epsilon": "-1"},
            spark=spark,
        )
    assert "PerturbConfig.parse" in info.value.source
    with pytest.raises(NotebookError, match="'laplace2' is not one of"):
        run_notebook(NOTEBOOKS / "perturb_text.py", {"mechanism": "laplace2"}, spark=spark)


def test_privacy_stats_notebook(spark, tmp_path):
    out = tmp_path / "stats"
    small = {"epsilons": "5,10", "lambdas": "0,1", "words": "50", "vocab_size": "5000"}  # the CLI's grid is larger
    result = run_notebook(NOTEBOOKS / "privacy_stats.py", {"output": str(out), "runs": "10", **small}, spark=spark)
    (summary,) = frames(result, "epsilon", "lambda", "nw_mean", "sw_mean")
    assert len(summary) == 4  # ε {5, 10} × λ {0, 1}: mahalanobis, whose λ = 0 is the Laplace mechanism
    assert set(summary["epsilon"]) == {5.0, 10.0} and set(summary["lambda"]) == {0.0, 1.0}
    assert set(summary["setting"]) == {"laplace", "mahalanobis λ=1"}
    assert (summary["runs"] == 10).all() and (summary["nw_max"] <= 10).all() and (summary["sw_min"] >= 1).all()
    images = [h for h in result["html"] if 'src="data:image/png;base64,' in h]
    assert len(images) == 2
    png = base64.b64decode(images[0].split("base64,", 1)[1].split('"', 1)[0])
    assert png.startswith(b"\x89PNG")
    (per_word,) = frames(result, "word", "nw", "sw")
    assert len(per_word) == 20
    for name in ("per_word.parquet", "summary.csv", "summary.md", "percentiles.png", "histograms.png"):
        assert (out / name).is_file(), name


def test_privacy_stats_notebook_mixes_mechanisms(spark, tmp_path):
    out = tmp_path / "stats"
    widgets = {"output": str(out), "runs": "10", "mechanisms": "vickrey,tem,santext", "lambdas": "1"}
    widgets.update(epsilons="5,10", words="50", vocab_size="5000")
    result = run_notebook(NOTEBOOKS / "privacy_stats.py", widgets, spark=spark)
    (summary,) = frames(result, "setting", "epsilon", "nw_mean", "exact_nw_mean")
    assert set(summary["setting"]) == {"vickrey λ=1 t=0.5", "tem β=0.001", "santext"} and len(summary) == 6
    exact = summary[summary["setting"] != "vickrey λ=1 t=0.5"]
    assert exact["exact_nw_mean"].notna().all() and summary["exact_nw_mean"].isna().sum() == 2


def test_release_vectors_notebook(spark, tmp_path):
    out = tmp_path / "vectors"
    result = run_notebook(
        NOTEBOOKS / "release_vectors.py",
        {"input": str(REVIEWS), "output": str(out), "epsilon": "5", "delta": "1e-6", "beta": "0.8"},
        spark=spark,
    )
    manifest = result["namespace"]["manifest"]
    assert manifest["input_dimension"] == 50 and manifest["output_dimension"] == 51  # m for d = 50, δ = 1e-6, β = 0.8
    (released,) = frames(result, "dimension", "id", "text")
    lengths = {len(v) for v in released["text"] if v is not None}
    assert lengths == {51} and len(released) == 20
    assert (out / "_dpspark_projection.npy").is_file()
    on_disk = json.loads((out / "_dpspark_manifest.json").read_text())
    assert on_disk["rows"] == pq.read_metadata(REVIEWS).num_rows == len(pq.read_table(out))
    (settings,) = frames(result, "setting", "value")
    assert dict(zip(settings["setting"], settings["value"]))["mechanism"] == "privemb"


def test_runner_names_the_failing_cell(spark, tmp_path):
    notebook = tmp_path / "broken.py"
    notebook.write_text(
        "# Databricks notebook source\n"
        "# MAGIC %md\n# MAGIC # A broken notebook\n\n"
        "# COMMAND ----------\n\n"
        "# MAGIC %pip install nothing-at-all\n\n"
        "# COMMAND ----------\n\n"
        "dbutils.library.restartPython()\n\n"
        "# COMMAND ----------\n\n"
        'dbutils.widgets.text("n", "3")\n'
        'n = int(dbutils.widgets.get("n"))\n'
        "display(spark.range(n))\n\n"
        "# COMMAND ----------\n\n"
        "x = 1 / (n - n)\n",
        encoding="utf-8",
    )
    with pytest.raises(NotebookError, match=r"broken\.py: cell 5 failed \('x = 1 / \(n - n\)'\): ZeroDivisionError"):
        run_notebook(notebook, spark=spark)
    notebook.write_text(notebook.read_text().replace("x = 1 / (n - n)", "x = n * 2"), encoding="utf-8")
    result = run_notebook(notebook, {"n": 5}, spark=spark)
    assert result["namespace"]["x"] == 10
    assert list(result["displayed"][0]["id"]) == [0, 1, 2, 3, 4]


def test_widgets_must_be_defined_before_use(spark, tmp_path):
    notebook = tmp_path / "undefined.py"
    notebook.write_text('# Databricks notebook source\nvalue = dbutils.widgets.get("missing")\n', encoding="utf-8")
    with pytest.raises(NotebookError, match="cell 1 failed.*widget 'missing' is not defined") as info:
        run_notebook(notebook, spark=spark)
    assert isinstance(info.value.error, WidgetError)
    plain = tmp_path / "plain.py"
    plain.write_text("print('not a notebook')\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a Databricks source notebook"):
        run_notebook(plain, spark=spark)


@pytest.mark.parametrize("notebook", ["perturb_text.py", "release_vectors.py"])
def test_notebook_paths_have_no_default_and_install_from_a_volume(spark, tmp_path, notebook):
    text = (NOTEBOOKS / notebook).read_text(encoding="utf-8")
    assert "%pip install /Volumes/" in text and "/dbfs/" not in text
    with pytest.raises(NotebookError, match="set the 'input' widget"):
        run_notebook(NOTEBOOKS / notebook, {"output": str(tmp_path / "o")}, spark=spark)
    assert not (tmp_path / "o").exists()
