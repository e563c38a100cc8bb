"""The release-vectors job: PrivEmb (or M1) over an array/vector or text column.

Thin: ``VectorsJob`` validates the column in one aggregation pass (one dimension, no
NaN/Inf), draws the public projection Φ (m × d) once, and ships it inside the task
closure (m·d doubles); a text column becomes, on the executors, the mean of its
tokens' embedding vectors, and only the private vector leaves them. The release path
(``dpspark.spark.release``) reads, commits and records; Φ is written next to the data
through the same file-system layer as the manifest.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpspark.config import VectorsConfig
from dpspark.errors import InputDataError
from dpspark.privemb import M_FORMULA, draw_projection, projection_dim
from dpspark.rng import derived_generator, new_job_key, secure_generator
from dpspark.spark import resources
from dpspark.spark.release import run_release
from dpspark.spark.transform import quote, release_vectors

PROJECTION = "_dpspark_projection.npy"


def check_vectors(df: DataFrame, column: str) -> tuple[int, str]:
    """(d, kind) after one aggregation pass: kind is "array" or "text"; clear errors otherwise."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise InputDataError(f"column {column!r} is not in the input; available columns: {', '.join(fields)}")
    t = fields[column]
    if isinstance(t, T.StringType):
        return -1, "text"
    if not (isinstance(t, T.ArrayType) and isinstance(t.elementType, (T.FloatType, T.DoubleType))):
        raise InputDataError(
            f"column {column!r} has type {t.simpleString()}: release-vectors needs array<float>, array<double> or a "
            "Spark ML vector (or a string column, embedded as the mean of its word vectors)"
        )
    c = F.col(quote(column))
    stats = (
        df.where(c.isNotNull())
        .agg(
            F.min(F.size(c)).alias("dmin"),
            F.max(F.size(c)).alias("dmax"),
            F.sum(F.exists(c, lambda x: F.isnan(x) | (F.abs(x) == float("inf"))).cast("int")).alias("bad"),
            F.sum(F.exists(c, lambda x: x.isNull()).cast("int")).alias("null_elements"),
        )
        .first()
    )
    if stats["dmin"] is None:
        raise InputDataError(f"column {column!r} has no non-null vectors")
    if stats["dmin"] != stats["dmax"]:
        raise InputDataError(
            f"column {column!r} has vectors of different lengths ({stats['dmin']} to {stats['dmax']}): "
            "all vectors must have one dimension"
        )
    if stats["bad"] or stats["null_elements"]:
        raise InputDataError(
            f"column {column!r}: {int(stats['bad'] or 0) + int(stats['null_elements'] or 0)} vectors contain NaN, "
            "Inf or null elements; clean them before the release"
        )
    return int(stats["dmin"]), "array"


class VectorsJob:
    """Check, prepare and transform for the release-vectors release."""

    command = "release-vectors"

    def __init__(self, config: VectorsConfig) -> None:
        self.config = config
        self.shipment: resources.Shipment | None = None
        self.phi: np.ndarray | None = None
        self.d, self.kind, self.m = 0, "array", 0
        self.embedding = ""

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
        c = self.config
        if self.kind == "text":
            from dpspark.bundle import save_bundle
            from dpspark.embeddings import load_embeddings

            emb = load_embeddings(c.embeddings)
            self.d, self.embedding = emb.dim, f"embedding {emb.sha256[:16]}"
            self.shipment = resources.ship(
                spark, lambda d: save_bundle(d, emb, {"nn": None}, embeddings_dir=c.embeddings_dir)
            )
        self.m = c.dim or projection_dim(self.d, c.delta, c.beta)
        self.job_key = new_job_key(c.seed)
        # Φ is public, so its stream must tell nothing of the noise key: from the OS, or (seeded)
        # a stream derived one-way from the job key under its own label.
        if c.mechanism == "privemb":
            rng = secure_generator() if c.seed is None else derived_generator(self.job_key, "projection")
            self.phi = draw_projection(self.m, self.d, rng)

    def transform(self, df: DataFrame, run_id: str) -> tuple[DataFrame, list[Any]]:
        c = self.config
        bundle = self.shipment.name if self.shipment is not None else None
        out = release_vectors(df, c.column, self.job_key, self.phi, c.epsilon, c.beta, self.d, self.element, bundle)
        return out, []

    def replaced_columns(self) -> list[str]:
        return [self.config.column]

    def side_files(self) -> dict[str, bytes]:
        if self.phi is None:
            return {}
        buf = io.BytesIO()
        np.save(buf, self.phi)
        return {PROJECTION: buf.getvalue()}

    def manifest_fields(self, counts: dict[str, int]) -> dict[str, Any]:
        c = self.config
        privemb = c.mechanism == "privemb"
        return {
            "mechanism": c.mechanism,
            "epsilon": c.epsilon,
            "delta": c.delta if privemb else 0.0,
            "beta": c.beta if privemb else None,
            "input_dimension": self.d,
            "output_dimension": self.m if privemb else self.d,
            "m_formula": (M_FORMULA if not c.dim else "given with --dim") if privemb else None,
            "projection": PROJECTION if privemb else None,
            "column": c.column,
            "source": "mean of GloVe word vectors of the text" if self.kind == "text" else "vectors",
            "guarantee": (
                f"({c.epsilon:g}, {c.delta:g})-Lipschitz private: for any two input vectors x, x' and any output set, "
                f"Pr ≤ exp({c.epsilon:g}·‖x − x'‖)·Pr' + {c.delta:g} (Feyisetan & Kasiviswanathan 2021, Prop. 5)"
                if privemb
                else f"{c.epsilon:g}-Lipschitz private: Pr ≤ exp({c.epsilon:g}·‖x − x'‖)·Pr' (M1)"
            ),
            "rows": counts["rows"],
            "seeded": c.seed is not None,
        }

    def ledger_terms(self, observed: dict[str, int] | None = None) -> dict[str, Any]:
        """A metric bound in the Euclidean distance of the released column's vectors (of the mean word
        vector of the embedding, for a text column); PrivEmb's δ is recorded beside ε."""
        c = self.config
        space = f"mean word vector of {self.embedding}" if self.kind == "text" else f"vectors of column {c.column}"
        extra = {"delta": c.delta} if c.mechanism == "privemb" else {}
        return {
            "guarantee_type": "metric",
            "unit": {"distance": "euclidean", "vectors": space, "dimension": self.d},
            "unit_text": f"ε per unit of Euclidean distance between the input {space} (d = {self.d})",
            "parameters": {"name": c.mechanism, "epsilon": c.epsilon, **extra},
            **extra,
        }

    def close(self) -> None:
        if self.shipment is not None:
            self.shipment.close()


def run_release_vectors(settings: dict | VectorsConfig, spark: SparkSession | None = None, df=None) -> dict:  # noqa: ANN001
    """Release private vectors of one column; write Parquet + Φ + manifest. Returns the manifest."""
    config = settings if isinstance(settings, VectorsConfig) else VectorsConfig.parse(settings)
    return run_release(VectorsJob(config), df=df, spark=spark)
