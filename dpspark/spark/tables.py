"""Metastore / Unity Catalog tables as the input or output of a release (``--input-table``,
``--output-table``): the table side of ``dpspark.spark.release.run_release``, beside the
path side in ``dpspark.spark.io``. The same refusals hold as for paths.

**Names.** ``catalog.schema.table``, ``schema.table`` or ``table``, resolved against the
session's current catalog and schema and compared in lower case (metastores and Unity
Catalog ignore case). A bad name is refused by the configuration (exit 2) before Spark starts.

**Marking and the ledger.** An output table is recognised as a dpspark release by its table
property ``dpspark.ledger``, which names its ledger table ``<table>__dpspark_ledger`` in the
same schema. That table is append-only, one row per record, never rewritten:

- ``kind = 'entry'``: a ledger entry (``dpspark.ledger``: which records, when, at what ε), JSON;
- ``kind = 'manifest'``: the release's manifest, JSON (the latest is the table's manifest);
- ``kind = 'file'``: a side file (release-vectors' projection), base64, named in ``name``;
- ``kind = 'withdrawn'``: the run ``run_id`` failed after its rows were appended: they do not count.

Append-only rows need no read-modify-write, so two releases of different partitions cannot
lose each other's entry, and nothing has to be deleted (plain Parquet tables cannot DELETE).
The ledger is read whenever the ledger table exists, even when the output table was dropped:
those records were published.

**Commit.** The release is written in its one pass into a staging table beside the output,
``_dpspark_tmp_<table>_<host>_<pid>_<run>`` (readers of the output see nothing of it). Then,
holding the output's commit lock (``io.Lock``: a file ``_dpspark_lock_<table>`` at the schema's
location; where that cannot be written, as in Unity Catalog's managed storage, the format's own
concurrency control is all there is), a new output that another run created meanwhile is exit 5
and a release that overlaps one committed meanwhile is exit 7 (``ledger.check_unchanged``); else:

1. the ledger entry, the manifest and the side files are appended to the ledger table;
2. the staged rows go into the output in one INSERT: a new table is created empty (same
   format, same partition columns), marked, then filled; a full release over an earlier one
   is an INSERT OVERWRITE with ``partitionOverwriteMode=static`` (the whole table); an ETL
   partition is an INSERT OVERWRITE with ``partitionOverwriteMode=dynamic``, which replaces
   only the partitions it writes (each setting set for that write and restored after);
3. the staging table is dropped.

If step 2 fails, a table this run created is dropped and a ``withdrawn`` row cancels the
entry; a run killed between 1 and 2 leaves a release recorded that may not have happened (a
re-run then needs ``allow_rerelease``), never the reverse. A staging table of a run of this
host that no longer runs is dropped by the next release into the same output.

Step 2 is one transaction on Delta, Databricks' default table format. On a plain Parquet
table (the local default) a dynamic overwrite moves complete files in at job commit, but a
static overwrite deletes the earlier files first: a crash inside that copy can leave the
earlier release's table empty (never a mix of the two, never raw data).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import socket
from datetime import datetime, timezone
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpspark import ledger
from dpspark.config import table_name_parts
from dpspark.errors import ConfigError, InputDataError, LedgerError, OutputError, OutputExistsError
from dpspark.outputs import to_json
from dpspark.reserved import TABLE_LEDGER_SUFFIX
from dpspark.spark import io
from dpspark.spark.fs import FileSystem

MARK = "dpspark.ledger"
LEDGER_SUFFIX = TABLE_LEDGER_SUFFIX
LEDGER_COLUMNS = ("run_id", "kind", "name", "content", "written_at")
LEDGER_SCHEMA = T.StructType([T.StructField(n, T.StringType()) for n in LEDGER_COLUMNS])


def qualify(spark: SparkSession, name: str) -> tuple[str, str, str]:
    """(catalog, schema, table) of ``name``, lower case, completed with the current catalog and schema."""
    parts = [p.lower() for p in table_name_parts(name)]
    current = [spark.catalog.currentCatalog().lower(), spark.catalog.currentDatabase().lower()]
    return tuple(current[: 3 - len(parts)] + parts)  # type: ignore[return-value]


def ident(*parts: str) -> str:
    return ".".join(f"`{p}`" for p in parts)


def location(spark: SparkSession, table: str) -> str | None:
    """Where a table's files are (DESCRIBE TABLE EXTENDED), or None when the catalog does not say."""
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
        if row[0] == "Location" and row[1]:
            return row[1]
    return None


def partition_columns(spark: SparkSession, table: str) -> list[str]:
    return [c.name for c in spark.catalog.listColumns(table) if c.isPartition]


