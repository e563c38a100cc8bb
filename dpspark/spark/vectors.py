"""The release-vectors job: PrivEmb (or M1) over an array/vector or text column.

Thin: ``VectorsJob`` validates the column in one aggregation pass (one dimension, no
NaN/Inf), draws the public projection Φ (m × d) once, and ships it inside the task
closure (m·d doubles); a text column becomes, on the executors, the mean of its
tokens' embedding vectors, and only the private vector leaves them. The release path
(``dpspark.spark.release``) reads, commits and records; Φ is written next to the data
through the same file-system layer as the manifest.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpspark.config import VectorsConfig
from dpspark.run.vectors import PROJECTION, VectorsRelease, check_facts, missing_column, not_vectors
from dpspark.spark import resources
from dpspark.spark.release import run_release
from dpspark.spark.transform import quote, release_vectors

__all__ = ["PROJECTION", "VectorsJob", "check_vectors", "run_release_vectors"]


def check_vectors(df: DataFrame, column: str) -> tuple[int, str]:
    """(d, kind) after one aggregation pass: kind is "array" or "text"; clear errors otherwise."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise missing_column(column, list(fields))
    t = fields[column]
    if isinstance(t, T.StringType):
        return -1, "text"
    if not (isinstance(t, T.ArrayType) and isinstance(t.elementType, (T.FloatType, T.DoubleType))):
        raise not_vectors(column, t.simpleString())
    c = F.col(quote(column))
    stats = (
        df.where(c.isNotNull())
        .agg(
            F.min(F.size(c)).alias("dmin"),
            F.max(F.size(c)).alias("dmax"),
            F.sum(F.exists(c, lambda x: F.isnan(x) | (F.abs(x) == float("inf")) | x.isNull()).cast("int")).alias("bad"),
        )
        .first()
    )
    return check_facts(column, stats["dmin"], stats["dmax"], int(stats["bad"] or 0)), "array"


class VectorsJob(VectorsRelease):
    """The release-vectors release on Spark: the column checked and released on the executors
    (``VectorsRelease`` decides the rest)."""

    def check(self, df: DataFrame) -> DataFrame:
        column = self.config.column
        if dict(df.dtypes).get(column) == "vector":
            from pyspark.ml.functions import vector_to_array

            df = df.withColumn(column, vector_to_array(F.col(quote(column))))
        self.d, self.kind = check_vectors(df, column)
        self.element = (
            T.FloatType()
            if self.kind == "array" and df.schema[column].dataType.elementType == T.FloatType()
            else T.DoubleType()
        )
        return df

    def prepare(self, df: DataFrame, spark: SparkSession, run_id: str) -> None:
        self.prepare_over(lambda write: resources.ship(spark, write))

    def transform(self, df: DataFrame, run_id: str) -> tuple[DataFrame, list[Any]]:
        c = self.config
        bundle = self.shipment.name if self.shipment is not None else None
        out = release_vectors(df, c.column, self.job_key, self.phi, c.epsilon, c.beta, self.d, self.element, bundle)
        return out, []


def run_release_vectors(settings: dict | VectorsConfig, spark: SparkSession | None = None, df=None) -> dict:  # noqa: ANN001
    """Release private vectors of one column; write Parquet + Φ + manifest. Returns the manifest."""
    config = settings if isinstance(settings, VectorsConfig) else VectorsConfig.parse(settings)
    return run_release(VectorsJob(config), df=df, spark=spark)
