"""``LocalBackend``: the runners' ``dpspark.run.backend.Backend`` in this process, with pyarrow and numpy: no
JVM, no pyspark.

A table is a ``pyarrow.Table``; a shipped bundle is a directory under the scratch directory, loaded once
(``dpspark.bundle.cached``: at most two bundles and two embeddings held, as on an executor); the engines'
tasks run one after another in this process with the same work functions, item keys and payloads as on
Spark, so for a seed the figures are Spark's: the draws are keyed by item, never by where an item runs.
Per-document exposures key a row's draws by its position in the table (Spark: by
``monotonically_increasing_id``, the same numbers for an input read as one partition).
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpspark.bundle import Resources, cached
from dpspark.engine import classification, logreg, nw_sw
from dpspark.npy import load_npy
from dpspark.progress import Progress
from dpspark.run.compare import text_sums
from dpspark.run.inputs import column_kinds, read_local, select_columns
from dpspark.run.risk import doc_exposure_rows, doc_exposures_of
from dpspark.run.settings import LABEL, ORIGINAL, TEXT
from dpspark.run.transform import perturb_partition
from dpspark.scratch import scratch_dir
from dpspark.text import count_column_tokens, count_tokens, decode_strings, length_counts, most_frequent
from dpspark.unit_table import Counts, Walk, counted, id_key, partition_counts
from dpspark.units import PrivacyUnit, check_unit_column

log = logging.getLogger("dpspark")

BATCH_ROWS = 10_000  # rows per batch of the release's transform: Spark's Arrow batches in a session dpspark starts
_bundles: OrderedDict[str, Resources] = OrderedDict()
_embeddings: OrderedDict[str, tuple] = OrderedDict()


def local_bundle(directory: str) -> Resources:
    """The resources of the bundle written into ``directory`` (loaded on first use, then cached)."""
    return cached(directory, lambda: directory, _bundles, _embeddings)


def local_array(directory: str, key: str) -> np.ndarray:
    """The array ``key`` of the files ``LocalBackend.ship_arrays`` wrote into ``directory``."""
    return load_npy(Path(directory) / f"{key}.npy")


@dataclass
class LocalShipment:
    """A bundle written into a directory of this process's scratch directory: ``name`` is that directory."""

    name: str

    def close(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)
        _bundles.pop(self.name, None)


class LocalKept:
    """``Kept`` in this process: the payloads in a list."""

    def __init__(self, payloads: list[bytes]) -> None:
        self.payloads = payloads

    def update(self, work: Callable[[int, bytes], bytes], progress: Progress | None = None) -> LocalKept:
        return LocalKept([p for _, p in _each(len(self.payloads), lambda i: [work(i, self.payloads[i])], progress)])

    def collect(
        self, work: Callable[[int, bytes], list[bytes]], progress: Progress | None = None
    ) -> list[tuple[int, bytes]]:
        return _each(len(self.payloads), lambda i: work(i, self.payloads[i]), progress)

    def release(self) -> None:
        self.payloads = []


def _each(n: int, work: Callable[[int], list[bytes]], progress: Progress | None) -> list[tuple[int, bytes]]:
    """(i, payload) of every payload ``work(i)`` returns, i = 0 … n − 1 in order, with progress."""
    out: list[tuple[int, bytes]] = []
    for i in range(n):
        out += [(i, p) for p in work(i)]
        if progress is not None:
            progress.report(i + 1, (i + 1) / n)
    return out


class LocalClassifier:
    """The utility commands' classifier (``dpspark.engine.logreg``) over a table in this process: the same
    blocks, fit and counts as Spark's driver fit of the same rows."""

    def __init__(self, name: str, n_classes: int) -> None:
        self.name, self.n_classes = name, n_classes

    def params(self) -> dict[str, Any]:
        return logreg.params(self.name)

    def _block(self, data: pa.Table, bundle: str) -> logreg.Block:
        res = local_bundle(bundle) if self.name == "embedding-logreg" else None
        embedding = () if res is None else (res.vectors, res.words)
        labels = np.asarray(data.column(LABEL).to_pylist(), dtype=np.float64)
        return logreg.block(self.name, data.column(TEXT).to_pylist(), labels, *embedding)

    def fit(self, data: pa.Table, bundle: str) -> logreg.Fitted:
        return logreg.fit_held([self._block(data, bundle)], self.n_classes)

    def score(self, fitted: logreg.Fitted, data: pa.Table, bundle: str) -> dict[str, float]:
        counts = classification.create(*logreg.scored(fitted, self._block(data, bundle)))
        return {**classification.finish(counts, self.n_classes), **classification.majority(counts)}


