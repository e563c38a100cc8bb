"""The one output path of every Spark report: privacy-stats, privacy-risk, evaluate-utility, calibrate.

A report is made on the driver in a local scratch directory (``ReportOutput.local``), then
published through the session's file system (``dpspark.spark.fs``): a path without a scheme
means what it means to Spark (dbfs:/ on Databricks, HDFS on YARN, file:/ in local mode), never
the driver's local disk by accident. Two ways:

* a **new output** (``ReportOutput(...)``): the output is checked before any work (no overlap
  with the inputs, an existing one replaced only when it is an earlier dpspark output and
  ``mode`` is ``overwrite``); ``commit(manifest)`` writes the files into a hidden stage beside
  the output, the manifest last, and moves the stage into place under the output's lock
  (``io.publish``, the commit of a full release too);
* **files beside an existing output** (``ReportOutput.beside(...)``: calibrate beside the
  privacy-stats output it read): ``commit()`` writes them into that output under its lock, each
  file atomically, after checking that its manifest is the one read at the start (the files
  describe that output, not one that replaced it meanwhile); the output's own manifest is left
  as it is.

Whatever fails, the stage and the scratch directory are removed: a failed run leaves no new
output directory behind, and beside an existing output no part of its files.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpspark.errors import ConfigError, InputDataError, OutputError
from dpspark.prepare import local_writes
from dpspark.scratch import scratch_dir
from dpspark.spark import io
from dpspark.spark.fs import FileSystem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class ReportOutput:
    """Checks an output directory before any work; ``commit`` publishes the local directory there.

    Use as a context manager: on an exception the stage and the scratch directory go.

    Attributes:
        fs: the session's file system.
        paths: the resolved output (and inputs).
        run_id: this run's id (names the stage and the lock's holder).
        local: the scratch directory on the driver to write the report's files into (flat:
            its files, not its subdirectories, are published).
    """

    def __init__(
        self,
        spark: SparkSession | None,
        input_path: str | None,
        output: str | None,
        mode: str,
        what: str,
        sources: list[str] | None = None,
        command: str | None = None,
        writes: dict[str, Any] | None = None,
    ) -> None:
        if not output:
            raise ConfigError(f"output: give the directory for the {what} (--output DIR)")
        self._start(spark, input_path, output, sources, what, command)
        self.paths.check_overlap()
        io.check_writes(self.fs, self.paths.inputs, writes or {})
        self.existed = self.paths.check_output(mode, partitioned=False)
        self.paths.remove_stale()
        self.stage: str | None = self.paths.stage_name(self.run_id)
        self._scratch()

    @classmethod
    def beside(cls, spark: SparkSession, output: str, what: str, names: Sequence[str], fix: str) -> ReportOutput:
        """Files added to the existing dpspark output ``output``, checked before any work.

        Args:
            output: an earlier dpspark output (a directory holding its manifest).
            what: what the files are, for messages ("calibration").
            names: every file name this report may put there, in the order they are written. A
                commit writes the local files among them and removes the others (an earlier
                report's files that this one does not write), so the output never holds a mix.
            fix: what ``output`` must be, for the message when it is not (``--stats must be a
                privacy-stats output directory``).

        Raises:
            InputDataError: ``output`` is not a dpspark output.
            OutputError: it cannot be written.
        """
        out = cls.__new__(cls)
        out._start(spark, None, output, None, what)
        out.existed, out.stage, out._names = True, None, tuple(names)
        manifest = f"{out.paths.output}/{io.MANIFEST}"
        if not out.fs.is_dir(out.paths.output) or not out.fs.exists(manifest):
            raise InputDataError(f"{output} is not a dpspark output (no {io.MANIFEST} there): {fix}")
        joined = out.fs.read_text(manifest)
        try:
            out.fs.check_writable(out.paths.output)
        except OSError as exc:
            raise OutputError(f"the {what} cannot be written into {output}: {exc}; make it writable") from None
        out._joined = joined
        out._scratch()
        return out

    @property
    def is_new(self) -> bool:
        """True for a new output (``commit`` takes its manifest); False beside an existing one."""
        return self._joined is None

    def _start(
        self,
        spark: SparkSession | None,
        input_path: str | None,
        output: str,
        sources: list[str] | None,
        what: str,
        command: str | None = None,
    ) -> None:
        self.fs = FileSystem(spark)
        self.paths = io.Paths(self.fs, input_path, output, sources, command)
        self.run_id = io.new_run_id()
        self.what = what
        self._joined: str | None = None  # beside an output: its manifest as read at the start
        self._names: tuple[str, ...] = ()

    def _scratch(self) -> None:
        """The scratch directory, made once the output passed its checks (a refusal leaves none)."""
        self.local = scratch_dir() / f"report-{self.run_id}"
        self.local.mkdir()

    def __enter__(self) -> ReportOutput:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None and self.stage is not None:
            self.fs.remove(self.stage)
        self.close()

    def close(self) -> None:
        """Remove the scratch directory (``__exit__`` does it)."""
        shutil.rmtree(self.local, ignore_errors=True)

    def _files(self) -> list[Path]:
        return sorted(p for p in Path(self.local).iterdir() if p.is_file())

    def commit(self, manifest: dict[str, Any] | None = None) -> None:
        """Publish the files of ``local``.

        A new output: every file, then ``manifest`` (required), into the stage, moved into place
        as a whole (``io.publish``). Beside an existing output (``beside``; no ``manifest``):
        under the output's lock, its manifest checked unchanged, each file written atomically in
        the order of ``names`` and the other ``names`` removed; a failure removes every one of
        ``names``.
        """
        if self.is_new:
            if manifest is None:
                raise TypeError("commit(manifest): a new output needs its manifest")
            files = ((f.name, f.read_bytes()) for f in self._files())
            io.publish(self.fs, self.paths, self.stage, files, manifest, self.existed, self.run_id)
            return
        if manifest is not None:
            raise TypeError("commit(): files beside an output leave its manifest as it is")
        local = {f.name: f for f in self._files()}
        unknown = sorted(set(local) - set(self._names))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} not among the {self.what} files {', '.join(self._names)}")
        out = self.paths.output
        with self.paths.lock(self.run_id):
            try:
                now = self.fs.read_text(f"{out}/{io.MANIFEST}")
            except Exception:  # noqa: BLE001 - OSError, or py4j's FileNotFoundException
                now = None
            if now != self._joined:
                raise OutputError(
                    f"{self.paths.output_given} was replaced by another run while this one ran: the {self.what} "
                    f"would describe the output it replaced, so nothing was written; run again"
                )
            try:
                for name in self._names:
                    if name in local:
                        self.fs.write_bytes(f"{out}/{name}", local[name].read_bytes())
                    elif self.fs.exists(f"{out}/{name}"):
                        self.fs.remove(f"{out}/{name}")
            except BaseException:
                for name in self._names:
                    self.fs.remove(f"{out}/{name}")
                raise


MEASURES = {"privacy-stats": ("corpus", "statistics"), "privacy-risk": ("input", "risk estimate")}


def measure_output(spark: SparkSession | None, config: Any, command: str) -> ReportOutput:
    """The report output of privacy-stats or privacy-risk (``MEASURES``: the input it reads, what it writes), on
    either engine: ``spark`` None is the local engine's, through the local file system."""
    source, what = MEASURES[command]
    return ReportOutput(
        spark, getattr(config, source), config.output, config.mode, what, command=command, writes=local_writes(config)
    )
