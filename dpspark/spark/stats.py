"""The privacy-stats job on Spark: work items over tasks, counts combined with reduceByKey.

Each item (ε, λ, a chunk of words, a block of runs) is drawn on an executor with the
same code as perturb (WordMechanism + the blocked exact search) and emits
((ε, λ, w, ŵ), count); ``reduceByKey`` adds the counts over run blocks, and a second
``reduceByKey`` turns them into per-word (Nw, Sw, K). The driver only sees the small
per-word result, from which it writes the tables, plots and manifest.
"""

from __future__ import annotations

import json
import logging
import operator
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

import dpspark
from dpspark import report
from dpspark.config import StatsConfig
from dpspark.embeddings import Embeddings, load_embeddings, select_vocabulary
from dpspark.errors import ConfigError, OutputExistsError
from dpspark.geometry import geometry
from dpspark.neighbours import AnnoyIndex, ExactIndex, NeighbourIndex
from dpspark.prepare import read_word_list
from dpspark.rng import new_job_key
from dpspark.spark.session import get_session, ship_directory
from dpspark.stats import WorkItem, item_counts, plan, rows_of_words, sample_words

log = logging.getLogger("dpspark")
MANIFEST = "_dpspark_manifest.json"
_RESOURCES: dict[str, tuple] = {}


def _resources(bundle: str) -> tuple[np.ndarray, np.ndarray, dict[float, np.ndarray], NeighbourIndex]:
    """Per-process cache of (vectors, vocabulary rows, A by λ, index) for a stats bundle."""
    cached = _RESOURCES.get(bundle)
    if cached is None:
        from pyspark import SparkFiles
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
        d = Path(SparkFiles.get(bundle))
        cached = _RESOURCES[bundle] = load_bundle(d)
    return cached


def save_bundle(d: Path, emb: Embeddings, vocab_rows: np.ndarray, a_by_lambda: dict, annoy: AnnoyIndex | None) -> None:
    d.mkdir(parents=True, exist_ok=True)
    np.save(d / "vectors.npy", emb.vectors)
    np.save(d / "vocab_rows.npy", vocab_rows)
    lams = sorted(a_by_lambda)
    np.save(d / "a_stack.npy", np.stack([a_by_lambda[lam] for lam in lams]))
    settings = {"lambdas": lams, "nn": "exact" if annoy is None else "annoy"}
    if annoy is not None:
        settings["nn_params"] = annoy.params()
        if Path(annoy.path).resolve() != (d / "index.ann").resolve():
            shutil.copy(annoy.path, d / "index.ann")
    (d / "settings.json").write_text(json.dumps(settings))


def load_bundle(d: Path) -> tuple[np.ndarray, np.ndarray, dict[float, np.ndarray], NeighbourIndex]:
    settings = json.loads((d / "settings.json").read_text())
    vectors = np.load(d / "vectors.npy", mmap_mode="r")
    rows = np.load(d / "vocab_rows.npy")
    a_stack = np.load(d / "a_stack.npy")
    a_by = {float(lam): a_stack[i] for i, lam in enumerate(settings["lambdas"])}
    if settings["nn"] == "annoy":
        p = settings["nn_params"]
        index: NeighbourIndex = AnnoyIndex(str(d / "index.ann"), vectors.shape[1], p["n_trees"], p["search_k"])
    else:
        index = ExactIndex(vectors[rows])
    return vectors, rows, a_by, index


def _run_items(items: Iterator[WorkItem], bundle: str, job_key: bytes) -> Iterator:
    vectors, rows, a_by, index = _resources(bundle)
    for it in items:
        yield from item_counts(it, job_key, vectors, rows, a_by[it.lam], index)


def _nw_sw(kv: tuple) -> tuple:
    (e, lam, w, o), c = kv
    return (e, lam, w), (c if o == w else 0, 1, c)


