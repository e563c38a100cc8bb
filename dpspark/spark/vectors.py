"""The release-vectors job: PrivEmb (or M1) over an array/vector column, on Spark.

The driver validates the column in one aggregation pass (one dimension, no NaN/Inf),
draws the public projection Φ (m × d) once, and ships it inside the task closure (it is
small: m·d doubles). Executors privatise one Arrow batch at a time with the same keyed
generators as the perturb job (job key, partition, batch). Text columns can be released
too: each text becomes the mean of its tokens' embedding vectors on the executor and
only the private vector leaves it.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import dpspark
from dpspark.errors import ConfigError, InputDataError, OutputExistsError
from dpspark.mechanisms import check_epsilon
from dpspark.privemb import M_FORMULA, check_beta, check_delta, draw_projection, m1, privemb, projection_dim
from dpspark.rng import batch_generator, new_job_key, secure_generator
from dpspark.spark.fs import FileSystem
from dpspark.spark.perturb import _read_input
from dpspark.spark.session import get_session, ship_directory

MANIFEST = "_dpspark_manifest.json"
PROJECTION = "_dpspark_projection.npy"
_EMBEDDERS: dict[str, tuple] = {}


def _embedder(bundle: str) -> tuple:
    cached = _EMBEDDERS.get(bundle)
    if cached is None:
        from pyspark import SparkFiles

        d = SparkFiles.get(bundle)
        vectors = np.load(f"{d}/vectors.npy", mmap_mode="r")
        with pa.memory_map(f"{d}/words.arrow") as src:
            words = pa.ipc.open_file(src).read_all().column("word").to_pylist()
        cached = _EMBEDDERS[bundle] = (vectors, {w: i for i, w in enumerate(words)})
    return cached


def mean_vectors(texts: list[str | None], vectors: np.ndarray, index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean embedding of each text's tokens (texts without an embedded token get the zero vector).

    Returns (n_valid × d, mask of non-null rows).
    """
    from dpspark.text import tokenize

    valid = np.array([t is not None for t in texts])
    out = np.zeros((int(valid.sum()), vectors.shape[1]))
    for i, t in enumerate(t for t in texts if t is not None):
        rows = [r for r in (index.get(tok, -1) for tok in tokenize(t)[0]) if r >= 0]
        if rows:
            out[i] = vectors[rows].mean(axis=0)
    return out, valid


def _release_batches(
    batches: Iterator[pa.RecordBatch],
    column: str,
    job_key: bytes,
    phi: np.ndarray | None,
    epsilon: float,
    beta: float,
    dim: int,
    out_type: pa.DataType,
    bundle: str | None,
) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    for number, batch in enumerate(batches):
        rng = batch_generator(job_key, partition, number)
        arrays = dict(zip(batch.schema.names, batch.columns))
        col = arrays[column]
        if bundle is not None:
            vectors, index = _embedder(bundle)
            x, valid = mean_vectors(col.to_pylist(), vectors, index)
        else:
            valid = ~np.asarray(col.is_null())
            x = np.asarray(col.flatten(), dtype=np.float64).reshape(int(valid.sum()), -1)
        private = privemb(x, phi, epsilon, beta, rng) if phi is not None else m1(x, epsilon, rng)
        lengths = np.where(valid, dim, 0)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = pa.array(private.ravel(), type=out_type.value_type)
        arrays[column] = pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(~valid)).cast(out_type)
        yield pa.RecordBatch.from_pydict(arrays)


def _check_vectors(df: DataFrame, column: str) -> tuple[int, str]:
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
    c = F.col(column)
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


