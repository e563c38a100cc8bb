"""The commands on the local engine (``--engine local``): their runners (``dpspark.run``) over a
``LocalBackend``, no JVM and no pyspark: privacy-stats, privacy-risk, evaluate-utility and compare, calibrate
(``dpspark.spark.calibrate``, which imports no pyspark for it), and the releases of perturb and release-vectors
(``run_release_local``: the same job, draws, manifest, ledger and commit as Spark's, in this process). Every
command that takes ``--engine`` runs here.

The input is read with pyarrow (``dpspark.run.inputs``: a local Parquet file or directory, or a CSV file, up to
1 GiB); the report is committed exactly as on Spark (``dpspark.spark.reports.ReportOutput`` over the local file
system: the output checked before any work, a hidden stage, the manifest last, the stage moved into place under
the output's lock), so a failed run leaves nothing behind.

``engine_for(command, config)`` chooses: ``--engine spark`` or ``local`` as given; ``auto`` (the default) runs
Spark where pyspark imports and Java is found or a master or Spark Connect URL is given, else the local engine
where the command has one.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import shutil
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from dpspark import units, utility
from dpspark.arrow import to_numpy
from dpspark.config import (
    CompareConfig,
    EvaluateUtilityConfig,
    PerturbConfig,
    ReleaseSettings,
    RiskConfig,
    StatsConfig,
    VectorsConfig,
)
from dpspark.errors import ConfigError, InputDataError
from dpspark.prepare import local_writes
from dpspark.run import perturb as run_perturb
from dpspark.run import risk as run_risk
from dpspark.run import stats as run_stats
from dpspark.run import utility as run_utility
from dpspark.run import vectors as run_vectors
from dpspark.run.compare import CompareRun
from dpspark.run.inputs import check_local, column_kinds, read_local, select_columns
from dpspark.run.local import BATCH_ROWS, LocalBackend, LocalShipment, local_bundle
from dpspark.run.perturb import PerturbRelease
from dpspark.run.settings import LABEL, TEXT, UNIT
from dpspark.run.transform import count_columns, perturb_partition, row_draws, vector_partition
from dpspark.run.vectors import VectorsRelease
from dpspark.spark import commit, io
from dpspark.spark.fs import FileSystem
from dpspark.spark.reports import ReportOutput, measure_output
from dpspark.text import COUNT_NAMES, count_column_tokens, row_tokens
from dpspark.unit_table import Counts, Walk, counted, id_key, partition_counts

log = logging.getLogger("dpspark")

LOCAL_COMMANDS = (
    "perturb",
    "release-vectors",
    "privacy-stats",
    "calibrate",
    "privacy-risk",
    "evaluate-utility",
    "compare",
)


def spark_available() -> bool:
    """pyspark imports and a Java runtime is found (``JAVA_HOME`` or ``java`` on the PATH)."""
    try:
        if importlib.util.find_spec("pyspark") is None:
            return False
    except (ImportError, ValueError):  # a broken or blocked install is no Spark either
        return False
    home = os.environ.get("JAVA_HOME")
    return bool(home and os.path.exists(os.path.join(home, "bin", "java"))) or shutil.which("java") is not None


def engine_for(command: str, config: Any) -> str:
    """ "spark" or "local" for ``command`` with ``config``'s ``engine`` (see the module docstring)."""
    engine = getattr(config, "engine", "spark")
    if engine == "local" or (engine == "auto" and not _spark_wanted(config)):
        if command not in LOCAL_COMMANDS:
            missing = "" if engine == "local" else " (pyspark or Java is missing here)"
            raise ConfigError(
                f"{command} runs on Spark only{missing}: the local engine runs {', '.join(LOCAL_COMMANDS[:-1])} and "
                f"{LOCAL_COMMANDS[-1]}; "
                "pip install 'dpspark[spark]' and install Java 17, or run it where Spark is"
            )
        if config.master or config.remote:
            raise ConfigError("--engine local runs in this process: leave out --master and --remote")
        return "local"
    return "spark"


def _spark_wanted(config: Any) -> bool:
    return bool(config.master or config.remote) or spark_available()


