"""Reading the input and committing a release: the only code that touches user paths.

- ``Paths.check`` resolves input and output as Spark does (``dpspark.spark.fs``) and
  refuses an output that equals, contains or lies inside the input, in every mode, and
  an output that cannot be written, before any work starts.
- ``read_input`` reads Parquet with partition values kept as strings (``hour=01``
  stays ``"01"``) and read splits sized to give every core work, so that raw rows
  are never shuffled to local disk before they are perturbed.
- ``Stage`` is the one commit helper: the release is written into a hidden sibling
  (``_dpspark_tmp_…``, ignored by Spark, Hive and pyarrow readers) and moved into place
  only when it is complete; on any failure the sibling is removed. Temporaries that a
  killed run left behind are removed by the next run.
- The ledger (``dpspark.ledger``) is read and written here, one file per release.
"""

from __future__ import annotations

import json
import os
import posixpath
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpspark import ledger, reserved
from dpspark.errors import ConfigError, InputDataError, LedgerError, OutputError, OutputExistsError
from dpspark.outputs import to_json
from dpspark.reserved import LOCK_PREFIX, OLD_PREFIX, TMP_PREFIX
from dpspark.spark.fs import FileSystem, is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MANIFEST = reserved.MANIFEST
MANIFEST_VERSION = 1  # CHANGELOG.md, "Formats": fields are only added within a version
STALE_AFTER_S = 24 * 3600  # a temporary of another host (or an unknown owner) older than this is stale
LOCK_STALE_S = 6 * 3600  # a lock of another host older than this is stale (a commit takes seconds to minutes)
LOCK_WAIT_S = 900.0  # how long a commit waits for another run's commit to finish
RELEASE_COMMANDS = ("perturb", "release-vectors")  # the commands whose outputs are releases (with a ledger)


def describe_spark_error(exc: BaseException, path: str) -> InputDataError | None:
    """An InputDataError for the Spark failures that bad input data cause, else None."""
    msg = str(exc)
    first = next((line for line in msg.splitlines() if line.strip()), msg)[:500]
    if "cannot be converted" in msg or "DATA_TYPE_MISMATCH" in msg or "SchemaColumnConvertNotSupported" in msg:
        return InputDataError(
            f"input {path}: the files do not agree on a column's type ({first}); rewrite the odd file(s) so that "
            "every file gives the column one type, or release the files separately"
        )
    if "UnitsChanged" in msg:  # dpspark.unit_table: a task met more of a person than the count pass
        return InputDataError(
            f"input {path}: a person's rows changed between the two passes of a column: unit (each person's tokens "
            "counted, then released): release a stable input (files, or a query without random or nondeterministic "
            "parts written to files first)"
        )
    if "FAILED_READ_FILE" in msg or "is not a Parquet file" in msg or "CORRUPT" in msg.upper():
        return InputDataError(f"input {path}: a file cannot be read as Parquet ({first}); remove or repair it")
    return None


