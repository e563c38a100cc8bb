"""``dpspark evaluate-utility``: how much worse does a model get on perturbed text?

One Spark job for a labelled Parquet dataset (Xu et al. 2020 §5.2; Feyisetan et al.
2020 §5):

1. read, check the text and label columns, map the labels to class indices (sorted
   label values; the last one is the positive class of binary metrics);
2. a fixed train/test split (``randomSplit`` with ``split_seed``: not noise randomness,
   stated in the manifest), both halves persisted in memory and reused by every run;
3. the non-private **baseline**: the model trained on plain train, scored on plain test;
4. for every setting of the grid (``config.settings()``: mechanisms × ε × each
   mechanism's own axes; without ``--mechanisms`` the noise family's default grid),
   on the driver one ``dpspark.prepare.Prepared`` (the vocabulary, the index and the
   mechanisms' artefacts prepared once and shared under exact search) and one shipped bundle, then R
   independent perturbations (each its own job key, ``dpspark.rng.derive_key(the
   run's key, mode, the setting's parameters, repeat)``) through the release's own
   executor transform (``dpspark.spark.transform.perturb``):
   - **train-time**: train on perturbed train, score on plain test;
   - **test-time**: the baseline model scores perturbed test;
5. results and summary Parquet (model, mode, mechanism, setting, ε, one column per grid
   axis, ``lambda`` first, null where it is not the setting's), ``summary.md`` (a row
   per setting, columns ε), plots with 95% CI bands (a line per setting) and a
   manifest, committed all-or-nothing (``dpspark.spark.reports``).

Models are Spark MLlib: ``tfidf-logreg`` is RegexTokenizer (dpspark's own token
pattern) → HashingTF → IDF → LogisticRegression; ``embedding-logreg`` is the mean GloVe
vector of a text's tokens (a mapInArrow over the shipped embedding) → LogisticRegression.

The outputs are computed from the raw data (the baseline most plainly): an evaluation
for the data owner, not a release. The manifest says so.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

import dpspark
from dpspark import report, utility
from dpspark.arrow import numbers
from dpspark.config import EvaluateUtilityConfig, PerturbConfig
from dpspark.embeddings import Embeddings, embeddings_of
from dpspark.engine import classification
from dpspark.errors import InputDataError
from dpspark.mechanisms import MechanismSpec, grid_facts
from dpspark.prepare import Prepared, local_writes, prepare, prepare_grid
from dpspark.progress import Progress, describe
from dpspark.rng import derive_key, new_job_key
from dpspark.spark import io, lineage, resources
from dpspark.spark.reports import ReportOutput
from dpspark.spark.session import get_session, is_connect, quiet_spark_logs
from dpspark.spark.transform import count_columns, mean_vectors, perturb, quote
from dpspark.text import TOKEN_PATTERN

log = logging.getLogger("dpspark")

TEXT, LABEL = "text", "label"  # the internal DataFrame's columns
HASHING_FEATURES = 1 << 16
MAX_ITER = 100  # MLlib's default; the SMS spam baseline converges in ≈ 40 iterations
# A light L2 penalty on the unstandardized features: on SMS spam it keeps the baseline (0.98 accuracy,
# 0.99 AUC), converges in fewer iterations, and lets a model trained on heavily perturbed text fall back
# to the class prior instead of fitting the noise (unpenalized, train-time accuracy at ε = 2 fell to 0.6,
# below the majority class's 0.87).
REG_PARAM = 1e-3
STANDARDIZATION = False
ROWS_PER_TASK = 20_000  # small data runs as few tasks: each MLlib iteration is one Spark job
MAX_CLASSES = 1000
PRIVACY_NOTE = (
    "An evaluation for the data owner, not a release: the baseline and every metric are computed from the raw "
    "data (labels and plain text). Keep these files with the raw data."
)


# --- input ------------------------------------------------------------------------------------------


def check_input(df: DataFrame, config: EvaluateUtilityConfig) -> None:
    """The text column is a string, the label column an atomic type."""
    fields = {f.name: f.dataType for f in df.schema.fields}
    for col, what in ((config.text_column, "text"), (config.label_column, "label")):
        if col not in fields:
            flag = "--text-column" if what == "text" else "--label-column"
            raise InputDataError(
                f"{what} column {col!r} is not in the input; available columns: {', '.join(fields)} ({flag})"
            )
    t = fields[config.text_column]
    if not isinstance(t, T.StringType):
        raise InputDataError(
            f"text column {config.text_column!r} has type {t.simpleString()}, expected string: cast it, or name the "
            "text column with --text-column"
        )
    lt = fields[config.label_column]
    if not isinstance(lt, T.StringType | T.BooleanType | T.IntegralType | T.FractionalType):
        raise InputDataError(
            f"label column {config.label_column!r} has type {lt.simpleString()}: labels must be strings, integers, "
            "booleans or numbers (one class per value)"
        )


def label_classes(df: DataFrame, label: str) -> tuple[list[Any], list[str], list[int]]:
    """(label values sorted, their string forms as Spark casts them, row counts): refuses nulls, NaN and one
    class."""
    rows = df.groupBy(F.col(quote(label)).alias("v"), F.col(quote(label)).cast("string").alias("k")).count().collect()
    missing = [r for r in rows if r["v"] is None or (isinstance(r["v"], float) and math.isnan(r["v"]))]
    if missing:
        raise InputDataError(
            f"label column {label!r} has {sum(r['count'] for r in missing)} null or NaN value(s): drop or label "
            "those rows first (every row needs a class)"
        )
    if len(rows) < 2:
        only = f"only the value {rows[0]['v']!r}" if rows else "no rows"
        raise InputDataError(
            f"label column {label!r} has {only}: a classifier needs at least two classes; check --label-column"
        )
    if len(rows) > MAX_CLASSES:
        raise InputDataError(
            f"label column {label!r} has {len(rows)} distinct values (at most {MAX_CLASSES}): is it really a label?"
        )
    rows.sort(key=lambda r: r["v"])
    return [r["v"] for r in rows], [r["k"] for r in rows], [int(r["count"]) for r in rows]


def labelled_frame(df: DataFrame, config: EvaluateUtilityConfig, keys: list[str], rows: int) -> DataFrame:
    """(text, label index) with null texts as empty strings, in about rows / ROWS_PER_TASK tasks (no shuffle)."""
    index = F.create_map(*[x for i, k in enumerate(keys) for x in (F.lit(k), F.lit(float(i)))])
    out = df.select(
        F.coalesce(F.col(quote(config.text_column)), F.lit("")).alias(TEXT),
        index[F.col(quote(config.label_column)).cast("string")].alias(LABEL),
    )
    tasks = max(1, math.ceil(rows / ROWS_PER_TASK))
    return out.coalesce(tasks) if num_partitions(out) > tasks else out


def num_partitions(df: DataFrame) -> int:
    """The DataFrame's partitions; on Spark Connect (no RDD) the highest partition id of a row, plus one."""
    if not is_connect(df.sparkSession):
        return df.rdd.getNumPartitions()
    last = df.select(F.spark_partition_id().alias("p")).agg(F.max("p")).first()[0]
    return 1 if last is None else last + 1