def read_input(spark: SparkSession, name: str, spec: dict[str, str] | None) -> tuple[DataFrame, list[str]]:
    """The input table (or one partition of it) and its partition columns."""
    table = ident(*qualify(spark, name))
    if not spark.catalog.tableExists(table):
        raise InputDataError(f"input table {name} ({table}) does not exist: name an existing table (--input-table)")
    df, keys = spark.table(table), partition_columns(spark, table)
    io.check_spec(spec, keys)
    if spec:
        # Partition values compared as text: hour=01 selects the string '01', hour=1 the number 1.
        df = df.where(reduce(lambda a, b: a & b, [F.col(k).cast("string") == v for k, v in spec.items()]))
        if not df.select(F.lit(1)).limit(1).collect():  # no column read: partition pruning only
            raise InputDataError(
                f"input partition {ledger.spec_text(spec)} of table {name} does not exist: name one of "
                f"SHOW PARTITIONS {table} (--partition)"
            )
    return df, keys


class TableOutput:
    """The output table of a release: the table counterpart of ``io.Paths``."""

    def __init__(
        self,
        spark: SparkSession,
        fs: FileSystem,
        name: str,
        fmt: str | None,
        input_table: str | None,
        inputs: list[str],
        source_tables: list[str] | None = None,
    ) -> None:
        self.spark, self.fs, self.given, self.format = spark, fs, name, fmt
        self.catalog, self.schema, self.name = qualify(spark, name)
        self.output = ident(self.catalog, self.schema, self.name)
        self.ledger_table = ident(self.catalog, self.schema, self.name + LEDGER_SUFFIX)
        self.input_table = ident(*qualify(spark, input_table)) if input_table else None
        self.inputs = inputs
        self.input = self.input_table or (inputs[0] if inputs else None)
        self.source_tables = {ident(*qualify(spark, t)) for t in source_tables or []}
        if self.input_table:
            self.source_tables.add(self.input_table)

    def exists(self, table: str | None = None) -> bool:
        return self.spark.catalog.tableExists(table or self.output)

    def schema_location(self) -> str | None:
        """Where the output's schema keeps new managed tables (DESCRIBE SCHEMA), None if unknown."""
        try:
            rows = self.spark.sql(f"DESCRIBE SCHEMA EXTENDED {ident(self.catalog, self.schema)}").collect()
        except Exception:  # noqa: BLE001 - catalogs that cannot describe a schema
            return None
        where = next((r[1] for r in rows if r[0] == "Location" and r[1]), None)
        try:
            return self.fs.resolve(where) if where else None
        except Exception:  # noqa: BLE001 - a location the session may not list (Unity Catalog's managed storage)
            return where

    def locations(self) -> dict[str, str]:
        """Where the output table and its ledger table keep (or, when new, will keep) their files."""
        found, base = {}, self.schema_location()
        for table, short in ((self.output, self.name), (self.ledger_table, self.name + LEDGER_SUFFIX)):
            where = location(self.spark, table) if self.exists(table) else None
            if where:
                found[table] = self.fs.resolve(where)
            elif base:
                found[table] = f"{base.rstrip('/')}/{short}"
        return found

    def check_overlap(self) -> None:
        """Refuse writing into an input table, or into a table whose files (where an existing table
        keeps them, or where a new one will be created) equal, contain or lie inside an input."""
        if self.output in self.source_tables:
            raise ConfigError(
                f"output table {self.given} is the input table ({self.output}): a release must never write over its "
                "raw input; choose another --output-table"
            )
        for table, o in self.locations().items():
            for i in self.inputs:
                if FileSystem.inside(o, i) or FileSystem.inside(i, o):
                    what = "keeps" if self.exists(table) else "would be created with"
                    raise ConfigError(
                        f"output table {self.given}: {table} {what} its files at {o}, which overlaps the input {i}: "
                        "a release must never write over, into or around its raw input; choose another "
                        "--output-table, or a schema whose location lies elsewhere"
                    )

    def check_output(self, mode: str, partitioned: bool) -> bool:
        """Check the output table may be written; return True when it exists (an earlier release)."""
        if not self.spark.catalog.databaseExists(ident(self.catalog, self.schema)):
            raise OutputError(
                f"output table {self.given}: schema {ident(self.catalog, self.schema)} does not exist; create it "
                "(CREATE SCHEMA) or name another --output-table"
            )
        exists = self.exists()
        if exists and mode == "error" and not partitioned:
            raise OutputExistsError(
                f"output table {self.given} already exists: choose a new table or pass --mode overwrite "
                "(which replaces an earlier dpspark release, never other data)"
            )
        if exists and MARK not in self._properties():
            raise OutputError(
                f"output table {self.given} exists and is not a dpspark release (no table property {MARK}): "
                "dpspark replaces only its own earlier outputs; choose a new --output-table"
            )
        if not exists:
            self._probe()
        if self.exists(self.ledger_table):
            names = tuple(f.name for f in self.spark.table(self.ledger_table).schema.fields)
            if names != LEDGER_COLUMNS:
                raise OutputError(
                    f"table {self.ledger_table} exists and is not a dpspark ledger (columns {', '.join(names)}): "
                    f"dpspark keeps the ledger of {self.given} there; rename that table or choose another "
                    "--output-table"
                )
        return exists

    def _probe(self) -> None:
        """Create and drop an empty table beside the output: refused rights fail here, before any work."""
        probe = ident(  # its own name: two runs of one process (threads of a notebook) probe at once
            self.catalog, self.schema, f"{io.TMP_PREFIX}{self.name}_{_host()}_{os.getpid()}_probe{io.new_run_id()[:8]}"
        )
        try:
            self.save(self.spark.createDataFrame([], "x int").write.mode("error"), probe)
        except Exception as exc:  # noqa: BLE001 - AnalysisException, permission errors of the catalog
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and "occurred while calling" not in ln]
            first = lines[0] if lines else type(exc).__name__
            raise OutputError(
                f"output table {self.given} cannot be created in {ident(self.catalog, self.schema)}: {first[:300]}; "
                "check --table-format, and that you may create tables in that schema"
            ) from None
        finally:
            self.drop(probe)

    def _properties(self) -> dict[str, str]:
        return {r[0]: r[1] for r in self.spark.sql(f"SHOW TBLPROPERTIES {self.output}").collect()}

    # --- the ledger -------------------------------------------------------------------------------

    def read_ledger(self) -> list[dict[str, Any]]:
        """Every release recorded for this output, withdrawn runs left out (LedgerError if damaged)."""
        marked = self.exists() and MARK in self._properties()
        rows = []
        if self.exists(self.ledger_table):
            rows = self.spark.table(self.ledger_table).where(F.col("kind").isin("entry", "withdrawn")).collect()
        elif not marked:
            return []
        withdrawn = {r["run_id"] for r in rows if r["kind"] == "withdrawn"}
        entries = [
            ledger.parse_entry(f"{self.ledger_table} (run {r['run_id']})", r["content"] or "")
            for r in rows
            if r["kind"] == "entry" and r["run_id"] not in withdrawn
        ]
        if marked and not entries:
            raise LedgerError(
                f"output table {self.given} is marked as a dpspark release but its ledger table {self.ledger_table} "
                "is missing or holds no entry: the record of which records were released is damaged; restore the "
                "ledger table from a backup (or the table's history) before releasing into this table again"
            )
        return entries

    def _append(self, run_id: str, rows: list[tuple[str, str | None, str]]) -> None:
        data = [(run_id, kind, name, content, datetime.now(timezone.utc).isoformat()) for kind, name, content in rows]
        writer = self.spark.createDataFrame(data, LEDGER_SCHEMA).coalesce(1).write.mode("append")
        (writer.format(self.format) if self.format else writer).saveAsTable(self.ledger_table)

    # --- temporaries ------------------------------------------------------------------------------

    def stage_name(self, run_id: str) -> str:
        return ident(self.catalog, self.schema, f"{io.TMP_PREFIX}{self.name}_{_host()}_{os.getpid()}_{run_id}")

    def remove_stale(self) -> list[str]:
        """Drop staging tables of this output left by runs of this host that no longer run. The names come
        from SHOW TABLES, which reads no table's metadata: ``catalog.listTables`` loads each table it lists
        and fails on one that another run drops meanwhile (its probe or stage; Spark 3.5)."""
        prefix, removed = f"{io.TMP_PREFIX}{self.name}_", []
        for row in self.spark.sql(f"SHOW TABLES IN {ident(self.catalog, self.schema)}").collect():
            name = row["tableName"]
            if name.lower().startswith(prefix) and io.owner_gone(name[len(prefix) :].split("_"), _host()):
                self.drop(ident(self.catalog, self.schema, name))
                removed.append(name)
        return removed

    def drop(self, table: str) -> None:
        self.spark.sql(f"DROP TABLE IF EXISTS {table}")

    def save(self, writer: Any, stage: str) -> None:
        """Write the release (a DataFrameWriter) into the staging table."""
        (writer.format(self.format) if self.format else writer).saveAsTable(stage)

    def type_changes(self, files: list[str], stage: str, skip: list[str]) -> list[dict[str, str]] | None:
        where = location(self.spark, stage)
        return io.type_changes(self.fs, files, self.fs.resolve(where), skip) if where else None

    # --- commit -----------------------------------------------------------------------------------

    def commit(
        self,
        stage: str,
        keys: list[str],
        spec: dict[str, str] | None,
        existed: bool,
        earlier: list[dict[str, Any]],
        entry: dict[str, Any],
        manifest: dict[str, Any],
        side_files: dict[str, bytes],
    ) -> None:
        """Under the output's lock: check that no other run committed meanwhile, record the release,
        then insert the staged rows into the output (see the module docstring)."""
        base = self.schema_location()
        with contextlib.ExitStack() as held:
            if base:
                lock = io.Lock(
                    self.fs, f"{base}/{io.LOCK_PREFIX}{self.name}", entry["run_id"], f"output table {self.given}"
                )
                try:
                    held.enter_context(lock)
                except OSError:  # a location no one may write directly (Unity Catalog's managed storage):
                    pass  # the table format's own concurrency control (Delta) is all there is
            if not existed and self.exists():
                raise OutputExistsError(
                    f"output table {self.given} was created by another run while this one ran: nothing of this run "
                    "was published and its epsilon was not spent; choose a new --output-table, or pass --mode "
                    "overwrite to replace that release"
                )
            current = self.read_ledger()
            ledger.check_unchanged(earlier, current, spec, self.given)
            manifest["ledger"] = ledger.summary([*current, entry])
            self._commit(stage, keys, spec, existed, entry, manifest, side_files)

    def _commit(
        self,
        stage: str,
        keys: list[str],
        spec: dict[str, str] | None,
        existed: bool,
        entry: dict[str, Any],
        manifest: dict[str, Any],
        side_files: dict[str, bytes],
    ) -> None:
        run_id = entry["run_id"]
        files = [("file", n, base64.b64encode(b).decode("ascii")) for n, b in side_files.items()]
        self._append(run_id, [("entry", None, to_json(entry)), ("manifest", None, to_json(manifest)), *files])
        created = False
        try:
            staged = self.spark.table(stage)
            if existed:
                self._check_shape(staged, keys)
            else:
                writer = staged.limit(0).write.mode("error").partitionBy(*keys)
                (writer.format(self.format) if self.format else writer).saveAsTable(self.output)
                created = True
                self.spark.sql(f"ALTER TABLE {self.output} SET TBLPROPERTIES ('{MARK}' = '{self.ledger_table}')")
            overwrite = "dynamic" if spec is not None else "static"
            with io.SqlConf(self.spark, {"spark.sql.sources.partitionOverwriteMode": overwrite}):
                staged.write.insertInto(self.output, overwrite=existed)
        except BaseException:
            if created:
                self.drop(self.output)
            self._append(run_id, [("withdrawn", None, "")])
            raise
        self.drop(stage)

    def _check_shape(self, staged: DataFrame, keys: list[str]) -> None:
        """INSERT matches columns by position: refuse a release whose columns or partitioning differ."""
        have = [(f.name.lower(), f.dataType) for f in self.spark.table(self.output).schema.fields]
        new = [(f.name.lower(), f.dataType) for f in staged.schema.fields]
        if have != new or partition_columns(self.spark, self.output) != [k.lower() for k in keys]:
            raise OutputError(
                f"output table {self.given} has other columns or partition columns than this release "
                f"({', '.join(n for n, _ in have)} against {', '.join(n for n, _ in new)}): release into a new "
                "--output-table"
            )


def _host() -> str:
    """This host, as a name part (letters and digits only)."""
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def manifest_of(spark: SparkSession, name: str) -> dict[str, Any] | None:
    """The latest manifest recorded for the output table ``name`` (None when there is none)."""
    c, s, t = qualify(spark, name)
    table = ident(c, s, t + LEDGER_SUFFIX)
    if not spark.catalog.tableExists(table):
        return None
    rows = spark.table(table).collect()
    withdrawn = {r["run_id"] for r in rows if r["kind"] == "withdrawn"}
    found = [r for r in rows if r["kind"] == "manifest" and r["run_id"] not in withdrawn]
    if not found:
        return None
    try:
        return max((json.loads(r["content"]) for r in found), key=lambda m: m["finished_at"])
    except (ValueError, KeyError):
        raise LedgerError(f"a manifest in {table} is damaged: restore the table from a backup") from None