class Paths:
    """The resolved input and output of a release, checked before any work."""

    def __init__(
        self,
        fs: FileSystem,
        input: str | None,  # noqa: A002
        output: str,
        sources: list[str] | None = None,
        command: str | None = None,
    ) -> None:
        self.fs = fs
        self.command = command  # the command that writes the output: it may replace only its own kind
        self.output_given = output
        self.output = resolve_output(fs, output)
        self.input_given = input
        self.inputs = input_roots(fs, input, sources)
        self.input = self.inputs[0] if self.inputs else None
        self.parent, self.name = posixpath.split(self.output.rstrip("/"))

    def check_overlap(self) -> None:
        """Refuse an output that equals, contains or lies inside any input (after resolution)."""
        for i in self.inputs:
            o = self.output
            if FileSystem.inside(o, i) or FileSystem.inside(i, o):
                what = (
                    "is"
                    if o.rstrip("/") == i.rstrip("/")
                    else ("lies inside" if FileSystem.inside(o, i) else "contains")
                )
                given = self.input_given if i == self.input and self.input_given else i
                raise ConfigError(
                    f"output {self.output_given} {what} the input {given} (resolved: output {o}, input "
                    f"{i}): a release must never write over, into or around its raw input; choose an output outside it"
                )

    def lock(self, run_id: str) -> Lock:
        """The commit lock of this output (a sibling file, hidden from readers like the stage)."""
        return Lock(
            self.fs, posixpath.join(self.parent, f"{LOCK_PREFIX}{self.name}"), run_id, f"output {self.output_given}"
        )

    def kind(self, path: str | None = None) -> str:
        """What the dpspark output at ``path`` (default: the output) is: "release" when it holds a ledger,
        else the command its manifest names (a report)."""
        root = path or self.output
        if self.fs.exists(f"{root}/{ledger.LEDGER_DIR}"):
            return "release"
        try:
            manifest = json.loads(self.fs.read_text(f"{root}/{MANIFEST}"))
        except Exception:  # noqa: BLE001 - unreadable: not a report this command may replace
            return "damaged output"
        if not isinstance(manifest, dict):
            return "damaged output"
        return "release" if "ledger" in manifest else str(manifest.get("command", "unknown report"))

    def is_release(self, path: str | None = None) -> bool:
        """True when ``path`` (default: the output) is an earlier dpspark output (manifest or ledger)."""
        root = path or self.output
        return self.fs.exists(f"{root}/{MANIFEST}") or self.fs.exists(f"{root}/{ledger.LEDGER_DIR}")

    def check_output(self, mode: str, partitioned: bool) -> bool:
        """Check the output may be written; return True when it exists (an earlier release)."""
        fs, out = self.fs, self.output
        exists = fs.exists(out)
        if exists and not fs.is_dir(out):
            raise OutputError(f"output {self.output_given} exists and is not a directory; choose another --output")
        if exists and mode == "error" and not partitioned:
            raise OutputExistsError(
                f"output {self.output_given} already exists: choose a new path or pass --mode overwrite "
                "(which replaces an earlier dpspark release, never other data)"
            )
        if exists and not (partitioned and not fs.list(out)):
            if not self.is_release():
                raise OutputError(
                    f"output {self.output_given} exists and is not a dpspark release (no {MANIFEST}): dpspark "
                    "replaces only its own earlier outputs; choose a new --output"
                )
            found, own = self.kind(), ("release" if self.command in RELEASE_COMMANDS else self.command)
            if self.command is not None and found != own:
                raise OutputError(
                    f"output {self.output_given} holds a "
                    + ("release, its data and its ε ledger" if found == "release" else f"{found} report")
                    + f", which {self.command} may not replace (a command replaces only its own kind of output): "
                    "choose another --output"
                )
        self.lock("check").check()
        try:
            fs.check_writable(out)
        except OSError as exc:
            raise OutputError(
                f"output {self.output_given} cannot be written: {exc}; choose a writable --output"
            ) from None
        return exists

    # --- temporaries ------------------------------------------------------------------------------

    def stage_name(self, run_id: str) -> str:
        return posixpath.join(self.parent, f"{TMP_PREFIX}{self.name}_{socket.gethostname()}_{os.getpid()}_{run_id}")

    def remove_stale(self) -> list[str]:
        """Remove temporaries of this output left by runs that no longer run; return their names."""
        removed = []
        host, now = socket.gethostname(), time.time()
        for name, mtime in self.fs.list(self.parent):
            for prefix in (TMP_PREFIX, OLD_PREFIX):
                if not name.startswith(f"{prefix}{self.name}_"):
                    continue
                owner = name[len(prefix) + len(self.name) + 1 :].split("_")
                if owner_gone(owner, host) or now - mtime > STALE_AFTER_S:
                    self.fs.remove(posixpath.join(self.parent, name))
                    removed.append(name)
        return removed


def input_roots(fs: FileSystem, input: str | None, sources: list[str] | None) -> list[str]:  # noqa: A002
    """The resolved input path, then every source location of the input's DataFrame
    (``dpspark.spark.lineage``), partition directories removed (``…/date=X`` → ``…``): the
    places no output may overlap."""
    roots = [fs.resolve(input)] if input is not None else []
    for location in sources or []:
        root = fs.resolve(location)
        while "=" in posixpath.basename(root.rstrip("/")):
            root = posixpath.dirname(root.rstrip("/"))
        if root not in roots:
            roots.append(root)
    return roots