def split(df: DataFrame, config: EvaluateUtilityConfig, values: list[Any], rows: int) -> tuple[DataFrame, DataFrame]:
    """The fixed split, persisted in memory; every class must be in both halves."""
    f = config.test_fraction
    train, test = df.randomSplit([1.0 - f, f], seed=config.split_seed)
    train, test = train.persist(StorageLevel.MEMORY_ONLY), test.persist(StorageLevel.MEMORY_ONLY)
    counts = {}
    for name, part in (("train", train), ("test", test)):
        counts[name] = {int(r[LABEL]): int(r["count"]) for r in part.groupBy(LABEL).count().collect()}
    missing = [
        (name, values[k]) for name in ("train", "test") for k in range(len(values)) if counts[name].get(k, 0) == 0
    ]
    if missing:
        train.unpersist()
        test.unpersist()
        name, value = missing[0]
        raise InputDataError(
            f"too few rows for the split: {rows} rows with test fraction {f:g} give {sum(counts['train'].values())} "
            f"train and {sum(counts['test'].values())} test rows, and the {name} split has no row of class {value!r}; "
            "every class needs rows in both splits: give more rows (tens per class at least) or change --test-fraction"
        )
    return train, test


# --- models ----------------------------------------------------------------------------------------


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


# --- the grid --------------------------------------------------------------------------------------