class LocalBackend:
    """The ``Backend`` primitives over pyarrow tables in this process (see the module docstring)."""

    bundle = staticmethod(local_bundle)
    shipped_array = staticmethod(local_array)

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.shipments: list[LocalShipment] = []

    def describe(self, command: str, step: str) -> None:
        log.debug("dpspark %s: %s", command, step)

    def cores(self) -> int:
        return 1  # the tasks run one after another here

    def ship(self, write: Callable[[Path], object]) -> LocalShipment:
        directory = scratch_dir() / f"dpspark-bundle-{uuid.uuid4().hex}"
        try:
            write(directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        shipment = LocalShipment(str(directory))
        self.shipments.append(shipment)
        return shipment

    def close(self) -> None:
        """Remove every bundle and array this backend wrote (``with LocalBackend(...)`` does it)."""
        for s in self.shipments:
            s.close()
        self.shipments = []

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rows(self, data: pa.Table) -> int:
        return data.num_rows

    def texts(self, data: pa.Table, column: str, n: int) -> list[str | None]:
        return data.column(column).slice(0, n).to_pylist()

    def token_counts(self, data: pa.Table, column: str) -> dict[str, int]:
        return dict(count_tokens(data.column(column)))

    def length_counts(self, data: pa.Table, columns: list[str]) -> dict[int, int]:
        return length_counts(data, columns)

    def person_counts(self, data: pa.Table, columns: list[str], column: str, job_key: bytes) -> Counts:
        return counted([partition_counts(data.to_batches(), column, columns, id_key(job_key))])

    def corpus(self, path: str, columns: list[str], unit: PrivacyUnit | None = None) -> pa.Table:
        if unit is None or unit.column is None:
            return read_local(path, columns)
        table = read_local(path)  # read once: the id column checked with every column's type, then the text's
        check_unit_column(*column_kinds(table), unit)
        return select_columns(table, path, [*columns, unit.column])

    def classifier(self, name: str, n_classes: int) -> LocalClassifier:
        return LocalClassifier(name, n_classes)

    def perturbed(
        self,
        data: pa.Table,
        bundle: str,
        key: bytes,
        keep: bool = False,
        vocabulary_only: bool = False,
        walk: Walk | None = None,
    ) -> pa.Table:
        """The release's transform of the text column in this process (``dpspark.run.transform``): the table as
        one partition in batches of ``BATCH_ROWS`` (Spark's Arrow batches of a one-task input), batch i drawing
        from ``batch_generator(key, 0, i)``, so a one-task Spark run draws the same."""
        batches = list(
            perturb_partition(
                data.to_batches(max_chunksize=BATCH_ROWS),
                lambda: local_bundle(bundle),
                0,
                key,
                [TEXT],
                keep,
                [],
                vocabulary_only=vocabulary_only,
                walk=walk,
            )
        )
        if not batches:
            return data.append_column(ORIGINAL, data.column(TEXT)) if keep else data
        return pa.Table.from_batches(batches)

    def without(self, data: pa.Table, column: str) -> pa.Table:
        return data.drop([column])

    def release(self, data: pa.Table) -> None:
        return None  # nothing held but the table itself

    def text_metric_sums(
        self, noisy: pa.Table, bundle: str, rare: frozenset[str], first: int | None, aligned: bool
    ) -> np.ndarray:
        res = local_bundle(bundle)
        return text_sums(res, noisy.column(TEXT).to_pylist(), noisy.column(ORIGINAL).to_pylist(), rare, first, aligned)

    def ship_arrays(self, arrays: dict[str, np.ndarray]) -> str:
        def write(directory: Path) -> None:
            directory.mkdir(parents=True, exist_ok=True)
            for key, array in arrays.items():
                np.save(directory / f"{key}.npy", array)

        return self.ship(write).name

    def run_items(
        self, items: Sequence[Any], work: Callable[[Any], list[bytes]], progress: Progress | None = None
    ) -> list[tuple[int, bytes]]:
        items = list(items)
        return _each(len(items), lambda i: work(items[i]), progress)

    def keep(self, items: Sequence[Any], draw: Callable[[int], bytes], progress: Progress | None = None) -> LocalKept:
        return LocalKept([p for _, p in _each(len(items), lambda i: [draw(i)], progress)])

    def nw_sw(self, items: list[Any], job_key: bytes, bundle: str) -> dict:
        progress = Progress("privacy-stats", len(items), "items")
        mechanisms = local_bundle(bundle).mechanisms()
        pairs: nw_sw.Pairs = {}
        for done, item in enumerate(items, 1):
            nw_sw.merge(pairs, nw_sw.create(item, job_key, mechanisms))
            progress.report(done, done / len(items))
        return nw_sw.finish(pairs)

    def doc_exposures(
        self,
        data: pa.Table,
        column: str,
        index: dict[str, int],
        sensitive: set[int],
        bundle: str,
        settings: list[int],
        runs: int,
        job_key: bytes,
    ) -> dict[int, tuple[list[float], bool]]:
        texts = decode_strings(data.column(column).combine_chunks())[0]
        mechs = local_bundle(bundle).mechanisms()
        rows = doc_exposure_rows(texts, range(len(texts)), index, sensitive, mechs, settings, runs, job_key)
        return doc_exposures_of([rows], settings)

    def corpus_vocabulary(self, path: str, columns: list[str], size: int, in_vocabulary: dict[str, int]) -> list[str]:
        return most_frequent(count_column_tokens(self.corpus(path, columns), columns), in_vocabulary, size)
