"""``dpspark privacy-risk``: the share of a corpus an informed attacker recovers (``dpspark.risk``).

On Spark, with DataFrames only (so it runs on Spark Connect too):

1. the corpus's token counts (tokenised as perturb tokenises) give the attacker's prior
   over the corpus words that have a vector;
2. every corpus word is perturbed K times with the privacy statistics' own work items
   (``dpspark.stats.plan`` / ``item_counts``: the perturb mechanism, the same bundle),
   cut into two blocks of K/2 independent runs: the fitting half and the scoring half;
3. the attack: for every (ε, λ, u) the five w with the largest prior(w)·count(w → u) in
   the fitting half (a window over the counts), scored against the scoring half;
4. per (ε, λ) the token-weighted shares, a table, a plot and a manifest, committed
   all-or-nothing (``dpspark.spark.reports``).

The figures are computed from the raw corpus: an evaluation for the data owner, not a
release (the manifest says so).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

import dpspark
from dpspark import report, risk
from dpspark.arrow import strings
from dpspark.config import RiskConfig
from dpspark.errors import ConfigError, InputDataError
from dpspark.prepare import prepare_grid, read_word_list
from dpspark.rng import new_job_key
from dpspark.spark import io, resources, stats
from dpspark.spark.reports import ReportOutput
from dpspark.spark.session import get_session, is_connect
from dpspark.spark.stats import mechanism_fields
from dpspark.spark.transform import map_in_arrow, quote
from dpspark.stats import WorkItem, plan
from dpspark.text import decode_strings, tokenize

log = logging.getLogger("dpspark")

PRIVACY_NOTE = (
    "An evaluation for the data owner, not a release: the word frequencies and every share are computed from the "
    "raw corpus. Keep these files with the raw data."
)


def check_text_column(df: DataFrame, column: str) -> None:
    fields = {f.name: f.dataType for f in df.schema.fields}
    if column not in fields:
        raise InputDataError(
            f"text column {column!r} is not in the input; available columns: {', '.join(fields)} (--text-column)"
        )
    if not isinstance(fields[column], T.StringType):
        raise InputDataError(
            f"text column {column!r} has type {fields[column].simpleString()}, expected string: cast it, or name the "
            "text column with --text-column"
        )


def token_counts(df: DataFrame, column: str) -> dict[str, int]:
    """Token → number of occurrences in ``column`` (dpspark's tokenizer), counted on the executors."""

    def tokens(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            toks = [t for s in decode_strings(b.column(0))[0] if s for t in tokenize(s)[0]]
            yield pa.RecordBatch.from_pydict({"token": strings(toks)})

    counted = map_in_arrow(df.select(F.col(quote(column))), tokens, [T.StructField("token", T.StringType())])
    counted = counted.groupBy("token").count()
    return {r["token"]: int(r["count"]) for r in counted.collect()}


def _cores(spark: SparkSession) -> int:
    return 8 if is_connect(spark) else spark.sparkContext.defaultParallelism


def shuffle_settings(spark: SparkSession) -> dict[str, str]:
    """Few shuffle partitions: the count tables are small (words × distinct outputs), and Spark's
    default of 200 makes every stage of the attack hundreds of tasks."""
    return {"spark.sql.shuffle.partitions": str(max(4, 2 * _cores(spark)))}


def pair_counts(spark: SparkSession, items: list[WorkItem], job_key: bytes, bundle: str) -> DataFrame:
    """(half, ε, λ, w, u, count): the privacy statistics' own word → output counts, per block of runs."""
    counts = stats.pair_counts(spark, items, job_key, bundle, by_block=True, slices=4 * _cores(spark))
    return counts.withColumnRenamed("block", "half")


def attack(counts: DataFrame, prior: DataFrame, top: int = risk.TOP) -> dict[int, dict[str, float]]:
    """``dpspark.risk.reidentification`` with DataFrames: fitted on ``risk.FIT_HALF``, scored on ``risk.SCORE_HALF``.

    Args:
        counts: (half, setting, word, output, count).
        prior: (word, f: its token count, sensitive: boolean).
    """
    keys = ["setting"]
    fit = counts.filter(F.col("half") == risk.FIT_HALF).drop("half")
    score = counts.filter(F.col("half") == risk.SCORE_HALF).drop("half")
    by_output = Window.partitionBy(*keys, "output").orderBy(F.desc("weight"), F.asc("word"))
    guesses = (
        fit.join(F.broadcast(prior), "word")
        .withColumn("weight", F.col("f") * F.col("count"))
        .withColumn("rank", F.row_number().over(by_output))
        .filter(F.col("rank") <= top)
        .select(*[F.col(k).alias(f"g_{k}") for k in [*keys, "output", "word"]], "rank")
    )
    seen = fit.select(*keys, "output").distinct().withColumn("seen", F.lit(True))
    # A token's share is f(w)·count(w → u) / (K/2), and every word has K/2 scoring runs (``plan``): the
    # sums below are of the integers f·count, exact in any partitioning (classic and Spark Connect give
    # the same bits), and ``risk.finish`` divides them.
    scored = score.join(F.broadcast(prior), "word").withColumn("share", F.col("f").cast("long") * F.col("count"))
    # The rank of the true word among the guesses for its output (null: not among them).
    match = [scored[k] == guesses[f"g_{k}"] for k in [*keys, "output", "word"]]
    scored = scored.join(guesses, match, "left").join(seen, [*keys, "output"], "left")
    # An output never seen in the fitted half: the attacker guesses the output itself.
    rank = F.when(F.col("seen").isNull(), F.when(F.col("output") == F.col("word"), F.lit(1))).otherwise(F.col("rank"))
    hits = [rank == 1, rank <= top, F.col("output") == F.col("word")]
    sens = F.col("sensitive")
    sums = [F.sum("share")]
    sums += [F.sum(F.when(h, F.col("share")).otherwise(0)) for h in hits]
    sums += [F.sum(F.when(sens, F.col("share")).otherwise(0))]
    sums += [F.sum(F.when(sens & h, F.col("share")).otherwise(0)) for h in hits]
    rows = scored.groupBy(*keys).agg(*[s.alias(f"s{i}") for i, s in enumerate(sums)]).collect()
    nw = (
        counts.groupBy(*keys, "word")
        .agg(F.sum(F.when(F.col("output") == F.col("word"), F.col("count")).otherwise(0)).alias("nw"))
        .groupBy(*keys)
        .agg(F.mean("nw").alias("nw_mean"))
        .collect()
    )
    nw_by = {r["setting"]: r["nw_mean"] for r in nw}
    return {r["setting"]: risk.finish([r[f"s{i}"] or 0 for i in range(len(sums))], nw_by[r["setting"]]) for r in rows}


def run_privacy_risk(config: RiskConfig, spark: SparkSession | None = None, df: DataFrame | None = None) -> dict:
    """Estimate the re-identification risk of ``config.input`` (or ``df``); write tables, plot, manifest."""
    started = time.time()
    if df is None and not config.input:
        raise ConfigError("input: give the corpus (--input PATH)")
    spark = spark or (df.sparkSession if df is not None else get_session(config.master, remote=config.remote))
    with ReportOutput(spark, config.input, config.output, config.mode, "risk estimate") as out:
        t0 = time.perf_counter()
        if df is None:
            df = io.read_input(spark, out.fs, out.paths.input_given or out.paths.input, None)
        check_text_column(df, config.text_column)
        emb = config.load_embeddings()
        with io.SqlConf(spark, shuffle_settings(spark)):
            tokens = token_counts(df, config.text_column)
        embedded = sorted(
            ((c, emb.word_index[t]) for t, c in tokens.items() if t in emb.word_index), key=lambda x: (-x[0], x[1])
        )
        if not embedded:
            raise InputDataError(
                f"text column {config.text_column!r} has no token with a vector in {emb.name}: nothing to measure"
            )
        all_tokens, embedded_tokens = sum(tokens.values()), sum(c for c, _ in embedded)
        measured = embedded[: config.max_words] if config.max_words else embedded
        prior = {w: float(c) for c, w in measured}
        sensitive: set[int] = set()
        sensitive_given = 0
        if config.sensitive_words:
            words = [w.lower() for w in read_word_list(config.sensitive_words)]
            sensitive_given = len(words)
            sensitive = {emb.word_index[w] for w in words if w in emb.word_index and emb.word_index[w] in prior}

        specs = config.settings()
        grid = prepare_grid(config, specs, out.local)
        vocab_rows = grid.vocab_rows
        shipment = resources.ship(spark, lambda d: grid.write_bundle(d, config.embeddings_dir))
        if grid.annoy is not None:
            (out.local / "index.ann").unlink(missing_ok=True)
        noise_lams = sorted({spec.axes()["lambda"] for spec in specs if "lambda" in spec.axes()})
        rows = np.array(sorted(prior), dtype=np.int64)
        half = config.runs // 2
        items = plan(specs, rows, config.runs, config.words_per_task, half)
        prep_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        prior_df = spark.createDataFrame(
            [(w, f, w in sensitive) for w, f in prior.items()], "word long, f double, sensitive boolean"
        )
        with io.SqlConf(spark, shuffle_settings(spark)):
            counts = pair_counts(spark, items, new_job_key(config.seed), shipment.name)
            counts = counts.persist(StorageLevel.MEMORY_AND_DISK)  # noise counts only, no raw text
            try:
                result = attack(counts, prior_df)
            finally:
                counts.unpersist()
        # Closed-form mechanisms: the attacker with exact likelihoods, exact shares; the runs' estimate
        # stays beside them as a check (estimated_*).
        likelihood = ["estimated from K/2 fitted runs"] * len(specs)
        for i, mech in enumerate(grid.mechanisms()):
            exact = risk.exact_reidentification(mech, prior, sensitive, runs=config.runs)
            if exact is not None:
                estimated = result[i]
                result[i] = {**exact, **{f"estimated_{k}": estimated[k] for k in risk.RATES}}
                likelihood[i] = "exact (closed form)"
        risk_s = time.perf_counter() - t0

        axes = report.axis_names()
        table_rows = [
            {
                "mechanism": spec.name,
                "setting": report.series_label(spec.name, {a: spec.axes().get(a) for a in axes}),
                "epsilon": spec.epsilon,
                **{a: spec.axes().get(a) for a in axes},
                "runs": config.runs,
                "likelihood": likelihood[i],
                **{f"estimated_{k}": None for k in risk.RATES},
                **result[i],
            }
            for i, spec in enumerate(specs)
        ]
        pq.write_table(pa.Table.from_pylist(table_rows), out.local / "risk.parquet")
        coverage = sum(prior.values()) / embedded_tokens
        notes = [
            f"Attacker: knows the mechanism ({', '.join(dict.fromkeys(spec.name for spec in specs))}), the "
            f"embedding, the {len(vocab_rows)}-word "
            "vocabulary and the corpus word frequencies; guesses argmax prior(w)·P(u|w).",
            f"P(u|w) from K/2 = {half} runs per word, scored on the other {half} independent runs. "
            f"{len(prior)} corpus words with a vector, {100 * coverage:.1f}% of the tokens with a vector "
            f"({100 * embedded_tokens / all_tokens:.1f}% of all tokens; the rest are released as [UNK]).",
        ]
        if config.sensitive_words:
            notes.append(f"Sensitive words: {len(sensitive)} of the {sensitive_given} listed occur in the corpus.")
        (out.local / "summary.md").write_text(
            risk.summary_md(table_rows, "Re-identification risk", notes), encoding="utf-8"
        )
        plot = risk.write_plot(table_rows, out.local, len(prior), len(vocab_rows), emb.name)
        draws = len(specs) * len(rows) * config.runs
        manifest = {
            "dpspark_version": dpspark.__version__,
            "command": "privacy-risk",
            "status": "succeeded",
            "run_id": out.run_id,
            "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
            "privacy_note": PRIVACY_NOTE,
            "input": config.input,
            "text_column": config.text_column,
            "mechanism": config.mechanism,
            "mechanisms": list(dict.fromkeys(spec.name for spec in specs)),
            "settings": grid.facts(),
            "epsilons": config.epsilons,
            "lambdas": noise_lams,
            "runs": config.runs,
            "fit_runs": half,
            "score_runs": half,
            "attacker": "argmax_w prior(w)·P(u|w) (top-1 and top-5); unseen outputs guessed as themselves",
            "corpus": {
                "tokens": all_tokens,
                "tokens_with_vector": embedded_tokens,
                "words_measured": len(prior),
                "token_coverage": coverage,
                "sensitive_words_listed": sensitive_given,
                "sensitive_words_in_corpus": len(sensitive),
            },
            "euclidean_epsilon_factor": {lam: grid.space.geometry(lam).euclidean_epsilon(1.0) for lam in noise_lams},
            **mechanism_fields(config, emb, vocab_rows, grid.annoy),
            "draws": draws,
            "results": table_rows,
            "files": ["risk.parquet", "summary.md", plot],
            "timings": {"preparation_s": round(prep_s, 3), "risk_s": round(risk_s, 3)},
            "duration_s": round(time.time() - started, 3),
        }
        out.commit(manifest)
    log.info("privacy-risk finished in %.1f s", manifest["duration_s"])
    return manifest


def privacy_risk(
    output: str, text_column: str, input: str | None = None, df: DataFrame | None = None, **settings: Any
) -> dict:  # noqa: A002
    """Python API of ``dpspark privacy-risk`` over a Parquet path or a DataFrame; returns the manifest
    (its ``results``: one row per setting). Settings are RiskConfig fields."""
    config = RiskConfig.parse({"output": output, "text_column": text_column, "input": input, **settings})
    return run_privacy_risk(config, df=df)
