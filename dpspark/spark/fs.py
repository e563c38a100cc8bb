"""The few file-system operations a job needs: exists, remove, rename, write a small file.

Local paths (and file: URIs) use the Python standard library; every other scheme
(hdfs:, s3a:, abfss:, dbfs:) goes through Hadoop's FileSystem of the running JVM,
so it works with whatever connectors the cluster has configured.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql import SparkSession


def _local(path: str) -> Path | None:
    parsed = urlparse(path)
    if parsed.scheme in ("", "file") or len(parsed.scheme) == 1:  # "C:" on Windows
        return Path(parsed.path if parsed.scheme == "file" else path)
    return None


class FileSystem:
    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def _hadoop(self, path: str):  # noqa: ANN202 - py4j objects
        jvm = self.spark.sparkContext._jvm
        p = jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration()), p

    def absolute(self, path: str) -> str:
        """``path`` made absolute when it is local; other URIs unchanged."""
        local = _local(path)
        return str(local.resolve()) if local is not None and not path.startswith("file:") else path

    def exists(self, path: str) -> bool:
        local = _local(path)
        if local is not None:
            return local.exists()
        fs, p = self._hadoop(path)
        return bool(fs.exists(p))

    def remove(self, path: str) -> None:
        local = _local(path)
        if local is not None:
            if local.is_dir():
                shutil.rmtree(local, ignore_errors=True)
            elif local.exists():
                local.unlink()
            return
        fs, p = self._hadoop(path)
        fs.delete(p, True)

    def rename(self, src: str, dst: str) -> None:
        local = _local(src)
        if local is not None:
            local.rename(_local(dst))
            return
        fs, p = self._hadoop(src)
        if not fs.rename(p, self._hadoop(dst)[1]):
            raise OSError(f"could not rename {src} to {dst}")

    def read_text(self, path: str) -> str:
        local = _local(path)
        if local is not None:
            return local.read_text(encoding="utf-8")
        fs, p = self._hadoop(path)
        stream = fs.open(p)
        try:
            jvm = self.spark.sparkContext._jvm
            return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        local = _local(path)
        if local is not None:
            # Write beside and rename: a reader never sees half a manifest.
            part = local.with_name(f".{local.name}.tmp")
            part.write_text(text, encoding="utf-8")
            part.replace(local)
            return
        fs, p = self._hadoop(path)
        out = fs.create(p, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
