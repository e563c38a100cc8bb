"""``dpspark evaluate-utility``: how much worse does a model get on perturbed text?

One Spark job for a labelled Parquet dataset (Xu et al. 2020 §5.2; Feyisetan et al.
2020 §5):

1. read, check the text and label columns, map the labels to class indices (sorted
   label values; the last one is the positive class of binary metrics);
2. a fixed train/test split (``utility.in_test``: a hash of each row keyed by ``split_seed``, not noise
   randomness, stated in the manifest), both halves persisted in memory and reused by every run;
3. the non-private **baseline**: the model trained on plain train, scored on plain test;
4. for every setting of the grid (``config.settings()``: mechanisms × ε × each
   mechanism's own axes; without ``--mechanisms`` the noise family's default grid),
   on the driver one ``dpspark.prepare.Prepared`` (the vocabulary, the index and the
   mechanisms' artefacts prepared once and shared under exact search) and one shipped bundle, then R
   independent perturbations (each its own job key, ``dpspark.rng.derive_key(the
   run's key, mode, the setting's parameters, repeat)``) through the release's own
   executor transform (``dpspark.spark.transform.perturb``):
   - **train-time**: train on perturbed train, score on plain test;
   - **test-time**: the baseline model scores perturbed test;
5. results and summary Parquet (model, mode, mechanism, setting, ε, one column per grid
   axis, ``lambda`` first, null where it is not the setting's), ``summary.md`` (a row
   per setting, columns ε), plots with 95% CI bands (a line per setting) and a
   manifest, committed all-or-nothing (``dpspark.spark.reports``).

The model is ``dpspark.engine.logreg`` (``tfidf-logreg``: hashed TF-IDF of dpspark's tokens;
``embedding-logreg``: the mean GloVe vector of a text's tokens; both an L2 logistic regression): its
features are computed on the executors, the fit runs on the driver for a small training half and as
one Spark job per optimiser step for a large one (``sparkbackend.Model``).

The outputs are computed from the raw data (the baseline most plainly): an evaluation
for the data owner, not a release. The manifest says so.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpspark import utility
from dpspark.config import EvaluateUtilityConfig
from dpspark.errors import InputDataError
from dpspark.prepare import local_writes
from dpspark.run import utility as run_utility
from dpspark.run.settings import LABEL, TEXT, UNIT
from dpspark.spark import io, lineage
from dpspark.spark.perturb import check_unit_column
from dpspark.spark.reports import ReportOutput
from dpspark.spark.session import get_session, is_connect, quiet_spark_logs
from dpspark.spark.sparkbackend import SparkBackend
from dpspark.spark.transform import map_in_arrow, quote, with_segments
from dpspark.unit_table import SEGMENT

log = logging.getLogger("dpspark")

ROWS_PER_TASK = 20_000  # small data runs as few tasks: a large half's fit is one Spark job per step


# --- input ------------------------------------------------------------------------------------------


def check_input(df: DataFrame, config: EvaluateUtilityConfig) -> None:
    """The text column is a string, the label column an atomic type."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    for col, what in ((config.text_column, "text"), (config.label_column, "label")):
        if col not in fields:
            flag = "--text-column" if what == "text" else "--label-column"
            raise InputDataError(
                f"{what} column {col!r} is not in the input; available columns: {', '.join(fields)} ({flag})"
            )
    t = fields[config.text_column]
    if not isinstance(t, T.StringType):
        raise InputDataError(
            f"text column {config.text_column!r} has type {t.simpleString()}, expected string: cast it, or name the "
            "text column with --text-column"
        )
    lt = fields[config.label_column]
    if not isinstance(lt, T.StringType | T.BooleanType | T.IntegralType | T.FractionalType):
        raise InputDataError(
            f"label column {config.label_column!r} has type {lt.simpleString()}: labels must be strings, integers, "
            "booleans or numbers (one class per value)"
        )


def label_classes(df: DataFrame, label: str) -> tuple[list[Any], list[str], list[int]]:
    """(label values sorted, their string forms as Spark casts them, row counts): refuses nulls, NaN, one class
    and too many (``utility.check_classes``)."""
    rows = df.groupBy(F.col(quote(label)).alias("v"), F.col(quote(label)).cast("string").alias("k")).count().collect()
    order = utility.check_classes([(r["v"], int(r["count"])) for r in rows], label)
    return [rows[i]["v"] for i in order], [rows[i]["k"] for i in order], [int(rows[i]["count"]) for i in order]


def labelled_frame(df: DataFrame, config: EvaluateUtilityConfig, keys: list[str], rows: int) -> DataFrame:
    """(text, label index) with null texts as empty strings, and a ``column:`` unit's ids (``UNIT``), in about
    rows / ROWS_PER_TASK tasks (no shuffle)."""
    index = F.create_map(*[x for i, k in enumerate(keys) for x in (F.lit(k), F.lit(float(i)))])
    ids = []
    if config.unit.kind == "column":  # the ids, and their rows' read segments (with_segments)
        df = with_segments(df)
        ids = [F.col(quote(str(config.unit.column))).alias(UNIT), *[F.col(c) for c in SEGMENT if c in df.columns]]
    out = df.select(
        F.coalesce(F.col(quote(config.text_column)), F.lit("")).alias(TEXT),
        F.element_at(index, F.col(quote(config.label_column)).cast("string")).alias(LABEL),  # Connect 3.5: no map[col]
        *ids,
    )
    tasks = max(1, math.ceil(rows / ROWS_PER_TASK))
    return out.coalesce(tasks) if num_partitions(out) > tasks else out


