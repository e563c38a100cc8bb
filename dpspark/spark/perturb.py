"""The perturb job: text columns rewritten token by token (Laplace or Mahalanobis).

Thin: ``PerturbJob`` checks and transforms on Spark (``dpspark.run.perturb.PerturbRelease`` prepares,
describes and accounts, on any engine); the release path
(``dpspark.spark.release``) reads, commits and records. ``perturb_text`` is the lazy
DataFrame → DataFrame transform for notebooks and pipelines; ``release`` writes a
release (manifest, ledger, refusals) from a DataFrame, as the CLI does from a path.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpspark import units
from dpspark.config import PerturbConfig
from dpspark.errors import ConfigError
from dpspark.run import perturb as run_perturb_checks
from dpspark.run.perturb import PerturbRelease
from dpspark.spark import resources
from dpspark.spark.release import check_stream, run_release
from dpspark.spark.transform import (
    count_columns,
    perturb,
    quote,
    token_counts,
    unit_aggregates,
    unit_counts,
    units_over_cap,
    with_segments,
)
from dpspark.text import COUNT_NAMES, most_frequent
from dpspark.unit_table import Counts, Walk
from dpspark.units import PrivacyUnit

# PerturbConfig fields that only a written release uses: perturb_text refuses them (dpspark.release takes them).
RELEASE_ONLY = ("output", "output_table", "table_format", "mode", "partition", "allow_rerelease")


def check_columns(df: DataFrame, config: PerturbConfig, hidden: list[str] | None = None) -> None:
    """Every named column exists and is a string; no output column would clash with an input one
    (``dpspark.run.perturb.check_columns`` over the DataFrame's schema)."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    text = {n for n, t in fields.items() if isinstance(t, T.StringType)}
    run_perturb_checks.check_columns({n: t.simpleString() for n, t in fields.items()}, text, config, hidden)


def check_unit_column(df: DataFrame, unit: PrivacyUnit) -> None:
    """A ``column:`` unit's id column exists and holds one value per row (no array, map or struct)."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    nested = {n for n, t in fields.items() if t.typeName() in ("array", "map", "struct", "variant", "udt")}
    units.check_unit_column({n: t.simpleString() for n, t in fields.items()}, nested, unit)


def vocabulary_from_corpus(df: DataFrame, columns: list[str], size: int, embedded: dict[str, int]) -> list[str]:
    """The ``size`` most frequent embedded tokens of the corpus: data-dependent, published by the output."""
    return most_frequent(token_counts(df, *columns), embedded, size)


class SparkPasses:
    """``dpspark.run.perturb.Passes`` over a DataFrame: each pass runs on the executors."""

    def __init__(self, df: DataFrame, spark: SparkSession) -> None:
        self.df, self.spark = df, spark

    def unit_counts(
        self, unit_column: str, columns: list[str], job_key: bytes, shipment: resources.Shipment | None = None
    ) -> Counts:
        return unit_counts(self.df, unit_column, columns, job_key, None if shipment is None else shipment.name)

    def over_cap(self, columns: list[str], cap: int) -> tuple[int, int]:
        return units_over_cap(self.df, columns, cap)

    def token_counts(self, columns: list[str]) -> dict[str, int]:
        return token_counts(self.df, *columns)

    def ship(self, write: Any) -> resources.Shipment:
        return resources.ship(self.spark, write)


class PerturbJob(PerturbRelease):
    """The perturb release on Spark: the input checked and perturbed on the executors (``PerturbRelease``
    decides the rest)."""

    def check(self, df: DataFrame) -> DataFrame:
        """The input checked; a ``column:`` unit's with each row's read segment (``with_segments``)."""
        check_columns(df, self.config)
        check_unit_column(df, self.config.unit)
        return with_segments(df) if self.config.unit.kind == "column" else df

    def prepare(self, df: DataFrame, spark: SparkSession, run_id: str) -> None:
        self.prepare_over(SparkPasses(df, spark), run_id)

    def transform(self, df: DataFrame, run_id: str) -> tuple[DataFrame, list[Any]]:
        c = self.config
        extra = c.spec.extra_columns
        walk = Walk(str(c.unit.column), self.job_key) if c.unit.kind == "column" else None
        out = perturb(df, self.shipment.name, self.job_key, list(c.columns), c.keep_original, run_id, extra, walk=walk)
        summed = dict(zip(COUNT_NAMES, count_columns(run_id)))
        sums = [F.sum(F.col(quote(summed[name]))).alias(name) for name in self.sums()]
        if c.unit_budget is not None:
            sums += unit_aggregates(run_id, c.allocation_of)
        return out, sums


def run_perturb(config: PerturbConfig, spark: SparkSession | None = None, df: DataFrame | None = None) -> dict:
    """Release ``config.input`` (or ``df``) into ``config.output``; return the manifest."""
    return run_release(PerturbJob(config), df=df, spark=spark)


def release(
    df: DataFrame,
    output: str | None = None,
    columns: list[str] | str | None = None,
    epsilon: float | None = None,
    **settings: Any,
) -> dict:
    """Write a private release of ``df`` to ``output`` (or ``output_table=``): the same path as
    ``dpspark perturb``.

    Same manifest, ledger, refusals (output overlapping the input, existing output,
    re-release) and atomic commit as the CLI. Settings are PerturbConfig fields
    (mechanism and its parameters, vocab_size, oov, layout, mode, allow_rerelease, seed, ...).
    ``df`` is None where the release reads its input itself (``partition=`` with ``input=``, or
    ``input_table=``), in the active session. Returns the manifest.
    """
    given = {"output": output, "columns": columns, "epsilon": epsilon}
    config = PerturbConfig.parse({**{k: v for k, v in given.items() if v is not None}, **settings})
    return run_perturb(config, spark=df.sparkSession if df is not None else None, df=df)


def perturb_text(
    df: DataFrame,
    columns: list[str] | str,
    epsilon: float | None = None,
    spark: SparkSession | None = None,
    **settings: Any,
) -> DataFrame:
    """Privately perturb every token of ``columns``; return the DataFrame (lazy).

    Args:
        df: input DataFrame (bounded: a stream is refused).
        columns: text column(s) to rewrite.
        epsilon: ε per token (no default; None with a privacy unit's ``unit_budget``).
        spark: the session (default: the DataFrame's).
        **settings: any other PerturbConfig field (mechanism and its parameters, vocab_size,
            nn, oov, layout, seed, keep_original, embeddings, ...) but those of a written
            release (``RELEASE_ONLY``: output, mode, partition, ...), which are refused.

    The result is keyed by a fresh job key (or ``seed``), so evaluating it twice gives
    the same text; calling ``perturb_text`` again gives new noise. To *publish* the
    result, use ``release`` (manifest, ledger, refusals) rather than ``df.write``.
    """
    written = [k for k in settings if k.replace("-", "_") in RELEASE_ONLY]
    if written:
        raise ConfigError(
            f"perturb_text writes nothing and takes no {', '.join(written)}: call dpspark.release(df, output=..., "
            "...) to write a release (manifest, ledger, refusals)"
        )
    config = PerturbConfig.parse({"columns": columns, "epsilon": epsilon, **settings})
    check_stream(df)
    spark = spark or df.sparkSession
    run_id = uuid.uuid4().hex
    job = PerturbJob(config)
    job.check(df)
    job.prepare(df, spark, run_id)  # the archive stays until exit: the DataFrame may be evaluated any time
    out, _ = job.transform(df, run_id)
    return out.drop(*count_columns(run_id))