def check_mllib(spark: SparkSession, command: str = "evaluate-utility") -> None:
    """pyspark.ml's estimators run over Spark Connect from pyspark 4.0 on; older clients fail plainly."""
    import pyspark

    version = tuple(int(x) for x in pyspark.__version__.split(".")[:2])
    if is_connect(spark) and version < (4, 0):
        from dpspark.errors import ConfigError

        raise ConfigError(
            f"{command} on Spark Connect needs pyspark 4.0 or later on the client (MLlib over Connect); "
            f"this is pyspark {pyspark.__version__}: upgrade it, or run on a cluster with a SparkContext"
        )


def perturb_config(config: EvaluateUtilityConfig, spec: MechanismSpec) -> PerturbConfig:
    """The perturb settings of one setting of the grid (what a release with ``spec`` would use)."""
    shared = ("embeddings", "embeddings_format", "embeddings_words", "embeddings_dir", "vocab_size", "vocab_file")
    shared += ("nn", "annoy_trees", "annoy_search_k")
    values = {k: getattr(config, k) for k in shared}
    own = {k: v for k, v in spec.parameters().items() if k not in ("name", "epsilon") and v is not None}
    values.update(own, columns=[TEXT], epsilon=spec.epsilon, mechanism=spec.name)
    return PerturbConfig.parse(values)


def setting_key(spec: MechanismSpec) -> str:
    """The setting as one exact label for ``derive_key``: its parameters (name and ε included) as JSON
    (floats written exactly), so that a setting's noise does not depend on the rest of the grid."""
    return json.dumps(spec.parameters(), sort_keys=True)


def prepare_settings(
    config: EvaluateUtilityConfig, specs: list[MechanismSpec], embeddings: Embeddings, workdir: Path
) -> list[Prepared]:
    """One ``Prepared`` (a release's preparation, its own bundle) per setting. With exact search the
    vocabulary, the index and the Space (with every setting's artefacts) are prepared once (``prepare_grid``) and
    shared; an annoy index is built and its recall measured per setting (the recall depends on the
    setting's noise)."""
    if config.nn != "exact":
        return [
            prepare(perturb_config(config, spec), embeddings=embeddings, workdir=workdir / str(i))
            for i, spec in enumerate(specs)
        ]
    grid = prepare_grid(config, specs, workdir, embeddings)
    return [
        Prepared(perturb_config(config, spec), dataclasses.replace(grid, specs=[spec]), recall=1.0, recall_queries=0)
        for spec in specs
    ]


def perturbed(df: DataFrame, bundle: str, key: bytes, keep: bool = False, vocabulary_only: bool = False) -> DataFrame:
    """``df`` with its text perturbed by the release's executor transform (``keep``: the original beside it;
    ``vocabulary_only``: no noise, each word its nearest vocabulary word), persisted in memory only: it
    holds the raw text, never on disk."""
    run_id = io.new_run_id()
    out = perturb(df, bundle, key, [TEXT], keep, run_id, vocabulary_only=vocabulary_only)
    return out.drop(*count_columns(run_id)).persist(StorageLevel.MEMORY_ONLY)


