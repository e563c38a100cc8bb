"""Shipping a bundle to the executors, and the executors' one bounded cache.

Driver side: ``ship(spark, write)`` writes a bundle (``dpspark.bundle``) into a fresh
directory under this process's scratch directory (``dpspark.scratch``), zips it, hands the archive to Spark
(``SparkContext.addArchive``, or a session artifact on Spark Connect), and removes the
unzipped directory at once. The archive itself must stay while the session lives
(Spark re-checks every archive it was given before each task), so it is removed with
the scratch directory when the process exits: kilobytes with the default embedding,
which executors load from the installed package. The scratch directory of a process that died without cleaning up is
removed by the next dpspark process on that machine.

Executor side: ``resources(name)`` loads a bundle once per Python worker into a
module-level LRU cache (Spark reuses Python workers, and this module is imported, not
pickled, so the cache survives across tasks). At most ``MAX_BUNDLES`` bundles and
``MAX_EMBEDDINGS`` embeddings are held: a notebook that calls ``perturb_text`` many
times does not grow its workers without bound. Bundles of one embedding share its
words (the largest object).
"""

from __future__ import annotations

import shutil
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from dpspark.bundle import Resources
from dpspark.bundle import cached as cached_bundle
from dpspark.scratch import scratch_dir
from dpspark.spark.session import is_connect

MAX_BUNDLES = 2
MAX_EMBEDDINGS = 2

_bundles: OrderedDict[str, Resources] = OrderedDict()
_embeddings: OrderedDict[str, tuple] = OrderedDict()


@dataclass
class Shipment:
    """A shipped bundle: ``name`` is what executors pass to ``resources``."""

    name: str
    archive: Path

    def close(self) -> None:
        """Nothing to do while the session lives: Spark re-checks every archive it was given
        before each task (``Executor.updateDependencies``), so a removed archive would fail the
        session's later jobs. The archive (kilobytes with the default embedding) goes with the
        scratch directory when the process exits."""


def ship(spark: SparkSession, write: Callable[[Path], object]) -> Shipment:
    """Write a bundle with ``write(directory)`` and send it to every executor."""
    directory = scratch_dir() / f"dpspark-bundle-{uuid.uuid4().hex}"
    try:
        write(directory)
        archive = Path(shutil.make_archive(str(directory), "zip", root_dir=directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    try:
        if is_connect(spark):
            spark.addArtifacts(str(archive), archive=True)
        else:
            spark.sparkContext.addArchive(str(archive))
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return Shipment(archive.name, archive)


def _located(name: str) -> str:
    from pyspark import SparkFiles

    from dpspark._blas import one_thread

    one_thread()
    return SparkFiles.get(name)


def resources(name: str) -> Resources:
    """The worker's cached resources of the shipped bundle ``name`` (loaded on first use)."""
    return cached_bundle(name, lambda: _located(name), _bundles, _embeddings, MAX_BUNDLES, MAX_EMBEDDINGS)


def cached() -> tuple[int, int]:
    """(bundles, embeddings) held by this process's cache (for tests)."""
    return len(_bundles), len(_embeddings)