def check_writes(fs: FileSystem, inputs: list[str], writes: dict[str, Any]) -> None:
    """Refuse a directory dpspark writes besides the output (``writes``: what it is → its local path: the
    embedding store, the artefact cache) that is, or lies inside, one of the resolved ``inputs``."""
    for what, path in writes.items():
        where = fs.resolve(Path(path).resolve().as_uri())
        for i in inputs:
            if FileSystem.inside(where, i):
                from dpspark.prepare import write_inside_input

                raise write_inside_input(what, path, i)


def resolve_output(fs: FileSystem, output: str) -> str:
    """The resolved output, or a ConfigError for a path no file system of the session can take
    (an unknown scheme, a host the local file system does not serve, a dangling symbolic link)."""
    try:
        resolved = fs.resolve(output)
    except Exception as exc:  # noqa: BLE001 - py4j wraps the Java errors
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip() and "calling" not in ln), str(exc))
        raise ConfigError(
            f"output {output} is not a path this session can write ({first[:200]}): give a directory on a file "
            "system the session knows (a plain path, or file:///, hdfs://, s3a://, dbfs:/ ...)"
        ) from None
    local = fs.local_file(output)
    if local is not None and os.path.islink(local) and not os.path.exists(local):
        raise ConfigError(
            f"output {output} is a symbolic link to {os.readlink(local)}, which does not exist: remove the link or "
            "choose another --output"
        )
    return resolved


class Lock:
    """The commit lock of one output: a small file created exclusively (``FileSystem.create_exclusive``).

    Held only while a release re-reads the ledger, checks it and commits (seconds), never while
    it transforms: releases of different partitions still run side by side and queue only for
    their commits. The file names its holder (host, process, run); a lock whose process of this
    host is gone, or another host's lock older than ``LOCK_STALE_S``, is taken over. A run that
    cannot get the lock within ``LOCK_WAIT_S`` fails with exit 5 and the lock file's name.
    """

    def __init__(self, fs: FileSystem, path: str, run_id: str, what: str) -> None:
        self.fs, self.path, self.what = fs, path, what
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "run_id": run_id}

    def check(self) -> None:
        """Refuse at once a lock that no release can ever release: a directory where the lock file goes."""
        if self.fs.is_dir(self.path):
            raise OutputError(
                f"the commit lock of {self.what}, {self.path}, is a directory, which no release removes (an output "
                f"must not be named {LOCK_PREFIX}...): move it away and run again"
            )

    def __enter__(self) -> Lock:
        data = json.dumps({**self.owner, "since": time.time()}).encode()
        deadline, pause = time.monotonic() + LOCK_WAIT_S, 0.05
        while not self.fs.create_exclusive(self.path, data):
            self.check()
            holder = self._holder()
            if holder is not None and self._stale(holder):
                self.fs.remove(self.path)
                continue
            if time.monotonic() > deadline:
                raise OutputError(
                    f"{self.what} is locked by another release's commit ({self.path}, held by "
                    f"{(holder or {}).get('host', 'an unknown host')}); if no dpspark run is committing there, remove "
                    "that file and run again"
                )
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
        return self

    def _holder(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.fs.read_text(self.path))
        except Exception:  # noqa: BLE001 - gone meanwhile, or half written by its creator
            return None
        return holder if isinstance(holder, dict) else None

    def _stale(self, holder: dict[str, Any]) -> bool:
        owner = [str(holder.get("host")), str(holder.get("pid")), str(holder.get("run_id"))]
        since = holder.get("since")
        return owner_gone(owner, socket.gethostname()) or (
            isinstance(since, int | float) and time.time() - since > LOCK_STALE_S
        )

    def __exit__(self, *exc: object) -> None:
        holder = self._holder()
        if holder is not None and holder.get("run_id") == self.owner["run_id"]:
            self.fs.remove(self.path)


