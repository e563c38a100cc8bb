"""The executor side of every release: pure functions from Arrow batches to Arrow batches.

``mapInArrow`` hands each task whole Arrow batches; all tokens (or vectors) of a batch
are privatised with one noise draw from ``batch_generator(job key, partition, batch)``,
so a retried or recomputed task reproduces its output exactly within one run and a new
run (new key) draws new noise. The bundle comes from the worker's bounded cache
(``dpspark.spark.resources``). Only the private text or vector leaves these functions.

Hidden count columns carry, per row, only what the released row itself shows (its
output token count and ``[UNK]`` placeholders; ``dpspark.text.COUNT_NAMES``); the
release path aggregates them in the same pass with ``DataFrame.observe`` and drops
them. Their names carry the run id, so no input column can clash with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np
import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_type

from dpspark.run.transform import count_columns, perturb_partition, row_draws, vector_partition
from dpspark.spark.resources import resources
from dpspark.text import (
    COLUMN_TYPES,
    count_column_tokens,
    row_tokens,
)
from dpspark.unit_table import SEGMENT, Counts, TaskCounts, Walk, counted, id_key, partition_counts
from dpspark.units import SHAPE, Allocation, over_cap_counts


def quote(name: str) -> str:
    """A column name as a Spark SQL identifier (dots, spaces and backticks are literal)."""
    return "`" + name.replace("`", "``") + "`"


def map_in_arrow(df: DataFrame, fn, fields: list[T.StructField]) -> DataFrame:  # noqa: ANN001
    """``df.mapInArrow`` for any column names: pyspark resolves each input column by name
    (``df[name]``), which fails for names with dots, so columns travel as ``_c0, _c1, ...``
    and get their names back after. ``fn(batches, names)`` sees the real names."""
    names = df.columns
    safe = [f"_c{i}" for i in range(len(names))]
    out_names = [f.name for f in fields]
    out_safe = [f"_c{i}" for i in range(len(fields))]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        renamed = (pa.RecordBatch.from_arrays(b.columns, names=names) for b in batches)
        for b in fn(renamed):
            yield pa.RecordBatch.from_arrays(b.columns, names=out_safe)

    schema = T.StructType([T.StructField(s, f.dataType, f.nullable) for s, f in zip(out_safe, fields)])
    return df.toDF(*safe).mapInArrow(run, schema).toDF(*out_names)


def token_counts(df: DataFrame, *columns: str) -> dict[str, int]:
    """Token → number of occurrences in ``columns`` (dpspark's tokenizer), counted on the executors.

    Each task counts its own partition. The partial counts of raw tokens are summed by a shuffle only
    where the session encrypts what it writes to local disk (``spark.io.encryption.enabled``, set in
    every session dpspark starts); in a session that does not (a notebook's, spark-submit's), they
    reach the driver as task results and are summed there: no raw token is shuffled to
    ``spark.local.dir`` in plain text (docs/shuffles.md).
    """
    from collections import Counter

    from dpspark.arrow import strings
    from dpspark.spark.io import encrypts_local_io

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        counts: Counter[str] = Counter()
        for b in batches:
            counts.update(count_column_tokens(b, list(columns)))
        yield pa.RecordBatch.from_pydict(
            {"token": strings(list(counts)), "count": pa.array(list(counts.values()), pa.int64())}
        )

    fields = [T.StructField("token", T.StringType()), T.StructField("count", T.LongType())]
    counted = map_in_arrow(df.select(*[F.col(quote(c)) for c in columns]), count, fields)
    if encrypts_local_io(df.sparkSession):
        counted = counted.groupBy("token").agg(F.sum("count").alias("count"))
    total: Counter[str] = Counter()
    for token, n in counted.collect():
        total[token] += int(n)
    return dict(total)


def unit_aggregates(run_id: str, allocation: Allocation) -> list[Column]:
    """The shape of a release's document units, from the output's own per-row token counts (public: a unit's
    tokens are its row's output tokens, placeholders included): units with a token, the fewest (of those),
    the median (``percentile_approx``) and the most tokens per unit, and under a cap the tokens over it."""
    tokens = F.col(quote(count_columns(run_id)[0]))
    some = F.when(tokens > 0, tokens)
    out = [
        F.count(some).alias(f"{SHAPE}units"),
        F.min(some).alias(f"{SHAPE}min"),
        F.percentile_approx(some, 0.5, 100_000).alias(f"{SHAPE}median"),
        F.max(tokens).alias(f"{SHAPE}max"),
    ]
    if allocation.kind == "cap":
        out.append(F.sum(F.greatest(tokens - F.lit(allocation.cap), F.lit(0))).alias(f"{SHAPE}over_cap"))
    return out


def units_over_cap(df: DataFrame, columns: list[str], cap: int) -> tuple[int, int]:
    """How many rows (document units) hold more than ``cap`` tokens over ``columns`` together, and the most any
    row holds: counted on the executors, two numbers per task reach the driver."""

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        over = most = 0
        for b in batches:
            o, m = over_cap_counts(row_tokens(b, b.schema.names), cap)
            over, most = over + o, max(most, m)
        yield pa.RecordBatch.from_pydict({"over": pa.array([over], pa.int64()), "most": pa.array([most], pa.int64())})

    fields = [T.StructField("over", T.LongType()), T.StructField("most", T.LongType())]
    counted = map_in_arrow(df.select(*[F.col(quote(c)) for c in columns]), count, fields)
    over, most = counted.agg(F.sum("over"), F.max("most")).first()
    return int(over or 0), int(most or 0)


def with_segments(df: DataFrame) -> DataFrame:
    """``df`` with each row's read segment (``dpspark.unit_table.SEGMENT``: its file's path and its read split's
    first byte, from the file source's ``_metadata``), so that a ``column:`` unit's cap counts in the files'
    order, not in the order Spark packs the splits into tasks (by size, which follows the text). A frame that
    is no file source's read (or has a column of those names) is returned as it is: its walk follows its
    partitions (``Counts.order``)."""
    if "_metadata" in df.columns or any(c in df.columns for c in SEGMENT):
        return df
    try:
        out = df.select(
            "*",
            F.col("_metadata.file_path").alias(SEGMENT[0]),
            F.col("_metadata.file_block_start").alias(SEGMENT[1]),
        )
        out.schema  # noqa: B018 - Spark Connect analyses lazily: a frame without file metadata fails here
    except AnalysisException:
        return df
    return out


def unit_counts(
    df: DataFrame, unit_column: str, columns: list[str], job_key: bytes, bundle: str | None = None
) -> Counts:
    """A ``column:`` unit's count pass (``dpspark.unit_table``): each task sums the tokens of ``columns`` (with
    the shipped ``bundle`` of a text-level mechanism: each row's draws, ``row_draws``) per keyed hash of
    ``unit_column`` in each of its segments (``with_segments``); the partial counts reach the driver as task
    results (no shuffle, docs/shuffles.md), where ``counted`` orders the segments."""
    key = id_key(job_key)

    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lengths = None if bundle is None else row_draws(partial(resources, bundle), columns)
        part = _task_partition()
        c = partition_counts(batches, unit_column, columns, key, lengths, part)
        yield pa.RecordBatch.from_pydict(  # then the task's row of null ids, without a file
            {
                "t": pa.array([part] * (len(c.file) + 1), pa.int64()),
                "f": pa.array([*c.file, None], pa.string()),
                "b": pa.array([*c.block.tolist(), 0], pa.int64()),
                "h": pa.array([*c.hash.tolist(), 0], pa.int64()),
                "n": pa.array([*c.count.tolist(), c.nulls], pa.int64()),
            }
        )

    fields = [T.StructField("t", T.LongType()), T.StructField("f", T.StringType())]
    fields += [T.StructField(n, T.LongType()) for n in ("b", "h", "n")]
    # Over the release's own rows, all columns, as its transform reads them.
    tasks: dict[int, list] = {}
    for r in map_in_arrow(df, count, fields).collect():
        tasks.setdefault(int(r["t"]), []).append(r)
    return counted(
        TaskCounts(
            [r["f"] for r in rows if r["f"] is not None],
            np.array([r["b"] for r in rows if r["f"] is not None], np.int64),
            np.array([r["h"] for r in rows if r["f"] is not None], np.int64),
            np.array([r["n"] for r in rows if r["f"] is not None], np.int64),
            sum(int(r["n"]) for r in rows if r["f"] is None),
        )
        for _, rows in sorted(tasks.items())
    )


def _task_partition() -> int:
    from pyspark import TaskContext

    return TaskContext.get().partitionId()


def perturb(
    df: DataFrame,
    bundle: str,
    job_key: bytes,
    columns: list[str],
    keep: bool,
    run_id: str,
    extra: dict[str, str] | None = None,
    vocabulary_only: bool = False,
    walk: Walk | None = None,
) -> DataFrame:
    """``df`` with ``columns`` perturbed, then ``<col>_<suffix>`` for each of the mechanism's ``extra``
    columns (``MechanismSpec.extra_columns``: SynTF's term frequencies ``<col>_tf``, map<string, int>),
    ``<col>_original`` if ``keep``, and the hidden count columns. ``vocabulary_only``: every word its
    nearest vocabulary word, no noise (``dpspark.bundle.VocabularyOnly``; evaluations only).
    ``walk``: a ``column:`` unit's id column and key, whose table (``unit_counts``) the bundle holds."""
    counts = count_columns(run_id)
    fields = [f for f in df.schema.fields if f.name not in SEGMENT]
    for suffix, kind in (extra or {}).items():
        spark_type = from_arrow_type(COLUMN_TYPES[kind])
        fields += [T.StructField(f"{col}_{suffix}", spark_type, True) for col in columns]
    if keep:
        fields += [T.StructField(f"{col}_original", T.StringType(), True) for col in columns]
    fields += [T.StructField(n, T.LongType(), False) for n in counts]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return perturb_partition(
            batches,
            partial(resources, bundle),
            _task_partition(),
            job_key,
            columns,
            keep,
            counts,
            tuple(extra or {}),
            vocabulary_only,
            walk,
        )

    return map_in_arrow(df, run, fields)


def release_vectors(
    df: DataFrame,
    column: str,
    job_key: bytes,
    phi: np.ndarray | None,
    epsilon: float,
    beta: float,
    d: int,
    element: T.DataType,
    bundle: str | None,
) -> DataFrame:
    """``df`` with ``column`` replaced by private vectors (PrivEmb with Φ, or M1 without)."""
    out_type = pa.list_(pa.float32() if element == T.FloatType() else pa.float64())
    fields = [
        T.StructField(f.name, T.ArrayType(element) if f.name == column else f.dataType, f.nullable)
        for f in df.schema.fields
    ]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        load = None if bundle is None else partial(resources, bundle)
        return vector_partition(batches, _task_partition(), column, job_key, phi, epsilon, beta, d, out_type, load)

    return map_in_arrow(df, run, fields)
