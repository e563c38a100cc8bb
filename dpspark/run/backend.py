"""What a runner asks of the engine that holds the data: the ``Backend`` protocol.

A runner (``dpspark.run``) never touches a DataFrame: it holds opaque handles to data the backend read or
made (``Data``: the labelled split's halves, their perturbed copies, the corpus) and asks the backend for
the few things that need the data itself. ``dpspark.spark.backend.SparkBackend`` implements it over a
Spark session; the figures a runner computes from these answers are the backend's to fold, not to change.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dpspark.npy import load_npy
from dpspark.progress import Progress
from dpspark.unit_table import Counts, Walk
from dpspark.units import PrivacyUnit

Data = Any  # a backend's handle to a table (a DataFrame for Spark): a runner only passes it back


def pack(*arrays: np.ndarray) -> bytes:
    """Arrays as bytes (``unpack`` reads them back): what a task's work returns, ``np.save`` one after
    another, no pickle."""
    buf = io.BytesIO()
    for a in arrays:
        np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def unpack(data: bytes) -> list[np.ndarray]:
    buf, out = io.BytesIO(data), []
    while buf.tell() < len(data):
        out.append(load_npy(buf, allow_pickle=False))
    return out


class Files(Protocol):
    """Paths as the engine resolves them (dbfs:/ on Databricks, HDFS on YARN): what a runner reads of
    earlier outputs."""

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def read_bytes(self, path: str) -> bytes: ...


class Shipment(Protocol):
    """A bundle sent to where the data is: ``name`` is what the executors' side reads it by."""

    name: str

    def close(self) -> None: ...


class Classifier(Protocol):
    """The command's classifier (``--model``): trained and scored where the data is."""

    def params(self) -> dict[str, Any]: ...  # what the manifest states of it

    def fit(self, data: Data, bundle: str) -> Any: ...  # a fitted model, the backend's own object

    def score(self, fitted: Any, data: Data, bundle: str) -> dict[str, float]: ...  # metrics, majority rate


class Kept(Protocol):
    """A payload per item kept where it was drawn between passes (an engine's state that never travels to
    the driver: ``dpspark.engine.fitted_attack``). The works must be deterministic: a backend may
    recompute a lost payload."""

    def update(self, work: Callable[[int, bytes], bytes], progress: Progress | None = None) -> Kept: ...

    def collect(
        self, work: Callable[[int, bytes], list[bytes]], progress: Progress | None = None
    ) -> list[tuple[int, bytes]]: ...  # (item, payload) of every payload work(item, kept) returns, in item order

    def release(self) -> None: ...


class Backend(Protocol):
    """The primitives the runners need. Each reads or makes data where it lives and returns plain
    Python (numbers, dicts, lists) or a handle; nothing a primitive returns holds raw text unless its
    doc says so (``texts``: the report's examples, which the runner keeps out of every manifest)."""

    run_id: str

    def describe(self, command: str, step: str) -> None: ...  # names the work that follows (a UI, the logs)

    def cores(self) -> int: ...  # how many tasks run at once

    def ship(self, write: Callable[[Path], object]) -> Shipment: ...  # a bundle ``write(dir)`` makes

    def rows(self, data: Data) -> int: ...

    def texts(self, data: Data, column: str, n: int) -> list[str | None]: ...  # the first n values: raw text

    def token_counts(self, data: Data, column: str) -> dict[str, int]: ...  # tokenizer's tokens → occurrences

    def length_counts(self, data: Data, columns: list[str]) -> dict[int, int]: ...  # a row's tokens → rows (unit shape)

    def person_counts(self, data: Data, columns: list[str], column: str, job_key: bytes) -> Counts:
        """A ``column:`` unit's count pass over ``data`` (``dpspark.unit_table``): each partition's tokens over
        ``columns`` per keyed hash of ``column`` (``id_key(job_key)``), counted where the rows are: no id leaves
        a task."""

    def perturbed(
        self,
        data: Data,
        bundle: str,
        key: bytes,
        keep: bool = False,
        vocabulary_only: bool = False,
        walk: Walk | None = None,
    ) -> Data:
        """The release's transform of the text column (``keep``: the original beside it; ``walk``: a ``column:``
        unit's, over the bundle's unit table, ``dpspark.unit_table.Walk``)."""

    def without(self, data: Data, column: str) -> Data: ...

    def release(self, data: Data) -> None: ...  # a perturbed copy no longer needed

    def classifier(self, name: str, n_classes: int) -> Classifier: ...

    # The engines' tasks. A work function runs where the data is: it captures only small, picklable
    # values (spans, settings, names), loads what is big from a shipped bundle (``bundle``) or shipped
    # arrays (``shipped_array``), and returns ``pack``-ed arrays.

    bundle: Callable[[str], Any]  # where the work runs: a shipped bundle's resources (``dpspark.bundle``)
    shipped_array: Callable[[str, str], np.ndarray]  # where the work runs: an array of ``ship_arrays``

    def ship_arrays(self, arrays: dict[str, np.ndarray]) -> str: ...  # big inputs of the works, as files

    def nw_sw(self, items: list[Any], job_key: bytes, bundle: str) -> dict:
        """The Nw/Sw combiner (``dpspark.engine.nw_sw``) folded over the work items where they are drawn:
        (setting, word) → (Nw, Sw, K)."""

    def corpus(self, path: str, columns: list[str], unit: PrivacyUnit | None = None) -> Data:
        """A corpus Parquet's text ``columns`` (checked), and a ``column:`` unit's id column (checked) beside them."""

    def corpus_vocabulary(self, path: str, columns: list[str], size: int, in_vocabulary: dict[str, int]) -> list[str]:
        """The ``size`` most frequent words of ``in_vocabulary`` in the text ``columns`` of the input at ``path``."""

    def run_items(
        self, items: Sequence[Any], work: Callable[[Any], list[bytes]], progress: Progress | None = None
    ) -> list[tuple[int, bytes]]: ...  # (item index, payload) of every payload work(items[i]) returns

    def keep(self, items: Sequence[Any], draw: Callable[[int], bytes], progress: Progress | None = None) -> Kept: ...

    def doc_exposures(
        self,
        data: Data,
        column: str,
        index: dict[str, int],
        sensitive: set[int],
        bundle: str,
        settings: list[int],
        runs: int,
        job_key: bytes,
    ) -> dict[int, tuple[list[float], bool]]:
        """Per setting: the exposure of every row of ``data`` holding a sensitive word (``risk.doc_exposure``)
        and whether it is exact; only numbers leave the rows."""

    def text_metric_sums(self, noisy: Data, bundle: str, rare: frozenset[str], first: int | None, aligned: bool) -> Any:
        """The field's text metrics' (numerator, denominator) sums over a perturbed copy kept with its original
        (``dpspark.evaluation.field_metrics``)."""