def run_release_vectors(settings: dict, spark: SparkSession | None = None) -> dict:
    """Release private vectors of one column; write Parquet + Φ + manifest. Returns the manifest."""
    started = time.time()
    for k in ("input", "output", "column", "epsilon"):
        if settings.get(k) is None:
            raise ConfigError(f"{k} is required (--{k.replace('_', '-')})")
    mechanism = settings.get("mechanism", "privemb")
    if mechanism not in ("privemb", "m1"):
        raise ConfigError(f"mechanism must be privemb or m1, got {mechanism!r}")
    epsilon = check_epsilon(settings["epsilon"])
    delta = check_delta(float(settings.get("delta", 1e-6)))
    beta = check_beta(float(settings.get("beta", 0.8)))
    seed = settings.get("seed")
    spark = spark or get_session(settings.get("master"))
    fs = FileSystem(spark)
    output = str(settings["output"]).rstrip("/")
    if settings.get("mode", "error") == "error" and fs.exists(output):
        raise OutputExistsError(f"output {output} already exists: choose a new path or pass --mode overwrite")
    df = _read_input(spark, settings["input"], fs)
    column = settings["column"]
    if isinstance(dict(df.dtypes).get(column), str) and dict(df.dtypes)[column] == "vector":
        from pyspark.ml.functions import vector_to_array

        df = df.withColumn(column, vector_to_array(F.col(column)))
    d, kind = _check_vectors(df, column)
    bundle = None
    if kind == "text":
        from dpspark.config import PerturbConfig
        from dpspark.prepare import prepare
        from dpspark.spark.perturb import _BUNDLES

        prepared = prepare(
            PerturbConfig(epsilon=epsilon, embeddings=settings.get("embeddings", "glove-6b-50d"), vocab_size=2**31 - 1)
        )
        root = tempfile.mkdtemp(prefix="dpspark-")
        _BUNDLES.append(root)
        bundle = f"dpspark-embed-{uuid.uuid4().hex}"
        prepared.save(f"{root}/{bundle}")
        bundle = ship_directory(spark, f"{root}/{bundle}")
        d = prepared.embeddings.dim
    m = int(settings["dim"]) if settings.get("dim") else projection_dim(d, delta, beta)
    job_key = new_job_key(seed)
    # Φ is public but must not be predictable from the noise key: its own generator.
    phi = (
        draw_projection(m, d, secure_generator() if seed is None else np.random.default_rng(seed + 1))
        if mechanism == "privemb"
        else None
    )
    dim = m if mechanism == "privemb" else d
    element = (
        T.FloatType() if kind == "array" and df.schema[column].dataType.elementType == T.FloatType() else T.DoubleType()
    )
    out_type = pa.list_(pa.float32() if element == T.FloatType() else pa.float64())
    schema = T.StructType(
        [
            T.StructField(f.name, T.ArrayType(element) if f.name == column else f.dataType, f.nullable)
            for f in df.schema.fields
        ]
    )

    def release(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _release_batches(batches, column, job_key, phi, epsilon, beta, dim, out_type, bundle)

    tmp = f"{output}._dpspark_tmp_{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    try:
        out = df.mapInArrow(release, schema)
        out.write.mode("overwrite").parquet(tmp)
        release_s = time.perf_counter() - t0
        rows = spark.read.parquet(tmp).count()
        if phi is not None:
            import io

            buf = io.BytesIO()
            np.save(buf, phi)
            local = tmp if "://" not in tmp or tmp.startswith("file:") else None
            if local is None:
                raise ConfigError("release-vectors writes Φ next to the data and supports local output paths for now")
            with open(f"{tmp}/{PROJECTION}", "wb") as f:
                f.write(buf.getvalue())
        manifest = {
            "dpspark_version": dpspark.__version__,
            "status": "succeeded",
            "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
            "mechanism": mechanism,
            "epsilon": epsilon,
            "delta": delta if mechanism == "privemb" else 0.0,
            "beta": beta if mechanism == "privemb" else None,
            "input_dimension": d,
            "output_dimension": dim,
            "m_formula": M_FORMULA if mechanism == "privemb" and not settings.get("dim") else "given with --dim",
            "projection": PROJECTION if phi is not None else None,
            "column": column,
            "source": "mean of GloVe word vectors of the text" if kind == "text" else "vectors",
            "guarantee": (
                f"({epsilon:g}, {delta:g})-Lipschitz private: for any two input vectors x, x' and any output set, "
                f"Pr ≤ exp({epsilon:g}·‖x − x'‖)·Pr' + {delta:g} (Feyisetan & Kasiviswanathan 2021, Prop. 5)"
                if mechanism == "privemb"
                else f"{epsilon:g}-Lipschitz private: Pr ≤ exp({epsilon:g}·‖x − x'‖)·Pr' (M1)"
            ),
            "rows": rows,
            "seeded": seed is not None,
            "timings": {"release_and_write_s": round(release_s, 3), "vectors_per_s": round(rows / release_s, 1)},
            "duration_s": round(time.time() - started, 3),
        }
        fs.write_text(f"{tmp}/{MANIFEST}", json.dumps(manifest, indent=2))
        if fs.exists(output):
            fs.remove(output)
        fs.rename(tmp, output)
    except BaseException:
        fs.remove(tmp)
        raise
    return manifest
