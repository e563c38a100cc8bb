"""A command's input checked before Spark starts, where the input is a Parquet path on this machine.

A local session takes 10 s to start on an idle machine and more than a minute under load, only for
the input's first check to refuse a missing path or a misspelled column. Here pyarrow reads the
input's schema (a footer, no data) first, and the same refusals come at once. Only where the path
means the same to Spark as to this process: a local master (dpspark's own session), no Spark
Connect, no spark-submit, no Hadoop configuration that could make a plain path another file
system's. Anything that pyarrow cannot read is left to Spark's own checks, which run as before.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dpspark.errors import InputDataError


def _local_path(c: Any, path: str | None) -> Path | None:
    """``path`` on this machine when a local session of dpspark's own will read it, else None."""
    master = getattr(c, "master", None) or "local"
    if not path or getattr(c, "remote", None) or not master.startswith("local"):
        return None
    if "PYSPARK_GATEWAY_PORT" in os.environ or "HADOOP_CONF_DIR" in os.environ or _session_running():
        return None
    if path.startswith("file:"):
        path = path[len("file:") :]
    elif "://" in path or ":" in path.split("/", 1)[0]:
        return None  # another file system's (hdfs://, s3a://, dbfs:/)
    return Path(path)


def _session_running() -> bool:
    """A Spark session already runs in this process (a notebook, a test, an application calling the CLI)
    whose default file system makes a plain path another's (viewfs, hdfs, dbfs): the command reuses that
    session, so only its own resolution may judge the path."""
    sql = sys.modules.get("pyspark.sql")
    session = None if sql is None else sql.SparkSession.getActiveSession()
    if session is None:
        return False
    try:
        default = session.conf.get("fs.defaultFS", None) or session.sparkContext._jsc.hadoopConfiguration().get(
            "fs.defaultFS"
        )
    except Exception:  # noqa: BLE001 - a session whose settings cannot be read: leave the path to Spark
        return True
    return not str(default or "file:///").startswith("file:")


def _schema(path: Path) -> list[str] | None:
    """The column names of the Parquet file or directory (partition keys included), or None where
    pyarrow cannot read it (Spark's own check then says why)."""
    import pyarrow.dataset as ds

    try:
        schema = ds.dataset(str(path), format="parquet", partitioning="hive").schema
    except Exception:  # noqa: BLE001 - any reason pyarrow cannot read it is Spark's to report
        return None
    return schema.names


def _needs(command: str, c: Any) -> tuple[str | None, list[tuple[str, str, str]]]:
    """(input path, [(what, column, its flag)]) of ``command``'s settings ``c`` (named as the Spark-side
    checks name them)."""
    text, label = (
        ("text column", getattr(c, "text_column", ""), "--text-column"),
        ("label column", getattr(c, "label_column", ""), "--label-column"),
    )
    if command == "perturb":
        return (None if c.input_table else c.input), [("column", col, "--columns") for col in c.columns]
    if command == "release-vectors":
        return (None if c.input_table else c.input), [("column", c.column, "--column")]
    if command in ("evaluate-utility", "compare"):
        return c.input, [text, label]
    if command == "privacy-risk":
        return c.input, [text]
    if command in ("privacy-stats", "calibrate") and getattr(c, "corpus", None):
        return c.corpus, [("column", col, "--columns") for col in c.columns]
    return None, []


def check(command: str, c: Any) -> None:
    """Refuse (InputDataError, exit 3) a missing input or a column it lacks, and (ConfigError, exit 2) an
    embeddings directory or artefact cache inside the input or that is a file, before Spark starts."""
    given, columns = _needs(command, c)
    path = _local_path(c, given)
    if path is None:
        return
    if not path.exists():
        raise InputDataError(f"input {given} does not exist: pass a Parquet file or directory (--input)")
    from dpspark.prepare import local_writes, write_inside_input

    for what, where in local_writes(c).items():  # the embedding store and the artefact cache
        if where.resolve().is_relative_to(path.resolve()):
            raise write_inside_input(what, where, given)
    fields = _schema(path)
    for what, col, flag in columns if fields else []:
        if col not in fields:
            raise InputDataError(f"{what} {col!r} is not in the input; available columns: {', '.join(fields)} ({flag})")
