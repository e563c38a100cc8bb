"""The local engine's input: a Parquet file or directory, or a CSV file, on this machine, read with pyarrow.

Larger inputs, and paths with a scheme (``s3://``, ``dbfs:/``, ``hdfs://``), are Spark's: the refusal says so
in one sentence.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds

from dpspark.errors import ConfigError, InputDataError

MAX_BYTES = 1 << 30  # 1 GiB on disk: more is Spark's work (one process, the whole table in memory)


def local_path(path: str) -> Path | None:
    """``path`` as a path of this machine, or None where it has a scheme (``file:`` is local)."""
    if "://" in path or (":" in path.split("/")[0] and len(path.split(":")[0]) > 1):
        return Path(path.removeprefix("file://")) if path.startswith("file://") else None
    return Path(path)


def input_bytes(path: Path) -> int:
    """The input's size on disk: a file's, or the sum of a directory's files."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def column_kinds(table: pa.Table) -> tuple[dict[str, str], set[str]]:
    """Every column's type as pyarrow names it, and the array, map and struct columns among them."""
    return {f.name: str(f.type) for f in table.schema}, {f.name for f in table.schema if pa.types.is_nested(f.type)}


def check_local(path: str | None) -> Path | None:
    """``path`` as a path of this machine (None stays None); a path with a scheme is refused."""
    if path is None:
        return None
    where = local_path(path)
    if where is None:
        raise ConfigError(
            f"{path} is not a path of this machine: the local engine reads local files; use --engine spark"
        )
    return where


def read_local(path: str, columns: list[str] | None = None, strings: list[str] | None = None) -> pa.Table:
    """The table at ``path`` (``columns`` only, when given): Parquet (a file or a directory of files, Hive
    partitions read as columns: ``strings``, when given, names them all, read as strings as a release reads
    them) or CSV (a file named ``*.csv``, a header row)."""
    where = check_local(path)
    assert where is not None
    if not where.exists():
        raise InputDataError(f"input {path} not found: give a Parquet file or directory, or a CSV file")
    size = input_bytes(where)
    if size > MAX_BYTES:
        raise InputDataError(
            f"input {path} is {size / (1 << 30):.1f} GiB, over the local engine's {MAX_BYTES >> 30} GiB: run it on "
            "Spark (--engine spark)"
        )
    try:
        if where.is_file() and where.suffix.lower() == ".csv":
            table = pacsv.read_csv(where)
        else:
            hive = ds.partitioning(pa.schema([(k, pa.string()) for k in strings]), flavor="hive") if strings else "hive"
            table = ds.dataset(where, format="parquet", partitioning=hive).to_table()
    except (pa.ArrowException, OSError) as exc:
        raise InputDataError(
            f"input {path} cannot be read as Parquet or CSV ({exc}): give a Parquet file or directory, or a .csv file"
        ) from None
    return select_columns(table, path, columns) if columns else table


def select_columns(table: pa.Table, path: str, columns: list[str]) -> pa.Table:
    """``columns`` of the table read from ``path``; a missing one is refused, naming the columns there are."""
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputDataError(
            f"column(s) {', '.join(map(repr, missing))} not in {path}; available columns: "
            f"{', '.join(table.column_names)}"
        )
    return table.select(columns)
