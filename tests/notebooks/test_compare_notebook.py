"""notebooks/compare.py runs end to end on a small SMS spam subset and shows the report inline."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dpspark.notebook_runner import run_notebook

pytestmark = [pytest.mark.spark, pytest.mark.heavy, pytest.mark.slow]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "compare.py"


def test_compare_notebook(spark, tmp_path):
    widgets = {
        "output": str(tmp_path / "cmp"),
        "rows": "300",
        "mechanisms": "laplace,tem",
        "epsilons": "2,50",
        "repeats": "1",
        "runs": "4",
        "vocab_size": "500",
        "refine": "0",
    }
    result = run_notebook(NOTEBOOK, widgets, spark=spark)
    equal, table = [d for d in result["displayed"] if isinstance(d, pd.DataFrame)]
    assert set(equal["setting"]) == {"laplace", "tem β=0.001"} and len(table) == 4
    assert table["top1"].between(0, 1).all() and (table["top1"] >= table["unchanged"] - 1e-12).all()
    (report,) = [h for h in result["html"] if "<h2>Equal empirical privacy</h2>" in h]
    assert 'src="data:image/png;base64,' in report
    assert (tmp_path / "cmp" / "report.md").is_file()