def run_privacy_stats_local(config: StatsConfig) -> dict[str, Any]:
    """privacy-stats on the local engine; returns the manifest."""
    started = time.time()
    if not config.output:
        raise ConfigError("output: give the directory for the statistics (--output DIR)")
    check_local(config.corpus)
    with measure_output(None, config, "privacy-stats") as out:
        with LocalBackend(out.run_id) as backend:
            manifest = {**run_stats.measure(backend, config, out.local, started), "engine": "local"}
        out.commit(manifest)
    return manifest


def run_privacy_risk_local(config: RiskConfig) -> dict[str, Any]:
    """privacy-risk on the local engine; returns the manifest."""
    started = time.time()
    if not config.input:
        raise ConfigError("input: give the corpus (--input PATH)")
    check_local(config.input)
    with measure_output(None, config, "privacy-risk") as out:
        t0 = time.perf_counter()
        with LocalBackend(out.run_id) as backend:
            table = backend.corpus(config.input, [config.text_column], config.unit)  # a column: unit's ids beside
            _text_column(table, config.text_column)
            manifest = {**run_risk.assess(backend, config, table, out.local, started, t0), "engine": "local"}
        out.commit(manifest)
    return manifest


def _text_column(table: pa.Table, column: str) -> None:
    kind = table.schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputDataError(
            f"text column {column!r} has type {kind}, expected string: cast it, or name the text column with "
            "--text-column"
        )


def _labelled(config: EvaluateUtilityConfig, table: pa.Table) -> tuple[pa.Table, pa.Table, list[Any], list[int]]:
    """The labelled input's halves (text, class index), its classes and their rows: Spark's
    ``dpspark.spark.utility.run_labelled`` in this process (the same refusals, classes and split)."""
    _text_column(table, config.text_column)
    kind = table.schema.field(config.label_column).type
    if not (pa.types.is_string(kind) or pa.types.is_boolean(kind) or pa.types.is_integer(kind)
            or pa.types.is_floating(kind) or pa.types.is_large_string(kind)):  # fmt: skip
        raise InputDataError(
            f"label column {config.label_column!r} has type {kind}: labels must be strings, integers, booleans or "
            "numbers (one class per value)"
        )
    labels = table.column(config.label_column).to_pylist()
    counted = list(Counter(labels).items())
    order = utility.check_classes(counted, config.label_column)
    values, class_counts = [counted[i][0] for i in order], [counted[i][1] for i in order]
    index = {v: float(i) for i, v in enumerate(values)}
    texts = [t or "" for t in table.column(config.text_column).to_pylist()]
    classes = [index[v] for v in labels]
    side = utility.in_test(texts, classes, config.split_seed, config.test_fraction)
    labelled = pa.table({TEXT: pa.array(texts, pa.string()), LABEL: pa.array(classes, pa.float64())})
    if config.unit.kind == "column":  # a person's ids beside their rows, for the halves' walks (run.settings.People)
        labelled = labelled.append_column(UNIT, table.column(str(config.unit.column)))
    train, test = labelled.filter(pa.array(~side)), labelled.filter(pa.array(side))
    counts = {
        name: dict(Counter(int(c) for c in half.column(LABEL).to_pylist()))
        for name, half in (("train", train), ("test", test))
    }
    utility.check_split(counts, values, len(texts), config.test_fraction)
    return train, test, values, class_counts


def run_labelled_local(config: EvaluateUtilityConfig, command: str, what: str, evaluate: Any) -> dict[str, Any]:
    """evaluate-utility or compare on the local engine: the labelled input read, checked and split, the output
    checked first and committed last with the manifest ``evaluate(backend, table, train, test, values,
    class_counts, out)`` returns (plus run id, start, duration and the engine)."""
    started, t_start = datetime.now(timezone.utc).isoformat(), time.time()
    if not config.input:
        raise ConfigError("input: give the labelled Parquet or CSV dataset (--input PATH)")
    check_local(config.input)
    output = ReportOutput(
        None, config.input, config.output, config.write_mode, what, None, command, local_writes(config)
    )
    with output as out:
        wanted = [config.text_column, config.label_column]
        if config.unit.kind == "column":  # read once: the id column checked with every column's type, then taken
            whole = read_local(config.input)
            units.check_unit_column(*column_kinds(whole), config.unit)
            table = select_columns(whole, config.input, list(dict.fromkeys([*wanted, str(config.unit.column)])))
        else:
            table = read_local(config.input, wanted)
        train, test, values, class_counts = _labelled(config, table)
        with LocalBackend(out.run_id) as backend:
            manifest = evaluate(backend, table, train, test, values, class_counts, out)
        manifest.update(run_id=out.run_id, started_at=started, duration_s=round(time.time() - t_start, 3))
        manifest["engine"] = "local"
        out.commit(manifest)
    return manifest


