"""The commands on the local engine (``--engine local``): their runners (``dpspark.run``) over a
``LocalBackend``, no JVM and no pyspark. privacy-stats, privacy-risk, evaluate-utility and compare run here so
far, and calibrate (``dpspark.spark.calibrate``, which imports no pyspark for it); the others need Spark.

The input is read with pyarrow (``dpspark.run.inputs``: a local Parquet file or directory, or a CSV file, up to
1 GiB); the report is committed exactly as on Spark (``dpspark.spark.reports.ReportOutput`` over the local file
system: the output checked before any work, a hidden stage, the manifest last, the stage moved into place under
the output's lock), so a failed run leaves nothing behind.

``engine_for(command, config)`` chooses: ``--engine spark`` or ``local`` as given; ``auto`` (the default) runs
Spark where pyspark imports and Java is found or a master or Spark Connect URL is given, else the local engine
where the command has one.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from dpspark import utility
from dpspark.config import CompareConfig, EvaluateUtilityConfig, RiskConfig, StatsConfig
from dpspark.errors import ConfigError, InputDataError
from dpspark.prepare import local_writes
from dpspark.run import risk as run_risk
from dpspark.run import stats as run_stats
from dpspark.run import utility as run_utility
from dpspark.run.compare import CompareRun
from dpspark.run.inputs import check_local, read_local
from dpspark.run.local import LocalBackend
from dpspark.run.settings import LABEL, TEXT
from dpspark.spark.reports import ReportOutput, measure_output

LOCAL_COMMANDS = ("privacy-stats", "calibrate", "privacy-risk", "evaluate-utility", "compare")


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
        table = read_local(config.input, [config.text_column])
        _text_column(table, config.text_column)
        with LocalBackend(out.run_id) as backend:
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
        table = read_local(config.input, [config.text_column, config.label_column])
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
