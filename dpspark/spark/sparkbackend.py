"""``SparkBackend``: the runners' ``dpspark.run.backend.Backend`` over a Spark session (classic or Connect).

Each primitive is one Spark job or less: the labelled split's halves and their perturbed copies are
DataFrames (the copies persisted in memory only: they hold raw text, never on disk), the release's own
executor transform perturbs, MLlib trains and scores, the field's text metrics are summed per Arrow batch on
the executors, and the privacy-risk engine's tasks run (``run_items``, ``keep``: ``dpspark.spark.backend``).
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

from dpspark.arrow import numbers
from dpspark.config import PerturbConfig
from dpspark.engine import classification
from dpspark.evaluation import field_metrics as fm
from dpspark.progress import Progress, describe
from dpspark.run.backend import Classifier
from dpspark.run.compare import TEXT_SUMS
from dpspark.run.risk import doc_exposure_rows, doc_exposures_of
from dpspark.run.settings import LABEL, ORIGINAL, TEXT
from dpspark.spark import backend, io, resources
from dpspark.spark.fs import FileSystem
from dpspark.spark.perturb import check_columns, vocabulary_from_corpus
from dpspark.spark.session import is_connect
from dpspark.spark.transform import count_columns, map_in_arrow, mean_vectors, perturb, quote, token_counts
from dpspark.stats import WorkItem
from dpspark.text import TOKEN_PATTERN, decode_strings, tokenize

HASHING_FEATURES = 1 << 16
MAX_ITER = 100  # MLlib's default; the SMS spam baseline converges in ≈ 40 iterations
# A light L2 penalty on the unstandardized features: on SMS spam it keeps the baseline (0.98 accuracy,
# 0.99 AUC), converges in fewer iterations, and lets a model trained on heavily perturbed text fall back
# to the class prior instead of fitting the noise (unpenalized, train-time accuracy at ε = 2 fell to 0.6,
# below the majority class's 0.87).
REG_PARAM = 1e-3
STANDARDIZATION = False


def _mean_vector_batches(batches: Iterator[pa.RecordBatch], bundle: str) -> Iterator[pa.RecordBatch]:
    res = resources.resources(bundle)
    for b in batches:
        texts = b.column(0).to_pylist()
        x, _ = mean_vectors(texts, res.vectors, res.words)
        flat = numbers(x, np.float64)
        offsets = numbers(np.arange(0, x.size + 1, x.shape[1]), np.int32)
        yield pa.RecordBatch.from_arrays([pa.ListArray.from_arrays(offsets, flat), b.column(1)], ["vec", LABEL])


def mean_vector_features(df: DataFrame, bundle: str) -> DataFrame:
    """(features: mean embedding of the text's tokens, label): zero vector for a text without an embedded token."""
    from pyspark.ml.functions import array_to_vector

    schema = T.StructType(
        [T.StructField("vec", T.ArrayType(T.DoubleType(), False)), T.StructField(LABEL, T.DoubleType())]
    )
    arrays = df.select(TEXT, LABEL).mapInArrow(lambda it: _mean_vector_batches(it, bundle), schema)
    return arrays.select(array_to_vector("vec").alias("features"), LABEL)


class Model:
    """The MLlib pipeline of ``config.model``: ``fit(train)`` and ``predict(fitted, test)``."""

    def __init__(self, name: str, n_classes: int) -> None:
        self.name, self.n_classes = name, n_classes

    def _classifier(self) -> Any:
        from pyspark.ml.classification import LogisticRegression

        return LogisticRegression(
            featuresCol="features",
            labelCol=LABEL,
            maxIter=MAX_ITER,
            regParam=REG_PARAM,
            standardization=STANDARDIZATION,
        )

    def params(self) -> dict[str, Any]:
        p = {
            "classifier": "LogisticRegression",
            "max_iter": MAX_ITER,
            "reg_param": REG_PARAM,
            "standardization": STANDARDIZATION,
        }
        if self.name == "tfidf-logreg":
            p.update(tokenizer=f"RegexTokenizer({TOKEN_PATTERN})", hashing_features=HASHING_FEATURES, idf=True)
        else:
            p.update(features="mean embedding vector of the text's tokens (zero without an embedded token)")
        return p

    def fit(self, train: DataFrame, bundle: str) -> Any:
        from pyspark.ml import Pipeline
        from pyspark.ml.feature import IDF, HashingTF, RegexTokenizer

        if self.name == "tfidf-logreg":
            stages = [
                RegexTokenizer(inputCol=TEXT, outputCol="tokens", pattern=TOKEN_PATTERN, gaps=False),
                HashingTF(inputCol="tokens", outputCol="tf", numFeatures=HASHING_FEATURES),
                IDF(inputCol="tf", outputCol="features"),
                self._classifier(),
            ]
            return Pipeline(stages=stages).fit(train)
        return Pipeline(stages=[self._classifier()]).fit(mean_vector_features(train, bundle))

    def counts(self, fitted: Any, test: DataFrame, bundle: str) -> classification.Counts:
        """The classification combiner's table of ``test`` (``dpspark.engine.classification``), folded by
        the executors: (label, prediction, score) → rows, grouped and counted; only the counts reach the
        driver."""
        from pyspark.ml.functions import vector_to_array

        data = test if self.name == "tfidf-logreg" else mean_vector_features(test, bundle)
        score = vector_to_array("probability")[1] if self.n_classes == 2 else F.lit(None).cast("double")
        cols = [F.col(LABEL).alias("y"), F.col("prediction").alias("p"), score.alias("s")]
        rows = fitted.transform(data).select(*cols).groupBy("y", "p", "s").count().collect()
        return classification.from_rows(rows)

    def score(self, fitted: Any, test: DataFrame, bundle: str) -> dict[str, float]:
        """The metrics of ``test`` and its majority-class rate (``classification.majority``): the accuracy
        that a model which learned nothing scores on the same rows."""
        counts = self.counts(fitted, test, bundle)
        return {**classification.finish(counts, self.n_classes), **classification.majority(counts)}


def perturbed(df: DataFrame, bundle: str, key: bytes, keep: bool = False, vocabulary_only: bool = False) -> DataFrame:
    """``df`` with its text perturbed by the release's executor transform (``keep``: the original beside it;
    ``vocabulary_only``: no noise, each word its nearest vocabulary word), persisted in memory only: it
    holds the raw text, never on disk."""
    run_id = io.new_run_id()
    out = perturb(df, bundle, key, [TEXT], keep, run_id, vocabulary_only=vocabulary_only)
    return out.drop(*count_columns(run_id)).persist(StorageLevel.MEMORY_ONLY)


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

    def perturbed(
        self, data: DataFrame, bundle: str, key: bytes, keep: bool = False, vocabulary_only: bool = False
    ) -> DataFrame:
        return perturbed(data, bundle, key, keep=keep, vocabulary_only=vocabulary_only)

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

    def corpus_vocabulary(self, path: str, columns: list[str], size: int, in_vocabulary: dict[str, int]) -> list[str]:
        df = io.read_input(self.spark, FileSystem(self.spark), path, None)
        check_columns(df, PerturbConfig(columns=columns, epsilon=1.0))
        return vocabulary_from_corpus(df, columns, size, in_vocabulary)

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


def _dictionary(res: Any) -> Any:
    if "dictionary" not in res.derived:
        res.derived["dictionary"] = fm.english_words(fallback=res.words.take(np.arange(len(res.words))))
    return res.derived["dictionary"]


def _metric_batches(
    batches: Iterator[pa.RecordBatch], bundle: str, rare: frozenset[str], first: int | None, aligned: bool
) -> Iterator[pa.RecordBatch]:
    """One row of partial sums per Arrow batch of (perturbed text, original text)."""
    from dpspark.spark.resources import resources as loaded

    res = loaded(bundle)
    encode = fm.mean_vector_encoder(res.vectors, res.words)
    words = _dictionary(res)
    for b in batches:
        pert = [(t or "").split() for t in b.column(0).to_pylist()]  # layout single: one field per token
        orig = [tokenize(t or "")[0] for t in b.column(1).to_pylist()]
        parts = [
            fm.perturbation_partial(orig, pert, first, aligned),
            fm.low_partial(orig, pert, rare, aligned),
            fm.cosine_partial(orig, pert, encode),
            fm.dictionary_partial(pert, words),
        ]
        yield pa.RecordBatch.from_pydict(
            {f"{name}_{i}": [float(part[i])] for name, part in zip(TEXT_SUMS, parts) for i in (0, 1)}
        )


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