def evaluate_utility(config: EvaluateUtilityConfig) -> dict[str, Any]:
    """evaluate-utility on the engine ``engine_for`` chooses."""
    if engine_for("evaluate-utility", config) == "local":

        def evaluate(backend: LocalBackend, table: pa.Table, *split: Any) -> dict[str, Any]:
            *labelled, out = split
            return run_utility.evaluate(backend, config, *labelled, out.local)

        return run_labelled_local(config, "evaluate-utility", "evaluation", evaluate)
    from dpspark.spark.utility import run_evaluate_utility  # pyspark: only where Spark runs it

    return run_evaluate_utility(config)


def compare(config: CompareConfig) -> dict[str, Any]:
    """compare on the engine ``engine_for`` chooses."""
    if engine_for("compare", config) == "local":

        def evaluate(backend: LocalBackend, table: pa.Table, *split: Any) -> dict[str, Any]:
            *labelled, out = split
            return CompareRun(backend, config, table, *labelled, out.local).run()

        return run_labelled_local(config, "compare", "comparison", evaluate)
    from dpspark.spark.compare import run_compare  # pyspark: only where Spark runs it

    return run_compare(config)


def privacy_stats(config: StatsConfig) -> dict[str, Any]:
    """privacy-stats on the engine ``engine_for`` chooses (the CLI's and the Python API's one entry)."""
    if engine_for("privacy-stats", config) == "local":
        return run_privacy_stats_local(config)
    from dpspark.spark.stats import run_privacy_stats  # pyspark: only where Spark runs it

    return run_privacy_stats(config)


def privacy_risk(config: RiskConfig, df: Any = None) -> dict[str, Any]:
    """privacy-risk on the engine ``engine_for`` chooses; a DataFrame ``df`` is Spark's."""
    if df is None and engine_for("privacy-risk", config) == "local":
        return run_privacy_risk_local(config)
    from dpspark.spark.risk import run_privacy_risk  # pyspark: only where Spark runs it

    return run_privacy_risk(config, df=df)


class LocalPasses:
    """``dpspark.run.perturb.Passes`` over a table in this process: one partition, in the table's row order."""

    def __init__(self, table: pa.Table, backend: LocalBackend) -> None:
        self.table, self.backend = table, backend

    def unit_counts(
        self, unit_column: str, columns: list[str], job_key: bytes, shipment: LocalShipment | None = None
    ) -> Counts:
        lengths = None if shipment is None else row_draws(lambda: local_bundle(shipment.name), columns)
        counts = counted([partition_counts(self.table.to_batches(), unit_column, columns, id_key(job_key), lengths)])
        return dataclasses.replace(counts, order="files")  # the input's files by path, rows in order (read_local)

    def over_cap(self, columns: list[str], cap: int) -> tuple[int, int]:
        return units.over_cap_counts(row_tokens(self.table, columns), cap)

    def token_counts(self, columns: list[str]) -> dict[str, int]:
        return dict(count_column_tokens(self.table, columns))

    def ship(self, write: Any) -> LocalShipment:
        return self.backend.ship(write)


SPARK_ONLY = {  # a release's settings that only Spark's release path takes, and why
    "input_table": "--input-table reads a catalog table",
    "output_table": "--output-table writes a catalog table",
    "partition": "--partition releases one partition of a dataset (ETL)",
}


def _check_local_release(c: ReleaseSettings) -> Path:
    """A release the local engine can make: a whole local file or directory into a local directory; returns the
    input's path."""
    for name, what in SPARK_ONLY.items():
        if getattr(c, name):
            raise ConfigError(f"{what}, which only Spark does: use --engine spark (pip install 'dpspark[spark]')")
    if not c.input or not c.output:
        raise ConfigError("an input and an output are required: --input PATH and --output PATH")
    check_local(c.output)
    return check_local(c.input)  # type: ignore[return-value]