def run_labelled(
    config: EvaluateUtilityConfig,
    spark: SparkSession | None,
    df: DataFrame | None,
    command: str,
    what: str,
    evaluate: Callable[..., dict[str, Any]],
) -> dict[str, Any]:
    """What evaluate-utility and compare share: the labelled input (``config.input`` or ``df``) read and
    checked, its classes and its fixed split (persisted, unpersisted at the end), the output checked
    first and committed last with the manifest ``evaluate(spark, df, train, test, values, class_counts,
    out)`` returns (plus run id, start and duration)."""
    started, t_start = datetime.now(timezone.utc).isoformat(), time.time()
    if df is None and not config.input:
        from dpspark.errors import ConfigError

        raise ConfigError("input: give the labelled Parquet dataset (--input PATH)")
    spark = spark or (df.sparkSession if df is not None else get_session(config.master, remote=config.remote))
    check_mllib(spark, command)
    files = lineage.sources(df).paths if df is not None else None
    with ReportOutput(
        spark, config.input, config.output, config.write_mode, what, files, command, local_writes(config)
    ) as out:
        if df is None:
            df = io.read_input(spark, out.fs, out.paths.input_given or out.paths.input, None)
        check_input(df, config)
        with io.SqlConf(spark, {"spark.sql.shuffle.partitions": "4"}):  # label counts: a handful of rows
            values, keys, class_counts = label_classes(df, config.label_column)
            rows = sum(class_counts)
            train, test = split(labelled_frame(df, config, keys, rows), config, values, rows)
        try:
            # Each LogisticRegression iteration would warn that its task binary is large (session.py).
            with quiet_spark_logs(spark):
                manifest = evaluate(spark, df, train, test, values, class_counts, out)
        finally:
            train.unpersist()
            test.unpersist()
        manifest.update(run_id=out.run_id, started_at=started, duration_s=round(time.time() - t_start, 3))
        out.commit(manifest)
    log.info("%s finished in %.1f s", command, manifest["duration_s"])
    return manifest


def run_evaluate_utility(
    config: EvaluateUtilityConfig, spark: SparkSession | None = None, df: DataFrame | None = None
) -> dict[str, Any]:
    """Run the evaluation (see the module docstring); return the manifest."""

    def evaluate(spark: SparkSession, df: DataFrame, *split: Any) -> dict[str, Any]:
        return _evaluate(spark, config, *split)

    return run_labelled(config, spark, df, "evaluate-utility", "evaluation", evaluate)


def _evaluate(
    spark: SparkSession,
    config: EvaluateUtilityConfig,
    train: DataFrame,
    test: DataFrame,
    values: list[Any],
    class_counts: list[int],
    out: ReportOutput,
) -> dict[str, Any]:
    n_classes = len(values)
    metrics = utility.metric_names(n_classes)
    model = Model(config.model, n_classes)
    modes = utility.MODES if config.mode == "both" else (config.mode,)
    n_train, n_test = train.count(), test.count()
    specs = config.settings()
    axes = report.axis_names()
    workdir = resources.scratch_dir() / f"utility-{out.run_id}"
    ships: list[resources.Shipment] = []
    try:
        t0 = time.perf_counter()
        emb = embeddings_of(config)
        preps = prepare_settings(config, specs, emb, workdir)
        first = preps[0]
        prep_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        describe(spark, "evaluate-utility", "non-private baseline", out.run_id, connect=is_connect(spark))
        ships.append(resources.ship(spark, first.write_bundle))
        base_bundle = ships[0].name
        fitted_plain = model.fit(train, base_bundle)
        baseline = {"mechanism": None, "setting": None, "epsilon": None, **dict.fromkeys(axes)}
        results: list[dict[str, Any]] = [
            {"mode": utility.BASELINE, **baseline, "repeat": 0, **model.score(fitted_plain, test, base_bundle)}
        ]
        baseline_s = time.perf_counter() - t0
        log.info("evaluate-utility baseline: %s", {m: round(results[0][m], 4) for m in metrics})

        point_s = _score_settings(spark, config, model, preps, ships, train, test, fitted_plain, results, out.run_id)
    finally:
        for s in ships:
            s.close()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = utility.summarise(results, metrics)
    pq.write_table(result_table(results, config.model, axes, metrics), out.local / "results.parquet")
    pq.write_table(summary_table(summary, axes, metrics), out.local / "summary.parquet")
    names = list(dict.fromkeys(spec.name for spec in specs))
    rows = (n_train, n_test)
    plots = _write_summary(config, summary, metrics, names, len(first.vocab_rows), emb.name, values, rows, out)
    grid_s = sum(point_s)
    return {
        "dpspark_version": dpspark.__version__,
        "command": "evaluate-utility",
        "status": "succeeded",
        "privacy_note": PRIVACY_NOTE,
        "input": config.input,
        "text_column": config.text_column,
        "label_column": config.label_column,
        "classes": [{"label": v, "rows": c} for v, c in zip(values, class_counts)],
        "positive_class": values[-1] if n_classes == 2 else None,
        "rows": {"train": n_train, "test": n_test},
        "split": {"method": "DataFrame.randomSplit", "test_fraction": config.test_fraction, "seed": config.split_seed},
        "model": config.model,
        "model_params": model.params(),
        "modes": list(modes),
        "metrics": list(metrics),
        "mechanism": config.mechanism,
        "mechanisms": names,
        "settings": [prep.spec.facts(prep.space) for prep in preps],
        "epsilons": config.grid_epsilons(),
        **grid_facts(specs, first.space),  # each family's facts of the grid (the noise family's λ grid)
        "repeats": config.repeats,
        "embeddings": {"name": emb.name, "sha256": emb.sha256, "words": len(emb)},
        "dimension": emb.dim,
        "vocabulary": {"size": int(len(first.vocab_rows)), "source": config.vocab_file or f"first {config.vocab_size}"},
        "nearest_neighbour": {
            "method": config.nn,
            "recall_at_1": {prep.spec.label(): prep.recall for prep in preps},
        },
        "oov_policy": "unk",
        "noise": "seeded (--seed): reproducible, tests and experiments only"
        if config.seed is not None
        else "operating system entropy",
        "seeded": config.seed is not None,
        "files": ["results.parquet", "summary.parquet", "summary.md", *plots],
        "summary": summary,
        "timings": {
            "preparation_s": round(prep_s, 3),
            "baseline_s": round(baseline_s, 3),
            "grid_s": round(grid_s, 3),
            "grid_points": len(point_s),
            "per_grid_point_s": round(grid_s / max(len(point_s), 1), 3),
        },
    }


