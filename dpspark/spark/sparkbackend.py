"""``SparkBackend``: the runners' ``dpspark.run.backend.Backend`` over a Spark session (classic or Connect).

Each primitive is one Spark job or less: the labelled split's halves and their perturbed copies are
DataFrames (the copies persisted in memory only: they hold raw text, never on disk), the release's own
executor transform perturbs, the classifier's features are computed and scored on the executors (``Model``),
the field's text metrics are summed per Arrow batch on the executors, and the privacy-risk engine's tasks run
(``run_items``, ``keep``: ``dpspark.spark.backend``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from scipy import sparse

from dpspark.config import PerturbConfig
from dpspark.engine import classification, logreg
from dpspark.progress import Progress, describe
from dpspark.run.backend import Classifier, pack, unpack
from dpspark.run.compare import TEXT_SUMS, text_sums
from dpspark.run.risk import doc_exposure_rows, doc_exposures_of
from dpspark.run.settings import LABEL, ORIGINAL, TEXT
from dpspark.spark import backend, io, resources
from dpspark.spark.fs import FileSystem
from dpspark.spark.perturb import check_columns, check_unit_column, vocabulary_from_corpus
from dpspark.spark.session import is_connect
from dpspark.spark.transform import (
    count_columns,
    map_in_arrow,
    perturb,
    quote,
    token_counts,
    unit_counts,
    with_segments,
)
from dpspark.stats import WorkItem
from dpspark.text import decode_strings, length_counts
from dpspark.unit_table import SEGMENT, Counts, Walk
from dpspark.units import PrivacyUnit

# The training half's blocks are fitted in the driver's process up to this many bytes of features (about
# 2.5 million tokens); a larger half is fitted where it is, one Spark job per step of the optimiser.
DRIVER_FIT_BYTES = 32 << 20


def _pack_block(raw: logreg.Block) -> bytes:
    x, y = raw
    if isinstance(x, np.ndarray):
        return pack(x, y)
    return pack(x.indptr, x.indices, x.data, y)


def _unpack_block(data: bytes) -> logreg.Block:
    arrays = unpack(data)
    if len(arrays) == 2:
        return arrays[0], arrays[1]
    indptr, indices, values, y = arrays
    return sparse.csr_matrix((values, indices, indptr), shape=(len(y), logreg.HASHING_FEATURES)), y


def _block_batches(batches: Iterator[pa.RecordBatch], model: str, bundle: str) -> Iterator[pa.RecordBatch]:
    res = resources.resources(bundle) if model == "embedding-logreg" else None
    for b in batches:
        texts, labels = b.column(0).to_pylist(), b.column(1).to_numpy(zero_copy_only=False)
        raw = logreg.block(model, texts, labels, *((res.vectors, res.words) if res is not None else ()))
        yield pa.RecordBatch.from_pydict({"block": pa.array([_pack_block(raw)], pa.binary())})


def _each_block(work: Callable[[logreg.Block], list[np.ndarray]]):
    """An Arrow batch function: ``work``'s arrays of each packed block, packed (one row per block)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            for data in b.column(0).to_pylist():
                yield pa.RecordBatch.from_pydict({"part": pa.array([pack(*work(_unpack_block(data)))], pa.binary())})

    return run


PART = [T.StructField("part", T.BinaryType(), False)]