def _write(result: pa.Table, stage: str, run_id: str, keys: list[str]) -> None:
    """A release's rows into ``stage`` as Parquet: one file, or Hive partitions by ``keys`` as Spark writes them."""
    Path(stage).mkdir(parents=True)
    if keys:
        ds.write_dataset(result, stage, format="parquet", partitioning=keys, partitioning_flavor="hive")
    else:
        pq.write_table(result, f"{stage}/part-00000-{run_id}.parquet")


def _batches(table: pa.Table) -> list[pa.RecordBatch]:
    """The table as one partition's batches of ``BATCH_ROWS`` rows (an empty table: one empty batch, so that the
    output has the release's columns)."""
    return table.to_batches(max_chunksize=BATCH_ROWS) or [pa.RecordBatch.from_pylist([], schema=table.schema)]


class LocalPerturb(PerturbRelease):
    """perturb's release in this process: ``PerturbRelease`` over a table."""

    def check_table(self, table: pa.Table) -> pa.Table:
        """The input's columns as Spark's release checks them (``dpspark.run.perturb``'s checks, pyarrow's types)."""
        kinds, nested = column_kinds(table)
        text = {f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)}
        run_perturb.check_columns(kinds, text, self.config)
        units.check_unit_column(kinds, nested, self.config.unit)
        return table

    def prepare_local(self, table: pa.Table, backend: LocalBackend, run_id: str) -> None:
        self.prepare_over(LocalPasses(table, backend), run_id)

    def write_local(self, table: pa.Table, stage: str, run_id: str, keys: list[str]) -> dict[str, int]:
        """The release's transform of ``table`` (one partition) written into ``stage``; returns the observed counts
        (rows, the summed per-row counts, a document unit's shape): what Spark's release observes."""
        c = self.config
        hidden = count_columns(run_id)
        walk = Walk(str(c.unit.column), self.job_key) if c.unit.kind == "column" else None
        out = perturb_partition(
            _batches(table),
            lambda: local_bundle(self.shipment.name),
            0,
            self.job_key,
            list(c.columns),
            c.keep_original,
            hidden,
            tuple(c.spec.extra_columns),
            walk=walk,
        )
        written, tokens = [], []
        for batch in out:
            tokens.append(np.stack([np.asarray(batch.column(h).to_numpy(), np.int64) for h in hidden]))
            written.append(pa.Table.from_batches([batch]).drop(hidden))
        result, per_row = pa.concat_tables(written), np.concatenate(tokens, axis=1)  # COUNT_NAMES × rows
        sums = per_row.sum(axis=1)
        _write(result, stage, run_id, keys)
        observed = {"rows": result.num_rows, **{n: int(v) for n, v in zip(COUNT_NAMES, sums) if n in self.sums()}}
        if c.unit_budget is not None and c.unit.kind != "column":
            lengths, rows = np.unique(per_row[0], return_counts=True)
            shape = units.shape_of(dict(zip(lengths.tolist(), rows.tolist())), c.allocation_of)
            observed |= {f"{units.SHAPE}{k}": v for k, v in shape.items()}
        return observed


class LocalVectors(VectorsRelease):
    """release-vectors' release in this process: ``VectorsRelease`` over a table."""

    def check_table(self, table: pa.Table) -> pa.Table:
        """The column's facts as Spark's release checks them: a string column (mean word vectors), or lists of
        floats or doubles of one length without NaN, Inf or null elements."""
        column = self.config.column
        if column not in table.column_names:
            raise run_vectors.missing_column(column, table.column_names)
        kind = table.schema.field(column).type
        self.element = pa.float64()
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            self.d, self.kind = -1, "text"
            return table
        lists = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
        if not (lists and (pa.types.is_float32(kind.value_type) or pa.types.is_float64(kind.value_type))):
            raise run_vectors.not_vectors(column, str(kind))
        vectors = pc.drop_null(table.column(column).combine_chunks())
        lengths = np.asarray(to_numpy(pc.list_value_length(vectors)), np.int64)
        parents = np.asarray(to_numpy(pc.list_parent_indices(vectors)), np.int64)
        values = pc.list_flatten(vectors)
        flat = np.asarray(to_numpy(pc.fill_null(values, float("nan"))), np.float64)
        bad = len(np.unique(parents[~np.isfinite(flat)]))
        facts = (int(lengths.min()), int(lengths.max())) if len(lengths) else (None, None)
        self.d, self.kind = run_vectors.check_facts(column, *facts, bad), "array"
        self.element = kind.value_type
        return table.set_column(
            table.column_names.index(column), column, table.column(column).cast(pa.list_(kind.value_type))
        )

    def prepare_local(self, table: pa.Table, backend: LocalBackend, run_id: str) -> None:
        self.prepare_over(backend.ship)

    def write_local(self, table: pa.Table, stage: str, run_id: str, keys: list[str]) -> dict[str, int]:
        c = self.config
        load = None if self.shipment is None else (lambda: local_bundle(self.shipment.name))
        out_type = pa.list_(self.element)
        batches = vector_partition(
            _batches(table), 0, c.column, self.job_key, self.phi, c.epsilon, c.beta, self.d, out_type, load
        )
        result = pa.Table.from_batches(list(batches))
        _write(result, stage, run_id, keys)
        return {"rows": result.num_rows}


