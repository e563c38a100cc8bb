"""Paths as Spark resolves them, and the few file operations a release needs.

A path without a scheme means what it means to Spark: a path on the session's
*default* file system (``fs.defaultFS``: dbfs:/ on Databricks, HDFS on YARN, viewfs,
s3a, or file:/ in local mode), relative to its working directory. So every operation
goes through the Hadoop ``FileSystem`` of the session's own Hadoop configuration (the
one Spark SQL uses to read and write), and ``resolve`` turns a path into the fully
qualified URI of where the bytes really are: scheme and authority added, viewfs mount
points and symbolic links followed. Overlap checks compare those.

Spark Connect has no JVM on the client. There, paths are the client's local paths
(absolute, symbolic links resolved), which is what a local Connect server reads; a
remote server's file systems are out of reach of the client, and the overlap check
then compares the paths as given. The local engine (``dpspark.local``: no session, ``FileSystem(None)``)
works the same way on this machine's files. This module imports no pyspark at run time.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (Databricks serverless): no SparkContext there."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class FileSystem:
    """File operations on the session's Hadoop file systems (or the local one on Spark Connect, and with no
    session: the local engine's, ``dpspark.local``)."""

    def __init__(self, spark: SparkSession | None) -> None:
        self.spark = spark
        self.local = spark is None or is_connect(spark)
        if not self.local:
            jvm = spark.sparkContext._jvm
            self._jvm = jvm
            self._conf = spark._jsparkSession.sessionState().newHadoopConf()

    # --- resolution -------------------------------------------------------------------------------

    def _hadoop(self, path: str):  # noqa: ANN202 - py4j objects
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    def resolve(self, path: str) -> str:
        """The fully qualified location of ``path``: scheme, authority, mounts and symlinks resolved.

        A path that does not exist yet is resolved through its deepest existing ancestor.
        """
        if self.local:
            return str(Path(urlparse(path).path if path.startswith("file:") else path).resolve())
        fs, p = self._hadoop(path)
        q = fs.makeQualified(p)
        tail: list[str] = []
        while not fs.exists(q) and q.getParent() is not None:
            tail.append(q.getName())
            q = q.getParent()
        if fs.exists(q):
            q = fs.resolvePath(q)
            if q.toUri().getScheme() == "file":  # Hadoop's local FS does not follow symlinks itself
                q = self._jvm.org.apache.hadoop.fs.Path("file://" + os.path.realpath(q.toUri().getPath()))
        resolved = str(q.toString()).rstrip("/")
        return posixpath.join(resolved, *reversed(tail)) if tail else resolved

    @staticmethod
    def inside(path: str, root: str) -> bool:
        """True when resolved ``path`` equals ``root`` or lies below it."""
        a, b = path.rstrip("/"), root.rstrip("/")
        return a == b or a.startswith(b + "/")

    # --- queries ----------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        if self.local:
            return Path(path).exists()
        fs, p = self._hadoop(path)
        return bool(fs.exists(p))

    def is_dir(self, path: str) -> bool:
        """True when ``path`` is a directory; False when it is a file or missing, also when another run
        removes it while this one asks (a lock file comes and goes)."""
        if self.local:
            return Path(path).is_dir()
        fs, p = self._hadoop(path)
        try:
            return bool(fs.getFileStatus(p).isDirectory())
        except Exception as exc:  # noqa: BLE001 - py4j wraps java.io.FileNotFoundException
            if _missing(exc):
                return False
            raise

    def list(self, path: str) -> list[tuple[str, float]]:
        """(name, modification time in seconds) of the children of a directory; [] if it is missing (or
        is removed while this lists it); a child removed meanwhile is left out."""
        if self.local:
            out = []
            try:
                children = list(Path(path).iterdir())
            except (FileNotFoundError, NotADirectoryError):
                return []
            for c in children:
                try:
                    out.append((c.name, c.lstat().st_mtime))
                except FileNotFoundError:
                    continue
            return out
        fs, p = self._hadoop(path)
        try:
            statuses = fs.listStatus(p)
        except Exception as exc:  # noqa: BLE001 - py4j wraps java.io.FileNotFoundException
            if _missing(exc):
                return []
            raise
        return [(s.getPath().getName(), s.getModificationTime() / 1000.0) for s in statuses]

    def size(self, path: str) -> int:
        """Total bytes under ``path``."""
        if self.local:
            p = Path(path)
            return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        fs, p = self._hadoop(path)
        return int(fs.getContentSummary(p).getLength())

    def row_groups(self, path: str) -> tuple[int, int, int]:
        """(row groups with rows, rows, encoded bytes before compression) of the Parquet file
        ``path``: its footer, read on the driver."""
        local = self.local_file(path)
        if local is not None:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(local).metadata
            groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
            rows = [g.num_rows for g in groups]
            return sum(n > 0 for n in rows), sum(rows), sum(g.total_byte_size for g in groups)
        jvm = self._jvm
        parquet = jvm.org.apache.parquet.hadoop
        reader = parquet.ParquetFileReader.open(
            parquet.util.HadoopInputFile.fromPath(self._hadoop(path)[1], self._conf)
        )
        try:
            blocks = list(reader.getRowGroups())
            rows = [int(b.getRowCount()) for b in blocks]
            return sum(n > 0 for n in rows), sum(rows), sum(int(b.getTotalByteSize()) for b in blocks)
        finally:
            reader.close()

    # --- changes ----------------------------------------------------------------------------------

    def mkdirs(self, path: str) -> None:
        if self.local:
            Path(path).mkdir(parents=True, exist_ok=True)
            return
        fs, p = self._hadoop(path)
        if not fs.mkdirs(p):
            raise OSError(f"could not create directory {path}")

    def remove(self, path: str) -> None:
        if self.local:
            p = Path(path)
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists() or p.is_symlink():
                p.unlink()
            return
        fs, p = self._hadoop(path)
        fs.delete(p, True)

    def rename(self, src: str, dst: str) -> None:
        if self.local:
            Path(src).rename(dst)
            return
        fs, p = self._hadoop(src)
        if not fs.rename(p, self._hadoop(dst)[1]):
            raise OSError(f"could not rename {src} to {dst}")

    def read_bytes(self, path: str) -> bytes:
        if self.local:
            return Path(path).read_bytes()
        fs, p = self._hadoop(path)
        stream = fs.open(p)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def write_bytes(self, path: str, data: bytes, overwrite: bool = True) -> None:
        """Write beside and rename: a reader never sees half a file. With ``overwrite=False`` an
        existing ``path`` is an error (FileExistsError), never replaced. On the local file system the
        operating system writes it (Hadoop's local file system would add a ``.crc`` file beside it)."""
        local = self.local_file(path)
        if local is not None:
            directory, name = posixpath.split(local.rstrip("/"))
            part = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
            Path(directory).mkdir(parents=True, exist_ok=True)  # as Hadoop's create does
            Path(part).write_bytes(data)
            try:
                if overwrite:
                    os.replace(part, local)
                else:
                    os.link(part, local)  # atomic, and refuses an existing target
            finally:
                Path(part).unlink(missing_ok=True)
            return
        directory, name = posixpath.split(path.rstrip("/"))
        part = posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        fs, p = self._hadoop(part)
        out = fs.create(p, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        target = self._hadoop(path)[1]
        # Hadoop's rename refuses an existing target. With overwrite, a concurrent writer of the
        # same file (two partition releases writing the output's manifest) may recreate it between
        # the delete and the rename: try again, the last writer wins.
        for _ in range(10 if overwrite else 1):
            if overwrite and fs.exists(target):
                fs.delete(target, False)
            if fs.rename(p, target):
                return
        fs.delete(p, False)
        if fs.exists(target):
            raise FileExistsError(path)
        raise OSError(f"could not write {path}")

    def write_text(self, path: str, text: str, overwrite: bool = True) -> None:
        self.write_bytes(path, text.encode("utf-8"), overwrite)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` only if nothing is there; False when something is.

        The one primitive that the release lock (``dpspark.spark.io.Lock``) rests on. It is
        atomic where the file system makes creation exclusive: a local or NFS file system
        (``O_CREAT | O_EXCL``: Hadoop's own local ``create(overwrite=false)`` checks and then
        creates, so ``file:`` paths go through the operating system instead), HDFS and viewfs
        over it, ABFS with hierarchical namespace and dbfs (create without overwrite is one
        metadata operation there). On s3a it is atomic only with conditional writes (Hadoop
        3.4.1+, ``If-None-Match``); older s3a clients check and then write, so two runs that
        reach the same instant can both believe they hold the lock.
        """
        local = self.local_file(path)
        if local is not None:
            Path(local).parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return True
        fs, p = self._hadoop(path)
        try:
            out = fs.create(p, False)
        except Exception as exc:  # noqa: BLE001 - py4j wraps FileAlreadyExistsException
            if "FileAlreadyExists" in str(exc) or fs.exists(p):
                return False
            raise OSError(f"could not create {path} ({str(exc).splitlines()[0]})") from None
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        return True

    def local_file(self, path: str) -> str | None:
        """``path`` as the driver's operating system names it when it is on the local file system."""
        if self.local:
            return urlparse(path).path if path.startswith("file:") else path
        fs, p = self._hadoop(path)
        uri = fs.makeQualified(p).toUri()
        return str(uri.getPath()) if uri.getScheme() == "file" else None

    def check_writable(self, path: str) -> None:
        """Write and remove a probe file in ``path``'s nearest existing ancestor, creating nothing else.

        Raises OSError (naming the location) when it cannot be written: checked before any work.
        """
        try:
            if self.local:
                ancestor = Path(path)
                while not ancestor.exists() and ancestor.parent != ancestor:
                    ancestor = ancestor.parent
                probe = ancestor / f"_dpspark_probe_{socket.gethostname()}_{uuid.uuid4().hex}"
                probe.write_bytes(b"")
                probe.unlink()
                return
            fs, p = self._hadoop(path)
            ancestor = fs.makeQualified(p)
            while not fs.exists(ancestor) and ancestor.getParent() is not None:
                ancestor = ancestor.getParent()
            probe = self._jvm.org.apache.hadoop.fs.Path(ancestor, f"_dpspark_probe_{uuid.uuid4().hex}")
            fs.create(probe, False).close()
            fs.delete(probe, False)
        except Exception as exc:  # PermissionError locally; py4j wraps the Java IOException
            raise OSError(f"{path} cannot be written ({str(exc).splitlines()[0]})") from None


def _missing(exc: Exception) -> bool:
    """A Hadoop call's error for a path that is not there (what py4j's message of it names)."""
    return "FileNotFoundException" in str(exc)