class Model:
    """The utility commands' classifier (``dpspark.engine.logreg``) over Spark: each Arrow batch of the data
    becomes a block of feature rows on the executors; a training half of at most ``DRIVER_FIT_BYTES`` of
    blocks is fitted on the driver (the same fit as the local backend's), a larger one where it is (each
    step of the optimiser sums the blocks' partial loss and gradient); scoring runs on the executors and
    only the classification counts reach the driver."""

    def __init__(self, name: str, n_classes: int, driver_fit_bytes: int | None = None) -> None:
        self.name, self.n_classes = name, n_classes
        self.driver_fit_bytes = DRIVER_FIT_BYTES if driver_fit_bytes is None else driver_fit_bytes

    def params(self) -> dict[str, Any]:
        return logreg.params(self.name)

    def _blocks(self, data: DataFrame, bundle: str) -> DataFrame:
        name = self.name
        fields = [T.StructField("block", T.BinaryType(), False)]
        return map_in_arrow(data.select(TEXT, LABEL), lambda it: _block_batches(it, name, bundle), fields)

    def fit(self, train: DataFrame, bundle: str) -> logreg.Fitted:
        blocks = self._blocks(train, bundle).persist(StorageLevel.MEMORY_ONLY)
        try:
            size = blocks.agg(F.sum(F.length("block")).alias("n")).first()["n"] or 0
            if size <= self.driver_fit_bytes:
                return logreg.fit_held([_unpack_block(r["block"]) for r in blocks.collect()], self.n_classes)
            return self._fit_where_it_is(blocks)
        finally:
            blocks.unpersist()

    @staticmethod
    def _fold(blocks: DataFrame, work: Callable[[logreg.Block], list[np.ndarray]]) -> list[np.ndarray]:
        """The sum over the blocks of ``work``'s arrays, each block's computed on the executors."""
        parts = [unpack(r["part"]) for r in map_in_arrow(blocks, _each_block(work), PART).collect()]
        return [np.sum(column, axis=0) for column in zip(*parts)]

    def _fit_where_it_is(self, blocks: DataFrame) -> logreg.Fitted:
        n_classes = self.n_classes
        rows, df = self._fold(blocks, lambda raw: [np.array(len(raw[1])), _df_of(raw[0])])
        idf_ = None if self.name == "embedding-logreg" else logreg.idf(df, int(rows))

        def total(flat: np.ndarray) -> tuple[float, np.ndarray]:
            def step(raw: logreg.Block) -> list[np.ndarray]:
                loss, grad = logreg.loss_grad(logreg.weighted(raw[0], idf_), raw[1], flat, n_classes)
                return [np.array(loss), grad]

            loss, grad = self._fold(blocks, step)
            return float(loss), grad

        return logreg.fit(total, int(rows), int(df.shape[0]), n_classes, idf_)

    def counts(self, fitted: logreg.Fitted, test: DataFrame, bundle: str) -> classification.Counts:
        """The classification combiner's table of ``test`` (``dpspark.engine.classification``): each block's
        counts computed on the executors; only the counts reach the driver."""

        def counted(raw: logreg.Block) -> list[np.ndarray]:
            table = classification.create(*logreg.scored(fitted, raw))
            y, p, s = zip(*table) if table else ((), (), ())
            score = np.array([np.nan if v is None else v for v in s], dtype=np.float64)
            return [np.array(y, np.int64), np.array(p, np.int64), score, np.array(list(table.values()), np.int64)]

        counts = classification.Counts()
        for r in map_in_arrow(self._blocks(test, bundle), _each_block(counted), PART).collect():
            y, p, s, c = unpack(r["part"])
            scores = [None if np.isnan(v) else v for v in s.tolist()]
            classification.merge(counts, classification.from_rows(zip(y.tolist(), p.tolist(), scores, c.tolist())))
        return counts

    def score(self, fitted: logreg.Fitted, test: DataFrame, bundle: str) -> dict[str, float]:
        """The metrics of ``test`` and its majority-class rate (``classification.majority``): the accuracy
        that a model which learned nothing scores on the same rows."""
        counts = self.counts(fitted, test, bundle)
        return {**classification.finish(counts, self.n_classes), **classification.majority(counts)}


def _df_of(x: Any) -> np.ndarray:
    """A block's document frequencies (tfidf) or, for mean vectors, a zero array of their width."""
    return np.zeros(x.shape[1]) if isinstance(x, np.ndarray) else logreg.document_frequency(x)