def _write_summary(
    config: EvaluateUtilityConfig,
    summary: list[dict],
    metrics: Sequence[str],
    names: list[str],
    vocab_words: int,
    embeddings: str,
    values: list[Any],
    rows: tuple[int, int],
    out: ReportOutput,
) -> list[str]:
    """summary.md (with its notes: the model, the split, the mechanisms, the positive class, the test split's
    majority class) and the plots; returns the plots' file names."""
    positive = f"positive class {values[-1]!r} (the last label in sorted order)" if len(values) == 2 else None
    notes = [
        f"{config.model}; {rows[0]} train / {rows[1]} test rows (split seed {config.split_seed}); "
        f"mechanism{'s' if len(names) > 1 else ''} {', '.join(names)}, vocabulary {vocab_words} words; "
        f"R = {config.repeats} perturbations per setting and ε.",
    ]
    if positive:
        notes.append(f"Precision, recall, F1 and AUC of the {positive}.")
    base = utility.baseline_of(summary)
    label = values[base["majority_class"]] if base.get("majority_class") is not None else None
    md = utility.summary_md(summary, metrics, "Utility of perturbed text", notes, len(values), label)
    (out.local / "summary.md").write_text(md, encoding="utf-8")
    majority = base["majority_rate"]
    return utility.write_plots(summary, metrics, out.local, config.model, vocab_words, embeddings, majority)


def _score_settings(
    spark: SparkSession,
    config: EvaluateUtilityConfig,
    model: Model,
    preps: list[Prepared],
    ships: list[resources.Shipment],
    train: DataFrame,
    test: DataFrame,
    fitted_plain: Any,
    results: list[dict[str, Any]],
    run_id: str,
) -> list[float]:
    """Score every setting ``config.repeats`` times in each mode (train-time: a model fitted on perturbed
    train, scored on plain test; test-time: the plain model scored on perturbed test), appending a row per
    (mode, repeat) to ``results``; each setting's bundle is shipped and added to ``ships`` (the first's is
    ``ships[0]``, the baseline's). Returns each setting's seconds."""
    modes = utility.MODES if config.mode == "both" else (config.mode,)
    axes = report.axis_names()
    master = new_job_key(config.seed)
    point_s: list[float] = []
    progress = Progress("evaluate-utility", len(preps))
    for prep in preps:
        spec = prep.spec
        describe(
            spark,
            "evaluate-utility",
            f"{spec.label()}, {config.repeats} perturbations",
            run_id,
            connect=is_connect(spark),
        )
        t0 = time.perf_counter()
        if prep is preps[0]:
            shipment = ships[0]  # the baseline's bundle is the first setting's
        else:
            shipment = resources.ship(spark, prep.write_bundle)
            ships.append(shipment)
        own = spec.axes()
        point = {
            "mechanism": spec.name,
            "setting": spec.series_label(),
            "epsilon": spec.epsilon,
            **{a: own.get(a) for a in axes},
        }
        for r in range(config.repeats):
            for mode in modes:
                key = derive_key(master, mode, setting_key(spec), r)
                noisy = perturbed(train if mode == "train-time" else test, shipment.name, key)
                try:
                    if mode == "train-time":
                        scores = model.score(model.fit(noisy, shipment.name), test, shipment.name)
                    else:
                        scores = model.score(fitted_plain, noisy, shipment.name)
                finally:
                    noisy.unpersist()
                results.append({"mode": mode, **point, "repeat": r, **scores})
        point_s.append(time.perf_counter() - t0)
        progress.report(len(point_s), len(point_s) / len(preps))
    return point_s


