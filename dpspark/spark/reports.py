"""Report outputs of the Spark evaluations (evaluate-utility, privacy-risk): all or nothing.

The files are made on the driver in a scratch directory, then written into a hidden
stage beside the output and moved into place with ``io.commit_stage``, manifest last,
exactly as ``privacy-stats`` commits. Whatever fails, the stage and the scratch
directory are removed: a failed run leaves no output directory behind.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from dpspark.errors import ConfigError
from dpspark.outputs import to_json
from dpspark.spark import io, resources
from dpspark.spark.fs import FileSystem


class ReportOutput:
    """Checks an output directory before any work; ``commit`` publishes a local directory there.

    Use as a context manager: on an exception the stage and the scratch directory go.
    """

    def __init__(
        self,
        spark: SparkSession,
        input_path: str | None,
        output: str | None,
        mode: str,
        what: str,
        sources: list[str] | None = None,
    ) -> None:
        if not output:
            raise ConfigError(f"output: give the directory for the {what} (--output DIR)")
        self.fs = FileSystem(spark)
        self.paths = io.Paths(self.fs, input_path, output, sources)
        self.paths.check_overlap()
        self.existed = self.paths.check_output(mode, partitioned=False)
        self.paths.remove_stale()
        self.run_id = io.new_run_id()
        self.stage = self.paths.stage_name(self.run_id)
        self.local = resources.scratch_dir() / f"report-{self.run_id}"
        self.local.mkdir()

    def __enter__(self) -> ReportOutput:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None:
            self.fs.remove(self.stage)
        shutil.rmtree(self.local, ignore_errors=True)

    def commit(self, manifest: dict[str, Any]) -> None:
        """Write every file of the local directory, then the manifest, then move the stage into place."""
        for f in sorted(p for p in Path(self.local).iterdir() if p.is_file()):
            self.fs.write_bytes(f"{self.stage}/{f.name}", f.read_bytes())
        self.fs.write_text(f"{self.stage}/{io.MANIFEST}", to_json(manifest))
        with self.paths.lock(self.run_id):
            io.commit_stage(self.fs, self.paths, self.stage, self.existed, self.run_id)