def num_partitions(df: DataFrame) -> int:
    """The DataFrame's partitions; on Spark Connect (no RDD) the highest partition id of a row, plus one."""
    if not is_connect(df.sparkSession):
        return df.rdd.getNumPartitions()
    last = df.select(F.spark_partition_id().alias("p")).agg(F.max("p")).first()[0]
    return 1 if last is None else last + 1


def _with_side(batches: Iterator[pa.RecordBatch], seed: int, fraction: float) -> Iterator[pa.RecordBatch]:
    for b in batches:
        side = utility.in_test(b.column(TEXT).to_pylist(), b.column(LABEL).to_pylist(), seed, fraction)
        yield pa.RecordBatch.from_arrays([*b.columns, pa.array(side)], names=[*b.schema.names, "test"])


def split(df: DataFrame, config: EvaluateUtilityConfig, values: list[Any], rows: int) -> tuple[DataFrame, DataFrame]:
    """The fixed split (``utility.in_test``: a keyed hash of each row, computed on the executors), both halves
    persisted in memory; every class must be in both halves."""
    seed, f = config.split_seed, config.test_fraction
    fields = [*df.schema.fields, T.StructField("test", T.BooleanType())]  # text, label (and a unit's ids)
    sided = map_in_arrow(df, lambda it: _with_side(it, seed, f), fields)
    train = sided.filter(~F.col("test")).drop("test").persist(StorageLevel.MEMORY_ONLY)
    test = sided.filter(F.col("test")).drop("test").persist(StorageLevel.MEMORY_ONLY)
    counts = {}
    for name, part in (("train", train), ("test", test)):
        counts[name] = {int(r[LABEL]): int(r["count"]) for r in part.groupBy(LABEL).count().collect()}
    try:
        utility.check_split(counts, values, rows, f)
    except InputDataError:
        train.unpersist()
        test.unpersist()
        raise
    return train, test


# --- the grid --------------------------------------------------------------------------------------


def run_labelled(
    config: EvaluateUtilityConfig,
    spark: SparkSession | None,
    df: DataFrame | None,
    command: str,
    what: str,
    evaluate: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """What evaluate-utility and compare share: the labelled input (``config.input`` or ``df``) read and
    checked, its classes and its fixed split (persisted, unpersisted at the end), the output checked
    first and committed last with the manifest ``evaluate(spark, df, train, test, values, class_counts,
    out)`` returns (plus run id, start and duration)."""
    started, t_start = datetime.now(timezone.utc).isoformat(), time.time()
    if df is None and not config.input:
        from dpspark.errors import ConfigError

        raise ConfigError("input: give the labelled Parquet dataset (--input PATH)")
    spark = spark or (df.sparkSession if df is not None else get_session(config.master, remote=config.remote))
    files = lineage.sources(df).paths if df is not None else None
    with ReportOutput(
        spark, config.input, config.output, config.write_mode, what, files, command, local_writes(config)
    ) as out:
        if df is None:
            df = io.read_input(spark, out.fs, out.paths.input_given or out.paths.input, None)
        check_input(df, config)
        check_unit_column(df, config.unit)
        with io.SqlConf(spark, {"spark.sql.shuffle.partitions": "4"}):  # label counts: a handful of rows
            values, keys, class_counts = label_classes(df, config.label_column)
            rows = sum(class_counts)
            train, test = split(labelled_frame(df, config, keys, rows), config, values, rows)
        try:
            # Each scoring task carries the model (weights and IDF, over 1 MiB): Spark warns of every one (session.py).
            with quiet_spark_logs(spark):
                manifest = evaluate(spark, df, train, test, values, class_counts, out)
        finally:
            train.unpersist()
            test.unpersist()
        manifest.update(run_id=out.run_id, started_at=started, duration_s=round(time.time() - t_start, 3))
        manifest["engine"] = "spark"
        out.commit(manifest)
    log.info("%s finished in %.1f s", command, manifest["duration_s"])
    return manifest


def run_evaluate_utility(
    config: EvaluateUtilityConfig, spark: SparkSession | None = None, df: DataFrame | None = None
) -> dict[str, Any]:
    """Run the evaluation (see the module docstring); return the manifest."""

    def evaluate(spark: SparkSession, df: DataFrame, *split: Any) -> dict[str, Any]:
        *labelled, out = split  # train, test, the label values, the rows per class; the report's output
        return run_utility.evaluate(SparkBackend(spark, out.run_id), config, *labelled, out.local)

    return run_labelled(config, spark, df, "evaluate-utility", "evaluation", evaluate)


def evaluate_utility(
    output: str,
    text_column: str,
    label_column: str,
    input: str | None = None,  # noqa: A002
    df: DataFrame | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Python API of ``dpspark evaluate-utility`` over a Parquet path (``input``) or a DataFrame (``df``).

    Settings are EvaluateUtilityConfig fields (epsilons, mechanism, mechanisms, grid,
    mode, repeats, model, test_fraction, vocab_size, seed, overwrite, ...), e.g.
    ``mechanisms=["laplace", "tem"], grid={"beta": [0.001]}``. Returns the manifest, whose
    ``summary`` holds the mean and 95% CI of every metric per (mode, setting, ε) and whose
    ``settings`` states each setting's guarantee.
    """
    config = EvaluateUtilityConfig.parse(
        {"output": output, "text_column": text_column, "label_column": label_column, "input": input, **settings}
    )
    return run_evaluate_utility(config, df=df)
