"""``dpspark compare`` over Spark: the labelled input read, checked and split (``run_labelled``, shared with
evaluate-utility), then the runner (``dpspark.run.compare``) over a ``SparkBackend``; and the Python API."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from dpspark.config import CompareConfig
from dpspark.run.compare import CompareRun
from dpspark.spark.sparkbackend import SparkBackend
from dpspark.spark.utility import run_labelled


def run_compare(config: CompareConfig, spark: SparkSession | None = None, df: DataFrame | None = None) -> dict:
    """Run the comparison (``dpspark.run.compare``); return the manifest."""

    def evaluate(spark: SparkSession, df: DataFrame, *split: Any) -> dict[str, Any]:
        *labelled, out = split  # train, test, the label values, the rows per class; the report's output
        return CompareRun(SparkBackend(spark, out.run_id), config, df, *labelled, out.local).run()

    return run_labelled(config, spark, df, "compare", "comparison", evaluate)


def compare(
    output: str,
    text_column: str,
    label_column: str,
    input: str | None = None,  # noqa: A002
    df: DataFrame | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Python API of ``dpspark compare`` over a Parquet path (``input``) or a DataFrame (``df``).

    Settings are CompareConfig fields (mechanisms, epsilons, grid, repeats, runs, model,
    target_reidentification, max_utility_loss, ...). Returns the manifest: ``recommended``,
    ``equal_privacy`` and the files written (``report.md``, ``report.html``, ``compare.parquet``).
    """
    config = CompareConfig.parse(
        {"output": output, "text_column": text_column, "label_column": label_column, "input": input, **settings}
    )
    return run_compare(config, df=df)
