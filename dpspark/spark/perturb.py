"""The perturb job on Spark: ship the bundle, map Arrow batches, count, write, manifest.

Data flow (design §3): the driver prepares Σ, A, the embedding matrix and the index
once (dpspark.prepare), writes them as a bundle directory and ships it with
``ship_directory`` (an archive: ``addArchive``, or a session artifact on Spark
Connect). Each Python worker loads the bundle once into the module-level
``_PERTURBERS`` cache (it survives across tasks because Spark reuses
Python workers and this module is imported, not pickled). ``mapInArrow`` hands the
executor whole Arrow batches: all in-vocabulary tokens of a batch are perturbed with
one noise draw and one blocked nearest-neighbour search.

Noise of a batch comes from ``batch_generator(job key, partition, batch)``: a retried
or recomputed task reproduces its text exactly within one run, a new run draws a new
key. Counts are taken in the same pass (``DataFrame.observe``), never by evaluating
the perturbed DataFrame a second time.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.observation import Observation
from pyspark.sql.utils import AnalysisException

import dpspark
from dpspark.config import PerturbConfig
from dpspark.errors import ConfigError, InputDataError, OutputExistsError, ReleaseRefusedError
from dpspark.prepare import Prepared, load_perturber, prepare
from dpspark.rng import batch_generator, new_job_key
from dpspark.spark.fs import FileSystem
from dpspark.spark.session import get_session, is_connect, ship_directory
from dpspark.text import COUNT_NAMES, TextPerturber

log = logging.getLogger("dpspark")

MANIFEST = "_dpspark_manifest.json"
_COUNT_PREFIX = "__dpspark_"
_PERTURBERS: dict[str, TextPerturber] = {}
_BUNDLES: list[str] = []  # driver-side temporary bundle directories, removed at exit


def _perturber(bundle: str) -> TextPerturber:
    """The worker's cached perturber for ``bundle`` (loaded on first use in this process)."""
    cached = _PERTURBERS.get(bundle)
    if cached is None:
        from pyspark import SparkFiles
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)  # one BLAS thread per worker: Spark's task slots use the cores
        cached = _PERTURBERS[bundle] = load_perturber(SparkFiles.get(bundle))
    return cached


def _map_batches(
    batches: Iterator[pa.RecordBatch], bundle: str, job_key: bytes, columns: list[str], keep_original: bool
) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    perturber = _perturber(bundle)
    partition = TaskContext.get().partitionId()
    for number, batch in enumerate(batches):
        rng = batch_generator(job_key, partition, number)
        arrays = dict(zip(batch.schema.names, batch.columns))
        totals = None
        originals = {}
        for col in columns:
            originals[col] = arrays[col]
            arrays[col], per_row = perturber.perturb_array(arrays[col], rng)
            totals = per_row if totals is None else totals + per_row
        if keep_original:
            arrays.update({f"{c}_original": originals[c] for c in columns})
        for i, name in enumerate(COUNT_NAMES):
            arrays[_COUNT_PREFIX + name] = pa.array(totals[:, i], pa.int64())
        yield pa.RecordBatch.from_pydict(arrays)


def _check_input(df: DataFrame, columns: list[str]) -> None:
    if not columns:
        raise ConfigError("columns: name at least one text column to perturb (--columns COL[,COL...])")
    fields = {f.name: f.dataType for f in df.schema.fields}
    for col in columns:
        if col not in fields:
            raise InputDataError(f"column {col!r} is not in the input; available columns: {', '.join(fields)}")
        if not isinstance(fields[col], T.StringType):
            raise InputDataError(
                f"column {col!r} has type {fields[col].simpleString()}, expected string: only text columns can be "
                "perturbed (cast it, or choose another column)"
            )


def _ship(spark: SparkSession, prepared: Prepared) -> str:
    """Write the bundle to a fresh temporary directory and send it to the executors."""
    name = f"dpspark-bundle-{uuid.uuid4().hex}"
    root = Path(tempfile.mkdtemp(prefix="dpspark-"))
    _BUNDLES.append(str(root))
    prepared.save(root / name)
    return ship_directory(spark, root / name)


