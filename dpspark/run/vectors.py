"""``dpspark release-vectors``' job, over any engine: the checks of the column's facts, Φ, the bundle of a text
column, and its part of the manifest and the ledger; no pyspark here (``dpspark.spark.vectors.VectorsJob`` reads
the facts with Spark, ``dpspark.local`` with pyarrow).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpspark.config import VectorsConfig
from dpspark.errors import InputDataError
from dpspark.privemb import M_FORMULA, draw_projection, projection_dim
from dpspark.rng import derived_generator, new_job_key, secure_generator
from dpspark.run.backend import Shipment

PROJECTION = "_dpspark_projection.npy"


def missing_column(column: str, columns: list[str]) -> InputDataError:
    return InputDataError(f"column {column!r} is not in the input; available columns: {', '.join(columns)}")


def not_vectors(column: str, kind: str) -> InputDataError:
    return InputDataError(
        f"column {column!r} has type {kind}: release-vectors needs array<float>, array<double> or a "
        "Spark ML vector (or a string column, embedded as the mean of its word vectors)"
    )


def check_facts(column: str, dmin: int | None, dmax: int | None, bad: int) -> int:
    """The dimension of a vector column from its facts (the fewest and most elements of a non-null vector, and the
    vectors holding NaN, Inf or a null element), after refusing a column without vectors, of mixed lengths, or with
    such vectors."""
    if dmin is None:
        raise InputDataError(f"column {column!r} has no non-null vectors")
    if dmin != dmax:
        raise InputDataError(
            f"column {column!r} has vectors of different lengths ({dmin} to {dmax}): "
            "all vectors must have one dimension"
        )
    if bad:
        raise InputDataError(
            f"column {column!r}: {bad} vectors contain NaN, Inf or null elements; clean them before the release"
        )
    return int(dmin)


class VectorsRelease:
    """Prepare, describe and account for the release-vectors release, on any engine (see the module docstring).
    ``d`` and ``kind`` ("array" or "text") are the engine's check's."""

    command = "release-vectors"

    def __init__(self, config: VectorsConfig) -> None:
        self.config = config
        self.shipment: Shipment | None = None
        self.phi: np.ndarray | None = None
        self.d, self.kind, self.m = 0, "array", 0
        self.embedding = ""
        self.job_key = b""

    def prepare_over(self, ship: Callable[[Callable[[Path], object]], Shipment]) -> None:
        """A text column's bundle (the embedding, shipped by ``ship``), the output dimension, the job key and Φ."""
        c = self.config
        if self.kind == "text":
            from dpspark.bundle import save_bundle
            from dpspark.embeddings import load_embeddings

            emb = load_embeddings(c.embeddings)
            self.d, self.embedding = emb.dim, f"embedding {emb.sha256[:16]}"
            self.shipment = ship(lambda d: save_bundle(d, emb, {"nn": None}, embeddings_dir=c.embeddings_dir))
        self.m = c.dim or projection_dim(self.d, c.delta, c.beta)
        self.job_key = new_job_key(c.seed)
        # Φ is public, so its stream must tell nothing of the noise key: from the OS, or (seeded)
        # a stream derived one-way from the job key under its own label.
        if c.mechanism == "privemb":
            rng = secure_generator() if c.seed is None else derived_generator(self.job_key, "projection")
            self.phi = draw_projection(self.m, self.d, rng)

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