class SparkBackend:
    """The ``Backend`` primitives over ``spark``, for the run ``run_id`` (its jobs' group)."""

    def __init__(self, spark: SparkSession, run_id: str) -> None:
        self.spark, self.run_id = spark, run_id

    def describe(self, command: str, step: str) -> None:
        describe(self.spark, command, step, self.run_id, connect=is_connect(self.spark))

    def cores(self) -> int:
        return backend.cores(self.spark)

    def ship(self, write: Callable[[Path], object]) -> resources.Shipment:
        return resources.ship(self.spark, write)

    def rows(self, data: DataFrame) -> int:
        return data.count()

    def texts(self, data: DataFrame, column: str, n: int) -> list[str | None]:
        return [r[0] for r in data.select(column).limit(n).collect()]

    def token_counts(self, data: DataFrame, column: str) -> dict[str, int]:
        with io.SqlConf(self.spark, shuffle_settings(self.spark)):
            return token_counts(data, column)

    def length_counts(self, data: DataFrame, columns: list[str]) -> dict[int, int]:
        """Tokens in a row (over ``columns`` together) → rows, counted per Arrow batch on the executors; only the
        counts reach the driver."""

        def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                counted = length_counts(b, b.schema.names)
                yield pa.RecordBatch.from_pydict({"n": list(counted), "rows": list(counted.values())})

        fields = [T.StructField("n", T.LongType()), T.StructField("rows", T.LongType())]
        total: dict[int, int] = {}
        for r in map_in_arrow(data.select(*map(quote, columns)), run, fields).collect():
            total[int(r["n"])] = total.get(int(r["n"]), 0) + int(r["rows"])
        return total

    def person_counts(self, data: DataFrame, columns: list[str], column: str, job_key: bytes) -> Counts:
        return unit_counts(data, column, columns, job_key)

    def perturbed(
        self,
        data: DataFrame,
        bundle: str,
        key: bytes,
        keep: bool = False,
        vocabulary_only: bool = False,
        walk: Walk | None = None,
    ) -> DataFrame:
        """Persisted in memory only: a perturbed copy holds the raw text beside it (``keep``), never on disk."""
        run_id = io.new_run_id()
        out = perturb(data, bundle, key, [TEXT], keep, run_id, vocabulary_only=vocabulary_only, walk=walk)
        return out.drop(*count_columns(run_id)).persist(StorageLevel.MEMORY_ONLY)

    def without(self, data: DataFrame, column: str) -> DataFrame:
        return data.drop(column)

    def release(self, data: DataFrame) -> None:
        data.unpersist()

    def classifier(self, name: str, n_classes: int) -> Classifier:
        return Model(name, n_classes)

    def text_metric_sums(
        self, noisy: DataFrame, bundle: str, rare: frozenset[str], first: int | None, aligned: bool
    ) -> np.ndarray:
        return text_metric_sums(noisy, bundle, rare, first, aligned)

    bundle = staticmethod(resources.resources)
    shipped_array = staticmethod(backend.shipped_array)

    def nw_sw(self, items: list[WorkItem], job_key: bytes, bundle: str) -> dict:
        return backend.spark_per_word(self.spark, items, job_key, bundle)

    def corpus(self, path: str, columns: list[str], unit: PrivacyUnit | None = None) -> DataFrame:
        df = io.read_input(self.spark, FileSystem(self.spark), path, None)
        check_columns(df, PerturbConfig(columns=columns, epsilon=1.0))
        ids = [] if unit is None or unit.column is None else [unit.column]
        if ids:  # a person's rows with their read segments (with_segments): a cap counts in the files' order
            check_unit_column(df, unit)
            df = with_segments(df)
            ids += [c for c in SEGMENT if c in df.columns]
        return df.select(*map(quote, [*columns, *ids]))

    def corpus_vocabulary(self, path: str, columns: list[str], size: int, in_vocabulary: dict[str, int]) -> list[str]:
        return vocabulary_from_corpus(self.corpus(path, columns), columns, size, in_vocabulary)

    def ship_arrays(self, arrays: dict[str, np.ndarray]) -> str:
        return backend.ship_arrays(self.spark, arrays)

    def run_items(
        self, items: Sequence[Any], work: Callable[[Any], list[bytes]], progress: Progress | None = None
    ) -> list[tuple[int, bytes]]:
        return backend.run_items(self.spark, items, work, progress)

    def keep(
        self, items: Sequence[Any], draw: Callable[[int], bytes], progress: Progress | None = None
    ) -> backend.Kept:
        return backend.Kept.keep(self.spark, items, draw, progress)

    def doc_exposures(
        self,
        data: DataFrame,
        column: str,
        index: dict[str, int],
        sensitive: set[int],
        bundle: str,
        settings: list[int],
        runs: int,
        job_key: bytes,
    ) -> dict[int, tuple[list[float], bool]]:
        """Per setting: the exposure of every row holding a sensitive word (``risk.doc_exposure``), computed
        on the executors from the shipped bundle's mechanisms, and whether it is exact. A row's draws come
        from ``batch_generator(key, row id, setting)`` under a key of their own (derived from ``job_key``), the
        row id ``monotonically_increasing_id`` (stable for the same input files). Only the exposures (numbers
        per row, no text) reach the driver."""

        def rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            mechs = resources.resources(bundle).mechanisms()
            for b in batches:
                texts, ids = decode_strings(b.column(0))[0], b.column(1).to_pylist()
                out = doc_exposure_rows(texts, ids, index, sensitive, mechs, settings, runs, job_key)
                yield pa.RecordBatch.from_pydict(
                    {
                        "setting": pa.array(out["setting"], pa.int64()),
                        "exposure": pa.array(out["exposure"], pa.float64()),
                        "exact": pa.array(out["exact"], pa.bool_()),
                    }  # fmt: skip
                )

        fields = [
            T.StructField("setting", T.LongType()),
            T.StructField("exposure", T.DoubleType()),
            T.StructField("exact", T.BooleanType()),
        ]
        text = data.select(F.col(quote(column)), F.monotonically_increasing_id().alias("__row"))
        found = map_in_arrow(text, rows, fields).collect()
        return doc_exposures_of([{k: [r[k] for r in found] for k in ("setting", "exposure", "exact")}], settings)