def _transform(df: DataFrame, prepared: Prepared, job_key: bytes, spark: SparkSession) -> DataFrame:
    """The perturbed DataFrame with the hidden per-row count columns appended."""
    c = prepared.config
    _check_input(df, c.columns)
    df = _balance(df, c.partitions, spark)
    bundle = _ship(spark, prepared)
    columns, keep = list(c.columns), c.keep_original

    def perturb_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _map_batches(batches, bundle, job_key, columns, keep)

    fields = list(df.schema.fields)
    if keep:
        fields += [T.StructField(f"{col}_original", T.StringType(), True) for col in columns]
    fields += [T.StructField(_COUNT_PREFIX + n, T.LongType(), False) for n in COUNT_NAMES]
    return df.mapInArrow(perturb_batches, T.StructType(fields))


def _balance(df: DataFrame, partitions: int | None, spark: SparkSession) -> DataFrame:
    """Spread the rows over enough tasks to keep every core busy.

    The mechanism costs tens of microseconds per token, so a small Parquet input read as
    one or two splits would leave cores idle. With ``partitions`` unset, inputs with fewer
    than 2 partitions per core are round-robin repartitioned to 4 per core (Spark sorts
    before a round-robin repartition, so a retried task sees the same rows and, keyed by
    partition and batch, draws the same noise). Row order is not preserved then.
    """
    if partitions is not None:
        return df.repartition(partitions)
    if is_connect(spark):  # no RDD API: the server's default parallelism decides
        return df
    cores = spark.sparkContext.defaultParallelism
    if df.rdd.getNumPartitions() < 2 * cores:
        return df.repartition(4 * cores)
    return df


def _drop_counts(df: DataFrame) -> DataFrame:
    return df.drop(*[_COUNT_PREFIX + n for n in COUNT_NAMES])


def perturb_text(
    df: DataFrame,
    columns: list[str] | str,
    epsilon: float,
    spark: SparkSession | None = None,
    **settings: Any,
) -> DataFrame:
    """Privately perturb every token of ``columns``; return the DataFrame (lazy).

    Args:
        df: input DataFrame.
        columns: text column(s) to rewrite.
        epsilon: ε (no default).
        spark: the session (default: the active one).
        **settings: any other PerturbConfig field (mechanism, lam / lambda, vocab_size,
            nn, oov, seed, keep_original, embeddings, ...).

    The result is keyed by a fresh job key (or ``seed``), so evaluating it twice gives
    the same text; calling ``perturb_text`` again gives new noise.
    """
    config = PerturbConfig.parse({"columns": columns, "epsilon": epsilon, **settings})
    spark = spark or df.sparkSession
    _check_input(df, config.columns)
    prepared = prepare(config, workdir=tempfile.mkdtemp(prefix="dpspark-index-"))
    return _drop_counts(_transform(df, prepared, new_job_key(config.seed), spark))