def owner_gone(owner: list[str], host: str) -> bool:
    """True when a temporary named ``…_<host>_<pid>_<run_id>`` belongs to a process of this host
    that no longer runs (another host's, or an unknown owner's, cannot be told)."""
    if len(owner) < 3 or owner[-3] != host or not owner[-2].isdigit():
        return False
    try:
        os.kill(int(owner[-2]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def check_spec(spec: dict[str, str] | None, keys: list[str]) -> None:
    """Refuse a partition spec that does not name the input's leading partition columns in order."""
    if spec is not None and list(spec) != keys[: len(spec)]:
        raise ConfigError(
            f"partition {ledger.spec_text(spec)} does not follow the input's partition layout "
            f"({'/'.join(keys) or 'none'}): name the leading partition columns in order"
        )


# --- reading --------------------------------------------------------------------------------------


def read_splits(spark: SparkSession, size: int, partitions: int | None) -> dict[str, str]:
    """SQL settings that split the input into enough read tasks (no shuffle of raw rows).

    ``partitions`` asks for that many splits; by default small inputs get about four per
    core. Parquet splits at row-group boundaries, so a file of one row group stays one task.
    Splits are at least 64 KiB: each Python worker loads the embedding once (≈ 1 s), which a
    tiny split would not repay. ``minPartitionNum`` 1 stops Spark from cutting a tiny input
    into one split per core anyway (empty splits of a one-row-group file, each a worker).
    """
    if partitions is None:
        if is_connect(spark):
            return {}
        partitions = 4 * spark.sparkContext.defaultParallelism
    target = max(size // max(partitions, 1), 64 << 10)
    return {
        "spark.sql.files.maxPartitionBytes": str(min(target, 128 << 20)),
        "spark.sql.files.openCostInBytes": "0",
        "spark.sql.files.minPartitionNum": "1",
    }


WORTH_A_CORE = 1 << 20  # input bytes below which a core of its own is not worth a warning or a shuffle
ROWS_WORTH_A_CORE = 10_000  # rows below which a core of its own is not worth a shuffle (seconds of search)


def encrypts_local_io(spark: SparkSession) -> bool:
    """Whether the session encrypts what it writes to local disk (shuffle and spill files); False where
    it cannot be told (a Spark Connect client that does not show the setting)."""
    key = "spark.io.encryption.enabled"
    try:
        value = spark.conf.get(key, "false") if is_connect(spark) else spark.sparkContext.getConf().get(key, "false")
    except Exception:  # noqa: BLE001 - a server that does not show it: taken as not encrypted
        return False
    return str(value).lower() == "true"


def spread_tasks(fs: FileSystem, files: list[str], cores: int) -> int | None:
    """How many tasks to spread the input's rows over when its row groups leave cores idle, else None.

    Parquet splits only at row-group boundaries, so an input of fewer row groups (with rows)
    than the cores its rows are worth (a core per ``ROWS_WORTH_A_CORE`` rows or ``WORTH_A_CORE``
    encoded bytes, at most one per core) runs on fewer cores: a 38,000-row file that pyarrow
    wrote as one group runs on one. Then the rows are repartitioned (round robin) over that many
    tasks; the caller does it only where the session encrypts local I/O, since a shuffle writes
    the raw rows to local disk. The footers say all three (rows too: repetitive text encodes to
    almost nothing, and the search costs per token); they are read only when the files are fewer
    than the cores (each file holds at least one group), so at most one footer per core.
    """
    if cores < 2 or len(files) >= cores:
        return None
    try:
        counted = [fs.row_groups(f) for f in files]
    except Exception:  # noqa: BLE001 - a footer the driver cannot read: the read reports it
        return None
    groups, rows, encoded = (sum(c[i] for c in counted) for i in range(3))
    wanted = min(cores, max(rows // ROWS_WORTH_A_CORE, encoded // WORTH_A_CORE))
    return wanted if groups < wanted else None


def few_read_tasks(fs: FileSystem, written: str, size: int, splits: dict[str, str], cores: int) -> str | None:
    """Why a release ran on fewer cores than its input's size asked for, or None.

    ``written`` is the directory that holds the release's Parquet files: one per read task
    that had rows. When the input was large enough for several splits of ``read_splits``'s
    size, each worth a core (``WORTH_A_CORE`` bytes: ≈ 150,000 tokens of text, seconds of
    search), but fewer tasks wrote, the input's Parquet row groups were too few and too
    large (Spark splits only at their boundaries, and dpspark never shuffles raw rows to
    spread them): the message says how to write the input for the next release.
    """
    target = int(splits.get("spark.sql.files.maxPartitionBytes", 0))
    wanted = min(cores, -(-size // target), size // WORTH_A_CORE) if target else 0
    if wanted < 2:
        return None
    names = sorted(name for name, _ in fs.list(written) if name.endswith(".parquet"))
    tasks = len(names)  # every task with rows wrote one file, and task 0 always writes one (maybe empty)
    # Task 0's file changes the answer only when it is the one file or makes the count reach `wanted`.
    first = None
    if tasks in (1, wanted) and names[0].startswith("part-00000"):
        first = fs.local_file(f"{written}/{names[0]}")
    if first is not None:
        import pyarrow.parquet as pq

        try:
            tasks -= pq.ParquetFile(first).metadata.num_rows == 0
        except (OSError, ValueError):
            pass
    if not 0 < tasks < wanted:
        return None
    return (
        f"the input was read as {tasks} task(s) with rows for {cores} cores: Parquet "
        "splits only at row-group boundaries and the input has too few row groups (pyarrow writes up to "
        "1 M rows per group); start the session with spark.io.encryption.enabled=true (dpspark then spreads "
        "the rows over every core through an encrypted shuffle, as it does in the sessions it starts), or rewrite "
        "the input with smaller groups (pq.write_table(table, path, row_group_size=5_000), or Spark's "
        "parquet.block.size)"
    )


class SqlConf:
    """Set session SQL settings for a block and restore them after.

    Safe across threads sharing a session (concurrent releases from one notebook or driver): each
    setting keeps the session's own value and a list of the blocks holding it; a block that ends
    while others still hold the setting puts back the latest remaining block's value, and the last
    one to end restores the session's value. (Saving and restoring per block would leave a value of
    one thread behind for good when two blocks overlap.)
    """

    _lock = threading.Lock()
    _held: dict[tuple[int, str], tuple[str | None, list[tuple[object, str]]]] = {}

    def __init__(self, spark: SparkSession, settings: dict[str, str]) -> None:
        self.spark, self.settings = spark, settings
        self._token = object()

    def __enter__(self) -> SqlConf:
        with self._lock:
            for k, v in self.settings.items():
                key = (id(self.spark), k)
                original, holders = self._held.get(key, (None, []))
                if not holders:
                    original = self.spark.conf.get(k, None)
                self._held[key] = (original, [*holders, (self._token, v)])
                self.spark.conf.set(k, v)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            for k in self.settings:
                key = (id(self.spark), k)
                original, holders = self._held[key]
                holders = [h for h in holders if h[0] is not self._token]
                if holders:
                    self._held[key] = (original, holders)
                    self.spark.conf.set(k, holders[-1][1])
                else:
                    del self._held[key]
                    if original is None:
                        self.spark.conf.unset(k)
                    else:
                        self.spark.conf.set(k, original)


STRING_PARTITIONS = {"spark.sql.sources.partitionColumnTypeInference.enabled": "false"}


def read_input(spark: SparkSession, fs: FileSystem, path: str, spec: dict[str, str] | None) -> DataFrame:
    """Read the input (or one partition of it), partition values as strings, footers checked."""
    rel = find_partition(fs, path, spec) if spec else ""
    source = path.rstrip("/") + (f"/{rel or ledger.spec_text(spec)}" if spec else "")
    if rel is None or not fs.exists(source):
        what = f"input partition {source} (--partition {ledger.spec_text(spec)})" if spec else f"input {path}"
        raise InputDataError(f"{what} does not exist: pass a Parquet file or directory (--input)")
    try:
        with SqlConf(spark, STRING_PARTITIONS):
            reader = spark.read.option("basePath", path) if spec else spark.read
            df = reader.parquet(source)
            df.schema  # noqa: B018 - forces the footer read, so a non-Parquet input fails here
    except Exception as exc:  # AnalysisException, or footer errors wrapped in several types
        msg = str(exc)
        if any(k in msg.lower() for k in ("footer", "magic number", "is not a parquet file")):
            raise InputDataError(f"input {source} is not a Parquet dataset (cannot read its footer)") from None
        first = next((line for line in msg.splitlines() if line.strip()), type(exc).__name__)
        raise InputDataError(f"input {source} is not a readable Parquet dataset: {first[:300]}") from None
    if df.isStreaming:
        raise InputDataError(f"input {source} is a stream")
    return df


# Spark writes a partition value into its directory name with these characters as %XX
# (ExternalCatalogUtils.escapePathName); Hive does the same, pyarrow's default "uri" encoding
# escapes more, and hand-made layouts often escape nothing.
_SPARK_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(0x20))


def escape_value(value: str) -> str:
    """A partition value as Spark writes it in a directory name (``a=b`` → ``a%3Db``)."""
    return "".join(f"%{ord(ch):02X}" if ch in _SPARK_ESCAPED else ch for ch in value)


def unescape_value(name: str) -> str:
    """A directory name's partition value as Spark reads it (``%XX`` decoded, anything else kept)."""
    out, i = [], 0
    while i < len(name):
        if name[i] == "%" and i + 2 < len(name) and all(c in "0123456789abcdefABCDEF" for c in name[i + 1 : i + 3]):
            out.append(chr(int(name[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def find_partition(fs: FileSystem, root: str, spec: dict[str, str]) -> str | None:
    """The directory (relative to ``root``) that holds the records of ``spec``, however its
    values are written (escaped as Spark does, or literally), or None when there is none."""
    rel = ""
    for key, value in spec.items():
        names = {name for name, _ in fs.list(f"{root.rstrip('/')}/{rel}".rstrip("/"))}
        found = [f"{key}={v}" for v in (escape_value(value), value) if f"{key}={v}" in names]
        found += sorted(  # escaped otherwise (pyarrow's URI encoding), or the value given as a directory name
            n
            for n in names
            if n.startswith(f"{key}=") and unescape_value(n[len(key) + 1 :]) in (value, unescape_value(value))
        )
        if not found:
            return None
        rel = f"{rel}/{found[0]}".lstrip("/")
    return rel


def record_spec(fs: FileSystem, root: str, spec: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """``spec`` as the records' values, and its directory under ``root`` (None when missing).
    Values are read from the directory names as Spark reads them: ``k=a%3Db`` names the records
    ``k = 'a=b'`` however the user spelled it, so the ledger compares records, not spellings."""
    rel = find_partition(fs, root, spec)
    if rel is None:
        return spec, None
    return {k: unescape_value(seg.split("=", 1)[1]) for k, seg in zip(spec, rel.split("/"), strict=True)}, rel


def partition_keys(files: list[str], root: str) -> list[str]:
    """The partition columns of a dataset, in directory order (``date=…/hour=…`` → date, hour)."""
    keys: list[str] | None = None
    for f in files:
        rel = f.split(root.rstrip("/"), 1)[-1] if root.rstrip("/") in f else f
        these = [seg.split("=", 1)[0] for seg in rel.strip("/").split("/")[:-1] if "=" in seg]
        if keys is None:
            keys = these
        elif these != keys:
            raise InputDataError(
                f"input {root}: files sit at different partition depths ({'/'.join(keys)} and {'/'.join(these)}); "
                "a dataset needs one partition layout"
            )
    return keys or []


# --- the ledger -----------------------------------------------------------------------------------


def read_ledger(fs: FileSystem, output: str) -> list[dict[str, Any]]:
    """Every release recorded at ``output`` (LedgerError if an entry is damaged)."""
    d = f"{output.rstrip('/')}/{ledger.LEDGER_DIR}"
    entries = []
    for name, _ in sorted(fs.list(d)):
        if name.startswith(".") or not name.endswith(".json"):
            continue
        try:
            text = fs.read_text(f"{d}/{name}")
        except Exception as exc:  # noqa: BLE001 - OSError, a decode error, or Hadoop's ChecksumException
            first = next((line for line in str(exc).splitlines() if line.strip() and "calling" not in line), str(exc))
            raise LedgerError(
                f"ledger entry {d}/{name} cannot be read ({first.strip()[:200]}): the record of which records were "
                "released is damaged; restore it from a backup (dpspark never rewrites ledger entries)"
            ) from None
        entries.append(ledger.parse_entry(f"{d}/{name}", text))
    manifest = f"{output.rstrip('/')}/{MANIFEST}"
    if fs.exists(manifest) and not entries:
        try:
            released = "ledger" in json.loads(fs.read_text(manifest))
        except (ValueError, UnicodeDecodeError, TypeError) as exc:
            raise LedgerError(
                f"the manifest {manifest} of the earlier release is damaged ({exc}); restore it "
                "from a backup before releasing into this output again"
            ) from None
        if released:
            raise LedgerError(
                f"{output} holds a release's manifest but no ledger entries ({d} is missing or empty: a sync or "
                "clean-up tool that skips folders starting with _ removes it): the record of which records were "
                f"released is damaged; restore {d} from a backup before releasing into this output again"
            )
    return entries


def write_ledger_entry(fs: FileSystem, output: str, entry: dict[str, Any]) -> str:
    """Write one release's entry atomically, never replacing another's; return its path."""
    stamp = entry["finished_at"].replace(":", "").replace("-", "").replace("+", "Z")
    path = f"{output.rstrip('/')}/{ledger.LEDGER_DIR}/{stamp}_{entry['run_id']}.json"
    fs.mkdirs(posixpath.dirname(path))
    fs.write_text(path, to_json(entry), overwrite=False)
    return path


def new_run_id() -> str:
    return uuid.uuid4().hex


def commit_stage(fs: FileSystem, paths: Paths, stage: str, existed: bool, run_id: str) -> None:
    """Move a complete ``stage`` to the output; an earlier release there is replaced only now,
    via a hidden backup that is restored if the move fails. Call it holding ``paths.lock``: an
    output that another run created meanwhile is refused (exit 5), never renamed into (Hadoop's
    rename of a directory onto an existing one nests it inside)."""
    out = paths.output
    if not existed or not fs.exists(out):
        if fs.exists(out):
            raise OutputExistsError(
                f"output {paths.output_given} was created by another run while this one ran: nothing of this run "
                "was published and its epsilon was not spent; choose a new --output, or pass --mode overwrite to "
                "replace that release"
            )
        fs.mkdirs(paths.parent)
        fs.rename(stage, out)
        return
    old = paths.stage_name(run_id).replace(TMP_PREFIX, OLD_PREFIX, 1)
    fs.rename(out, old)
    try:
        fs.rename(stage, out)
    except BaseException:
        fs.rename(old, out)
        raise
    fs.remove(old)


def publish(
    fs: FileSystem,
    paths: Paths,
    stage: str,
    files: Iterable[tuple[str, bytes]],
    manifest: dict[str, Any],
    existed: bool,
    run_id: str,
    check: Callable[[], None] | None = None,
) -> None:
    """Publish a whole output directory: the one commit of a full release and of every report.

    Writes ``files`` (name, bytes) into the hidden ``stage``, beside whatever the caller already
    wrote there (the data of a release, its ledger entries), then the manifest: the last file,
    so a reader that sees it sees a complete output. Then, holding the output's lock, runs
    ``check`` (a release re-reads its ledger there: no other run may have released meanwhile)
    and moves the stage into place (``commit_stage``). On failure the caller removes the stage.
    """
    for name, data in files:
        fs.write_bytes(f"{stage}/{name}", data)
    fs.write_text(f"{stage}/{MANIFEST}", to_json(manifest))
    with paths.lock(run_id):
        if check is not None:
            check()
        commit_stage(fs, paths, stage, existed, run_id)


def type_changes(fs: FileSystem, input_files: list[str], stage: str, skip: list[str]) -> list[dict[str, str]] | None:
    """Columns whose Parquet type the Spark round trip changed (uint64 → decimal(20,0),
    zoned timestamps → UTC, ...), from the footers of one input file and one output file.

    None when the footers cannot be read from the driver (no local or pyarrow-readable path).
    """
    import pyarrow.parquet as pq

    outputs = [n for n, _ in fs.list(stage) if n.endswith(".parquet")]
    src = fs.local_file(input_files[0]) if input_files else None
    dst = fs.local_file(f"{stage}/{outputs[0]}") if outputs else None
    if src is None or dst is None:
        return None
    try:
        before, after = pq.read_schema(src), pq.read_schema(dst)
    except (OSError, ValueError):
        return None
    changes = []
    for f in before:
        if f.name in skip or f.name not in after.names:
            continue
        new = after.field(f.name).type
        if new != f.type:
            changes.append({"column": f.name, "input_type": str(f.type), "output_type": str(new)})
    return changes