# --- the field's text metrics, on the executors -------------------------------------------------------


def _metric_batches(
    batches: Iterator[pa.RecordBatch], bundle: str, rare: frozenset[str], first: int | None, aligned: bool
) -> Iterator[pa.RecordBatch]:
    """One row of partial sums per Arrow batch of (perturbed text, original text)."""
    res = resources.resources(bundle)
    for b in batches:
        sums = text_sums(res, b.column(0).to_pylist(), b.column(1).to_pylist(), rare, first, aligned)
        names = [f"{name}_{i}" for name in TEXT_SUMS for i in (0, 1)]
        yield pa.RecordBatch.from_pydict({n: [float(v)] for n, v in zip(names, sums)})


def text_metric_sums(
    noisy: DataFrame, bundle: str, rare: frozenset[str], first: int | None, aligned: bool = True
) -> np.ndarray:
    """The (numerator, denominator) sums of PP, LOW, CS and the dictionary share over ``noisy``'s rows
    (its ``text`` perturbed, ``text_original`` the input), as one array of 2·len(TEXT_SUMS). ``aligned``:
    one output token per input token (every mechanism but SynTF's documents, compared as bags of words)."""
    names = [f"{name}_{i}" for name in TEXT_SUMS for i in (0, 1)]
    fields = [T.StructField(n, T.DoubleType(), False) for n in names]
    sums = map_in_arrow(
        noisy.select(TEXT, ORIGINAL), lambda it: _metric_batches(it, bundle, rare, first, aligned), fields
    ).agg(*[F.sum(n).alias(n) for n in names])
    row = sums.first()
    return np.array([row[n] or 0.0 for n in names], dtype=np.float64)


def shuffle_settings(spark: SparkSession) -> dict[str, str]:
    """Few shuffle partitions: the count tables are small (words × distinct outputs), and Spark's
    default of 200 makes every stage of the attack hundreds of tasks."""
    return {"spark.sql.shuffle.partitions": str(max(4, 2 * backend.cores(spark)))}