def _add3(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def spark_per_word(spark: SparkSession, items: list[WorkItem], job_key: bytes, bundle: str) -> dict:
    """((ε, λ, w) → (Nw, Sw, K)) computed by the executors."""
    sc = spark.sparkContext
    slices = max(1, min(len(items), 4 * sc.defaultParallelism))
    counts = (
        sc.parallelize(items, slices)
        .mapPartitions(lambda it: _run_items(it, bundle, job_key))
        .reduceByKey(operator.add)
    )
    return counts.map(_nw_sw).reduceByKey(_add3).collectAsMap()


def choose_words(config: StatsConfig, emb: Embeddings, vocab_rows: np.ndarray, spark: SparkSession) -> tuple:
    """(embedding rows of the words to measure, the rule in words)."""
    if config.word_list:
        words = read_word_list(config.word_list)
        return rows_of_words(words, emb.word_index, vocab_rows), f"word list {config.word_list}"
    if config.corpus:
        from dpspark.spark.perturb import _check_input, vocabulary_from_corpus

        df = spark.read.parquet(config.corpus)
        _check_input(df, list(config.columns))
        in_vocab = {emb.words[r]: int(r) for r in vocab_rows}
        words = vocabulary_from_corpus(df, list(config.columns), config.words, in_vocab)
        return np.array(sorted(in_vocab[w] for w in words), np.int64), (
            f"the {len(words)} most frequent vocabulary words of {config.corpus}"
        )
    rows = sample_words(vocab_rows, config.words, config.words_seed)
    return rows, (
        f"{len(rows)} vocabulary words drawn uniformly without replacement with "
        f"numpy.random.default_rng({config.words_seed})"
    )


def run_privacy_stats(config: StatsConfig, spark: SparkSession | None = None) -> dict:
    """Compute Nw/Sw for every (ε, λ, word); write per_word.parquet, summaries, plots, manifest.

    The output directory is local (the results are small and written by the driver).
    """
    started = time.time()
    if not config.output:
        raise ConfigError("output: give the directory for the statistics (--output DIR)")
    out = Path(config.output)
    if out.exists() and config.mode == "error":
        raise OutputExistsError(f"output {out} already exists: choose a new path or pass --mode overwrite")
    spark = spark or get_session(config.master)
    work = Path(tempfile.mkdtemp(prefix="dpspark-stats-"))
    tmp = out.with_name(f"{out.name}._dpspark_tmp_{uuid.uuid4().hex}")
    try:
        t0 = time.perf_counter()
        emb = load_embeddings(config.embeddings, config.embeddings_format, config.embeddings_words)
        vocab_words = read_word_list(config.vocab_file) if config.vocab_file else None
        vocab_rows = select_vocabulary(emb, config.vocab_size, vocab_words)
        geos = {lam: geometry(emb.vectors[vocab_rows], lam) for lam in config.lambdas}
        annoy = None
        if config.nn == "annoy":
            annoy = AnnoyIndex.build(
                emb.vectors[vocab_rows], str(work / "index.ann"), config.annoy_trees, config.annoy_search_k
            )
        word_rows, rule = choose_words(config, emb, vocab_rows, spark)
        items = plan(
            config.epsilons, config.lambdas, word_rows, config.runs, config.words_per_task, config.runs_per_task
        )
        bundle = f"dpspark-stats-{uuid.uuid4().hex}"
        save_bundle(work / bundle, emb, vocab_rows, {lam: g.a for lam, g in geos.items()}, annoy)
        bundle = ship_directory(spark, work / bundle)
        prep_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        result = spark_per_word(spark, items, new_job_key(config.seed), bundle)
        draws = len(config.epsilons) * len(config.lambdas) * len(word_rows) * config.runs
        compute_s = time.perf_counter() - t0

        keys = sorted(result)
        table = pa.table(
            {
                "epsilon": pa.array([k[0] for k in keys], pa.float64()),
                "lambda": pa.array([k[1] for k in keys], pa.float64()),
                "word": pa.array([emb.words[k[2]] for k in keys], pa.string()),
                "rank": pa.array([k[2] for k in keys], pa.int64()),
                "nw": pa.array([result[k][0] for k in keys], pa.int64()),
                "sw": pa.array([result[k][1] for k in keys], pa.int64()),
                "runs": pa.array([result[k][2] for k in keys], pa.int64()),
            }
        )
        tmp.mkdir(parents=True)
        pq.write_table(table, tmp / "per_word.parquet")
        summary = report.write_summary(table, tmp)
        plots = report.write_plots(table, tmp)
        manifest = {
            "dpspark_version": dpspark.__version__,
            "status": "succeeded",
            "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
            "epsilons": config.epsilons,
            "lambdas": config.lambdas,
            "runs": config.runs,
            "words": int(len(word_rows)),
            "word_rule": rule,
            "euclidean_epsilon_factor": {str(lam): g.euclidean_epsilon(1.0) for lam, g in geos.items()},
            "xi_min": geos[config.lambdas[0]].xi_min,
            "embeddings": {"name": emb.name, "sha256": emb.sha256, "words": len(emb)},
            "dimension": emb.dim,
            "vocabulary": {"size": int(len(vocab_rows)), "source": config.vocab_file or f"first {config.vocab_size}"},
            "nearest_neighbour": {"method": config.nn, "params": annoy.params() if annoy else {}},
            "seeded": config.seed is not None,
            "draws": draws,
            "tasks": len(items),
            "timings": {
                "preparation_s": round(prep_s, 3),
                "statistics_s": round(compute_s, 3),
                "draws_per_s": round(draws / compute_s, 1),
            },
            "files": ["per_word.parquet", "summary.csv", "summary.md", *plots],
            "summary": summary,
            "duration_s": round(time.time() - started, 3),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info(json.dumps({"event": "privacy_stats_finished", "draws": draws, "duration_s": manifest["duration_s"]}))
    return manifest