def _partition_keys(root: Path) -> list[str]:
    """The Hive partition columns of a local Parquet directory (``date=…/hour=…`` → date, hour)."""
    if not root.is_dir():
        return []
    files = [str(f) for f in root.rglob("*") if f.is_file() and not f.name.startswith(("_", "."))]
    return io.partition_keys(files, str(root))


def run_release_local(job: LocalPerturb | LocalVectors) -> dict[str, Any]:
    """A release on the local engine: the checks, the ledger and the commit of Spark's release path
    (``dpspark.spark.commit``) over this machine's files, the job's preparation and transform in this process;
    returns the manifest."""
    c = job.config
    started, t_start = commit.now(), time.time()
    where = _check_local_release(c)
    fs = FileSystem(None)
    run_id = io.new_run_id()
    paths = io.Paths(fs, c.input, c.output, [], command=job.command)
    paths.check_overlap()
    io.check_writes(fs, paths.inputs, local_writes(c))
    existed = paths.check_output(c.mode, partitioned=False)
    earlier = io.read_ledger(fs, paths.output) if existed else []
    clash = commit.check_rerelease(c, paths.output, None, earlier)
    removed = paths.remove_stale()
    keys = _partition_keys(where)
    table = job.check_table(read_local(c.input, strings=keys))
    commit.log_started(job.command, run_id, None)
    stage = paths.stage_name(run_id)
    try:
        with LocalBackend(run_id) as backend:
            t0 = time.perf_counter()
            job.prepare_local(table, backend, run_id)
            timings = {"preparation_s": round(time.perf_counter() - t0, 3)}
            t0 = time.perf_counter()
            observed = job.write_local(table, stage, run_id, keys)
            timings["transform_and_write_s"] = round(time.perf_counter() - t0, 3)
            entry = commit.ledger_entry(job, run_id, None, bool(clash), observed)
            at = (paths.input, paths.output, None)
            manifest = {
                **commit.manifest(job, run_id, started, entry, at, observed, earlier, timings),
                "engine": "local",
                "spark": None,
                "spread": None,
                "stale_temporaries_removed": len(removed),
                "type_changes": [],  # pyarrow writes each column with the type it read
            }
            commit.seal(manifest, t_start)
            commit.commit(fs, paths, stage, None, existed, earlier, entry, manifest, job.side_files())
    except BaseException:
        fs.remove(stage)
        raise
    finally:
        job.close()
    commit.log_finished(job.command, run_id, manifest)
    return manifest


def perturb(config: PerturbConfig) -> dict[str, Any]:
    """perturb's release on the engine ``engine_for`` chooses (the CLI's entry)."""
    if engine_for("perturb", config) == "local":
        return run_release_local(LocalPerturb(config))
    from dpspark.spark.perturb import run_perturb  # pyspark: only where Spark runs it

    return run_perturb(config)


def release_vectors(config: VectorsConfig) -> dict[str, Any]:
    """release-vectors' release on the engine ``engine_for`` chooses (the CLI's entry)."""
    if engine_for("release-vectors", config) == "local":
        return run_release_local(LocalVectors(config))
    from dpspark.spark.vectors import run_release_vectors  # pyspark: only where Spark runs it

    return run_release_vectors(config)