def result_table(results: list[dict], model: str, axes: list[str], metrics: Sequence[str]) -> pa.Table:
    """results.parquet: one row per (mode, setting, ε, repeat) and the baseline row: model, mode, mechanism,
    setting, ε, one column per grid axis (``report.axis_names``: lambda first; null where it is not the
    setting's), repeat and the metrics."""
    return pa.table(
        {
            "model": pa.array([model] * len(results), pa.string()),
            "mode": pa.array([r["mode"] for r in results], pa.string()),
            "mechanism": pa.array([r["mechanism"] for r in results], pa.string()),
            "setting": pa.array([r["setting"] for r in results], pa.string()),
            "epsilon": pa.array([r["epsilon"] for r in results], pa.float64()),
            **{a: report.axis_column([r[a] for r in results]) for a in axes},
            "repeat": pa.array([r["repeat"] for r in results], pa.int32()),
            **{m: pa.array([r[m] for r in results], pa.float64()) for m in metrics},
            "majority_rate": pa.array([r.get("majority_rate") for r in results], pa.float64()),
        }
    )


def summary_table(summary: list[dict], axes: list[str], metrics: Sequence[str]) -> pa.Table:
    """summary.parquet: one row per (mode, setting, ε) and the baseline row, typed as results.parquet
    (an axis no setting has is a float column of nulls, not a column of Arrow's null type)."""
    columns: dict[str, pa.Array] = {
        "mode": pa.array([s["mode"] for s in summary], pa.string()),
        "mechanism": pa.array([s["mechanism"] for s in summary], pa.string()),
        "setting": pa.array([s["setting"] for s in summary], pa.string()),
        "epsilon": pa.array([s["epsilon"] for s in summary], pa.float64()),
        **{a: report.axis_column([s[a] for s in summary]) for a in axes},
        "repeats": pa.array([s["repeats"] for s in summary], pa.int64()),
    }
    for m in metrics:
        for part in ("mean", "low", "high"):
            columns[f"{m}_{part}"] = pa.array([s[f"{m}_{part}"] for s in summary], pa.float64())
    columns["majority_rate"] = pa.array([s.get("majority_rate") for s in summary], pa.float64())
    columns["beats_majority"] = pa.array([s.get("beats_majority") for s in summary], pa.bool_())
    return pa.table(columns)


def evaluate_utility(
    output: str,
    text_column: str,
    label_column: str,
    input: str | None = None,  # noqa: A002
    df: DataFrame | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Python API of ``dpspark evaluate-utility`` over a Parquet path (``input``) or a DataFrame (``df``).

    Settings are EvaluateUtilityConfig fields (epsilons, mechanism, mechanisms, grid,
    mode, repeats, model, test_fraction, vocab_size, seed, overwrite, ...), e.g.
    ``mechanisms=["laplace", "tem"], grid={"beta": [0.001]}``. Returns the manifest, whose
    ``summary`` holds the mean and 95% CI of every metric per (mode, setting, ε) and whose
    ``settings`` states each setting's guarantee.
    """
    config = EvaluateUtilityConfig.parse(
        {"output": output, "text_column": text_column, "label_column": label_column, "input": input, **settings}
    )
    return run_evaluate_utility(config, df=df)