def _read_input(spark: SparkSession, path: str, fs: FileSystem) -> DataFrame:
    if not fs.exists(path):
        raise InputDataError(f"input {path} does not exist: pass a Parquet file or directory (--input)")
    try:
        df = spark.read.parquet(path)
        df.schema  # noqa: B018 - forces the footer read, so a non-Parquet input fails here
    except AnalysisException as exc:
        raise InputDataError(f"input {path} is not a readable Parquet dataset: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # Spark wraps footer errors in several exception types
        msg = str(exc)
        if "parquet" in msg.lower() or "footer" in msg.lower() or "magic number" in msg.lower():
            raise InputDataError(f"input {path} is not a Parquet dataset (cannot read its footer)") from None
        raise
    return df


def vocabulary_from_corpus(df: DataFrame, columns: list[str], size: int, embedded: dict[str, int]) -> list[str]:
    """The ``size`` most frequent embedded tokens of the corpus: data-dependent, published by the output."""
    from dpspark.text import tokenize

    def tokens(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            toks = [t for col in columns for s in b.column(col).to_pylist() if s for t in tokenize(s)[0]]
            yield pa.RecordBatch.from_pydict({"token": pa.array(toks, pa.string())})

    schema = T.StructType([T.StructField("token", T.StringType())])
    counted = df.select(*columns).mapInArrow(tokens, schema).groupBy("token").count()
    ranked = counted.orderBy(F.desc("count"), F.asc("token")).limit(size * 4).collect()
    return [r["token"] for r in ranked if r["token"] in embedded][:size]


def run_perturb(config: PerturbConfig, spark: SparkSession | None = None) -> dict:
    """Run the whole job: read, perturb, write Parquet + manifest. Returns the manifest.

    Nothing is left at ``config.output`` unless the run succeeds: the data and the
    manifest are written into a temporary sibling directory that is renamed at the end.
    """
    started = time.time()
    if not config.input or not config.output:
        raise ConfigError("input and output paths are required (--input PATH --output PATH)")
    spark = spark or get_session(config.master, config.batch_rows, config.remote)
    fs = FileSystem(spark)
    # Local paths are made absolute: a Spark Connect server resolves relative ones in its own directory.
    config = config.model_copy(update={"input": fs.absolute(config.input), "output": fs.absolute(config.output)})
    output = config.output.rstrip("/")
    run_id = uuid.uuid4().hex
    if config.partition:
        return _run_partition(config, spark, fs, output, run_id, started)
    if config.mode == "error" and fs.exists(output):
        raise OutputExistsError(f"output {output} already exists: choose a new path or pass --mode overwrite")
    df = _read_input(spark, config.input, fs)
    _check_input(df, config.columns)
    log.info(json.dumps({"event": "perturb_started", "run_id": run_id, "columns": list(config.columns)}))

    prepared, workdir, prep_s = _prepare_for(config, df)
    job_key = new_job_key(config.seed)
    tmp = f"{output}._dpspark_tmp_{run_id}"
    t0 = time.perf_counter()
    try:
        counts = _write(df, prepared, job_key, spark, run_id, lambda w: w.parquet(tmp))
        perturb_s = time.perf_counter() - t0
        manifest = _manifest(config, prepared, spark, run_id, started, output, counts, prep_s, perturb_s)
        fs.write_text(f"{tmp}/{MANIFEST}", json.dumps(manifest, indent=2))
        if fs.exists(output):  # mode == "overwrite": replace only now that the new output is complete
            fs.remove(output)
        fs.rename(tmp, output)
    except BaseException:
        fs.remove(tmp)
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _log_finished(manifest)
    return manifest


def _prepare_for(config: PerturbConfig, df: DataFrame) -> tuple[Prepared, str, float]:
    """Driver-side preparation (timed); removes its working directory if it fails."""
    t0 = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="dpspark-index-")
    try:
        if config.vocab_from_corpus:
            from dpspark.embeddings import load_embeddings

            log.warning(
                "the vocabulary is derived from the private corpus: the output space, and so the output, "
                "can reveal the corpus's rare words; prefer the default data-independent vocabulary"
            )
            emb = load_embeddings(config.embeddings, config.embeddings_format, config.embeddings_words)
            vocab_words = vocabulary_from_corpus(df, list(config.columns), config.vocab_size, emb.word_index)
            prepared = prepare(config, embeddings=emb, workdir=workdir, vocab_words=vocab_words)
        else:
            prepared = prepare(config, workdir=workdir)
    except BaseException:  # bad embeddings or vocabulary: leave no index directory behind
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return prepared, workdir, time.perf_counter() - t0


def _write(df: DataFrame, prepared: Prepared, job_key: bytes, spark: SparkSession, run_id: str, sink) -> dict:  # noqa: ANN001
    """Perturb and write in one pass; the counts come from the same pass (observe)."""
    observation = Observation(f"dpspark_{run_id}")
    observed = _transform(df, prepared, job_key, spark).observe(
        observation,
        F.count(F.lit(1)).alias("rows"),
        *[F.sum(_COUNT_PREFIX + n).alias(n) for n in COUNT_NAMES],
    )
    sink(_drop_counts(observed).write.mode("overwrite"))
    return {k: int(v or 0) for k, v in observation.get.items()}


def _manifest(
    config: PerturbConfig,
    prepared: Prepared,
    spark: SparkSession,
    run_id: str,
    started: float,
    output: str,
    counts: dict,
    prep_s: float,
    perturb_s: float,
    **extra: Any,
) -> dict:
    """The run manifest; ``status`` is the last key (written last: a reader that sees it sees it all)."""
    manifest = {
        "dpspark_version": dpspark.__version__,
        "run_id": run_id,
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "input": config.input,
        "output": output,
        "columns": list(config.columns),
        **prepared.manifest_fields(),
        "counts": counts,
        "timings": {
            **{k: round(v, 3) for k, v in prepared.timings.items()},
            "preparation_s": round(prep_s, 3),
            "perturb_and_write_s": round(perturb_s, 3),
            "tokens_per_s": round(counts["tokens"] / perturb_s, 1) if perturb_s > 0 else None,
        },
        "spark": {
            "version": spark.version,
            "master": "spark connect" if is_connect(spark) else spark.sparkContext.master,
        },
        "duration_s": round(time.time() - started, 3),
        **extra,
    }
    manifest["status"] = "succeeded"
    return manifest


def _log_finished(manifest: dict) -> None:
    log.info(
        json.dumps(
            {
                "event": "perturb_finished",
                "run_id": manifest["run_id"],
                "counts": manifest["counts"],
                "timings": manifest["timings"],
                "duration_s": manifest["duration_s"],
                "status": manifest["status"],
            }
        )
    )


def _run_partition(
    config: PerturbConfig, spark: SparkSession, fs: FileSystem, output: str, run_id: str, started: float
) -> dict:
    """Scheduled ETL: perturb one input partition, overwrite only that output partition.

    The manifest at the output root keeps every release of every partition. A partition
    that is already listed is refused (ReleaseRefusedError, exit 7) unless
    ``allow_rerelease``: re-releasing the same records spends privacy again. The list
    is updated only after the data are committed, so a failed run marks nothing and can
    simply be run again (Spark's dynamic partition overwrite stages the new files and
    moves them only when the job commits).
    """
    spec = config.partition.strip("/")
    keys = [kv.split("=", 1)[0] for kv in spec.split("/")]
    manifest_path = f"{output}/{MANIFEST}"
    previous = json.loads(fs.read_text(manifest_path)) if fs.exists(manifest_path) else {}
    releases = list(previous.get("releases", []))
    earlier = [r for r in releases if r["partition"] == spec]
    if earlier and not config.allow_rerelease:
        last = earlier[-1]
        raise ReleaseRefusedError(
            f"partition {spec} of {output} was already released (run {last['run_id']} at {last['finished_at']}, "
            f"epsilon {last['epsilon']}); releasing the same records again spends privacy again (the epsilons "
            "add up): pass --allow-rerelease to do it on purpose"
        )
    source = f"{config.input.rstrip('/')}/{spec}"
    if not fs.exists(source):
        raise InputDataError(f"input partition {source} does not exist (--partition {spec})")
    try:
        df = spark.read.option("basePath", config.input).parquet(source)
    except AnalysisException as exc:
        raise InputDataError(f"input partition {source} is not readable Parquet: {str(exc).splitlines()[0]}") from None
    _check_input(df, config.columns)
    log.info(json.dumps({"event": "perturb_started", "run_id": run_id, "partition": spec, "rereleases": len(earlier)}))
    prepared, workdir, prep_s = _prepare_for(config, df)
    t0 = time.perf_counter()
    mode_key = "spark.sql.sources.partitionOverwriteMode"
    before = spark.conf.get(mode_key, "static")
    spark.conf.set(mode_key, "dynamic")
    try:
        counts = _write(
            df, prepared, new_job_key(config.seed), spark, run_id, lambda w: w.partitionBy(*keys).parquet(output)
        )
    finally:
        spark.conf.set(mode_key, before)
        shutil.rmtree(workdir, ignore_errors=True)
    perturb_s = time.perf_counter() - t0
    release = {
        "partition": spec,
        "run_id": run_id,
        "finished_at": datetime.now(UTC).isoformat(),
        "epsilon": config.epsilon,
        "mechanism": config.mechanism,
        "lambda": config.lambda_,
        "rows": counts["rows"],
        "rerelease": bool(earlier),
    }
    manifest = _manifest(
        config,
        prepared,
        spark,
        run_id,
        started,
        output,
        counts,
        prep_s,
        perturb_s,
        partition=spec,
        releases=[*releases, release],
    )
    fs.write_text(manifest_path, json.dumps(manifest, indent=2))
    _log_finished(manifest)
    return manifest


def _cleanup() -> None:
    for d in _BUNDLES:
        shutil.rmtree(d, ignore_errors=True)


import atexit  # noqa: E402

atexit.register(_cleanup)
