"""The one release path: every way in (CLI, spark-submit, ETL, notebooks, the Python API).

``run_release(job, df=None)`` takes a job (``dpspark.spark.perturb.PerturbJob`` or
``dpspark.spark.vectors.VectorsJob``) through the same steps:

1. **paths** (``io.Paths``) or **tables** (``tables.TableOutput``, ``--output-table``): resolve
   input and output as Spark does; refuse an output that equals, contains or lies inside the
   input (a table: is the input table, or keeps its files there); refuse an existing output
   that is not an earlier dpspark release; check the output can be written (before any work);
2. **ledger**: refuse a release whose records overlap an earlier one, coarser or finer
   partition spec, unless ``allow_rerelease`` (exit 7); a damaged ledger is exit 8;
3. **read** the input (or take the given DataFrame), partition values as strings;
   **validate** its schema (``job.check``);
4. **prepare** on the driver (``job.prepare``: embeddings, Σ, A, index, Φ) and ship the bundle;
5. **transform** and write in one pass into a hidden staging directory (a staging table for
   an output table), counting only what the output shows (``DataFrame.observe`` on the job's
   hidden count columns);
6. **commit**: manifest, side files and ledger entry into the stage, then move it into
   place (a full release), or move the partition's directory into the output (ETL); for an
   output table: ledger rows first, then one INSERT from the staging table (``tables``).

Whatever fails, the stage, the bundle and the index files are removed and the input
and the earlier output are as they were.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.observation import Observation

from dpspark import ledger
from dpspark.config import ReleaseSettings
from dpspark.errors import ConfigError, DPSparkError, DPSparkWarning, InputDataError
from dpspark.prepare import local_writes
from dpspark.spark import commit, io, lineage, tables
from dpspark.spark.fs import FileSystem
from dpspark.spark.session import get_session, is_connect
from dpspark.spark.transform import count_columns, quote
from dpspark.unit_table import SEGMENT

log = logging.getLogger("dpspark")


class Job(Protocol):
    """What a release needs from a job: the rest is the same for every job."""

    config: ReleaseSettings
    command: str

    def check(self, df: DataFrame) -> DataFrame: ...  # validated (maybe converted) input
    def prepare(self, df: DataFrame, spark: SparkSession, run_id: str) -> None: ...
    def transform(self, df: DataFrame, run_id: str) -> tuple[DataFrame, list[Any]]: ...  # out + observe() aggregates
    def side_files(self) -> dict[str, bytes]: ...
    def replaced_columns(self) -> list[str]: ...  # columns whose type the job changes on purpose
    # ``observed``: the counts, and the job's own aggregates named SHAPE + name (a unit's shape)
    def manifest_fields(self, observed: dict[str, int]) -> dict[str, Any]: ...
    def ledger_terms(self, observed: dict[str, int]) -> dict[str, Any]: ...  # guarantee type, unit, cost terms
    def close(self) -> None: ...


def check_stream(df: DataFrame) -> None:
    if df.isStreaming:
        raise InputDataError(
            "the DataFrame is a stream: a release needs a bounded input (each micro-batch would reuse the same "
            "noise keys); call dpspark.release(batch_df, ...) inside writeStream.foreachBatch with one output "
            "partition per batch instead"
        )


@dataclass
class _Input:
    """Where the release reads from: the DataFrame (or the input table's), its traced sources and files,
    the partition spec, and once read: the files, the partition keys, the read splits and the spread."""

    df: DataFrame | None
    spec: dict[str, str] | None
    source: DataFrame | None = None  # the input table's DataFrame
    keys: list[str] = field(default_factory=list)
    traced: Any = None  # lineage.sources(df)
    files: list[str] | None = None
    found: str | None = None  # the partition's directory under the input
    size: int = 0
    splits: dict = field(default_factory=dict)
    spread: int | None = None  # tasks of an encrypted shuffle that spreads too few read splits


def run_release(job: Job, df: DataFrame | None = None, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run ``job`` as a release (see the module docstring); return its manifest."""
    c = job.config
    started, t_start = commit.now(), time.time()
    inp = _Input(df, _check_call(c, df))
    spark = spark or (df.sparkSession if df is not None else get_session(c.master, c.batch_rows, c.remote))
    fs = FileSystem(spark)
    run_id = io.new_run_id()

    # 1. paths (or tables), 2. ledger (checked again, under the output's lock, when the release commits)
    target = _target(job, spark, fs, inp)
    table_out = isinstance(target, tables.TableOutput)
    existed = target.check_output(c.mode, partitioned=inp.spec is not None)
    earlier = target.read_ledger() if table_out else (io.read_ledger(fs, target.output) if existed else [])
    clash = commit.check_rerelease(c, target.output, inp.spec, earlier)
    removed = target.remove_stale()

    # 3. read and validate
    df = job.check(_read(spark, fs, c, target, inp))
    if any(s in df.columns for s in SEGMENT):  # a column: unit walks its rows in their read order: no shuffle
        inp.spread = None
    if inp.spread:
        df = df.repartition(inp.spread)
    io.check_spec(inp.spec, inp.keys)
    commit.log_started(job.command, run_id, inp.spec)

    stage = target.stage_name(run_id)
    save = target.save if table_out else (lambda writer, stage: writer.parquet(stage))
    try:
        # 4. prepare
        t0 = time.perf_counter()
        with io.SqlConf(spark, inp.splits):  # the write's read splits: a pass over the input in prepare sees its tasks
            job.prepare(df, spark, run_id)
        timings = {"preparation_s": round(time.perf_counter() - t0, 3)}

        # 5. transform and write (one pass)
        t0 = time.perf_counter()
        observed = _write(job, df, spark, run_id, stage, inp.keys, inp.splits, target.input or "the input", save)
        timings["transform_and_write_s"] = round(time.perf_counter() - t0, 3)
        changed = _check_written(job, spark, fs, target, inp, stage)

        # 6. commit
        entry = commit.ledger_entry(job, run_id, inp.spec, bool(clash), observed)
        source = tables.ident(*tables.qualify(spark, c.input_table)) if c.input_table else target.input
        where = (source, target.output, inp.spec)
        manifest = {
            **commit.manifest(job, run_id, started, entry, where, observed, earlier, timings),
            "engine": "spark",
            "spark": {
                "version": spark.version,
                "master": "spark connect" if is_connect(spark) else spark.sparkContext.master,
            },
            # The input's row groups were too few for the cores: its rows were spread over this many
            # tasks by a shuffle whose local files the session encrypts (spark.io.encryption.enabled).
            "spread": {"tasks": inp.spread, "local_io_encrypted": True} if inp.spread else None,
            "stale_temporaries_removed": len(removed),
            "type_changes": changed,
        }
        commit.seal(manifest, t_start)
        if table_out:
            target.commit(stage, inp.keys, inp.spec, existed, earlier, entry, manifest, job.side_files())
        else:
            commit.commit(fs, target, stage, inp.spec, existed, earlier, entry, manifest, job.side_files())
    except BaseException:
        if table_out:
            target.drop(stage)
        else:
            fs.remove(stage)
        raise
    finally:
        job.close()
    commit.log_finished(job.command, run_id, manifest)
    return manifest


def _check_call(c: ReleaseSettings, df: DataFrame | None) -> dict[str, str] | None:
    """The partition spec of the call, after refusing a call without an input or an output, a stream,
    and a partition release handed a DataFrame."""
    if not (c.output or c.output_table) or (df is None and not (c.input or c.input_table)):
        raise ConfigError(
            "an input and an output are required: --input PATH or --input-table TABLE, and --output PATH or "
            "--output-table TABLE"
        )
    if df is not None:
        check_stream(df)
    spec = ledger.parse_spec(c.partition)
    if spec is not None and df is not None:
        raise ConfigError("partition releases read their input themselves: pass input= instead of a DataFrame")
    return spec


def _target(job: Job, spark: SparkSession, fs: FileSystem, inp: _Input) -> io.Paths | tables.TableOutput:
    """The output (a path or a table), checked against every source of the input as the DataFrame's plan
    names them, and against everything else the run writes (the embedding store, the artefact cache)."""
    c = job.config
    if c.input_table:
        inp.source, inp.keys = tables.read_input(spark, c.input_table, inp.spec)
    given = inp.source if inp.source is not None else inp.df
    if given is not None:
        inp.traced = lineage.sources(given)
        if not inp.traced.known and not c.input:
            raise ConfigError(
                "the DataFrame's sources cannot be traced (its plan reads "
                + ", ".join(sorted(set(inp.traced.unknown)))
                + ": a checkpoint, an RDD, or rows built in Python or pandas), so dpspark cannot check that the "
                "output stays clear of the raw data: pass input= naming where its rows were read from"
            )
        try:
            inp.files = given.inputFiles()
        except Exception:  # noqa: BLE001 - some sources (tables on Connect) list no files
            inp.files = None
    sources = inp.traced.paths if inp.traced is not None else []
    target: io.Paths | tables.TableOutput
    if c.output_table:
        target = tables.TableOutput(
            spark,
            fs,
            c.output_table,
            c.table_format,
            c.input_table,
            io.input_roots(fs, c.input, sources),
            inp.traced.tables if inp.traced is not None else [],
        )
    else:
        target = io.Paths(fs, c.input, c.output, sources, command=job.command)
    if inp.spec is not None and c.input:
        inp.spec, inp.found = io.record_spec(fs, target.inputs[0], inp.spec)
    target.check_overlap()
    io.check_writes(fs, target.inputs, local_writes(c))
    return target


def _read(
    spark: SparkSession, fs: FileSystem, c: ReleaseSettings, target: io.Paths | tables.TableOutput, inp: _Input
) -> DataFrame:
    """The input DataFrame (the table's, the path's partition or the given one), with ``inp``'s files,
    partition keys, read splits and spread filled in."""
    root = target.inputs[0] if target.inputs else None  # the resolved --input, when given
    if inp.source is not None:  # an input table
        df, inp.files = inp.source, inp.files or []
        inp.size = fs.size(root) if root else 0
        inp.splits = io.read_splits(spark, inp.size, c.partitions) if root else {}
    elif inp.df is None:
        df = io.read_input(spark, fs, c.input, inp.spec)
        inp.size = fs.size(root + ("/" + inp.found if inp.spec else ""))
        inp.splits = io.read_splits(spark, inp.size, c.partitions)
        inp.files = df.inputFiles()
        inp.keys = io.partition_keys(inp.files, root)
    else:
        df, inp.files = inp.df, inp.files or []
    if inp.splits and not is_connect(spark) and io.encrypts_local_io(spark):
        # too few read splits for the cores: spread the rows through an encrypted shuffle
        inp.spread = io.spread_tasks(fs, inp.files, spark.sparkContext.defaultParallelism)
    return df


def _check_written(
    job: Job, spark: SparkSession, fs: FileSystem, target: io.Paths | tables.TableOutput, inp: _Input, stage: str
) -> list[dict[str, str]] | None:
    """The columns whose type Spark's Parquet mapping changed (warned); warns too when the output
    was written with fewer read tasks than the cores could run."""
    table_out = isinstance(target, tables.TableOutput)
    if table_out:
        changed = target.type_changes(inp.files, stage, job.replaced_columns())
    else:
        changed = io.type_changes(fs, inp.files, stage, job.replaced_columns())
    if changed:
        warnings.warn(
            "Spark's Parquet mapping changed the type of column(s) "
            + ", ".join(f"{x['column']} ({x['input_type']} -> {x['output_type']})" for x in changed)
            + ": listed in the manifest under type_changes",
            DPSparkWarning,
            stacklevel=3,
        )
    spec = inp.spec
    if inp.splits and not inp.spread and not table_out and not is_connect(spark) and (spec is not None or not inp.keys):
        rel = io.find_partition(fs, stage, spec) if spec is not None else ""
        written = f"{stage}/{rel}" if rel else stage
        few = io.few_read_tasks(fs, written, inp.size, inp.splits, spark.sparkContext.defaultParallelism)
        if few:
            warnings.warn(few, DPSparkWarning, stacklevel=3)
    return changed


def _write(
    job: Job,
    df: DataFrame,
    spark: SparkSession,
    run_id: str,
    stage: str,
    keys: list[str],
    splits: dict,
    source: str,
    save: Callable[[Any, str], None],
) -> dict[str, int]:
    """Transform and write into ``stage`` (``save(writer, stage)``: Parquet files or a staging
    table) in one pass; return the observed (public) counts."""
    out, aggregates = job.transform(df, run_id)
    columns = [F.count(F.lit(1)).alias("rows"), *aggregates]
    # Without an Observation (see _observable) the output is persisted and the
    # counts are a second action over it (a recomputed partition redraws the same noise: the
    # noise is keyed by job key, partition and batch).
    observation = Observation(f"dpspark_{run_id}") if _observable(spark) else None
    # MEMORY_ONLY: the output may carry the raw text (keep_original), and spilled blocks are plain on disk
    observed = out.observe(observation, *columns) if observation else out.persist(StorageLevel.MEMORY_ONLY)
    hidden = [n for n in count_columns(run_id) if n in observed.columns]
    final = observed.drop(*hidden) if hidden else observed
    writer = final.write.mode("error")
    if keys:
        writer = writer.partitionBy(*keys)
    try:
        with io.SqlConf(spark, splits):
            save(writer, stage)
            counts = observation.get if observation else {}
            if "rows" not in counts:  # this client reported no metrics (pyspark < 4.1 on Connect)
                counts = observed.agg(*columns).first().asDict()
    except DPSparkError:
        raise
    except Exception as exc:
        described = io.describe_spark_error(exc, source)
        if described is not None:
            raise described from None
        raise
    finally:
        if observation is None:
            observed.unpersist()
    return {k: int(v or 0) for k, v in counts.items()}


def _observable(spark: SparkSession) -> bool:
    """Whether the counts can ride on the write as an ``Observation``. Not through a Spark Connect
    client older than 4.1 (it reports no metrics of a write), and not on classic Spark 4.0.x: there
    the first ``observe`` gives the session an ObservationManager that Java cannot serialize, and
    every MLlib model fitted in that session afterwards (its training summary holds the session)
    fails to transform with "Task not serializable" (evaluate-utility after a release in a notebook)."""
    import pyspark

    if is_connect(spark):
        return tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 1)
    return not spark.version.startswith("4.0.")


__all__ = ["Job", "quote", "run_release"]
