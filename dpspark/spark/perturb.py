"""The perturb job: text columns rewritten token by token (Laplace or Mahalanobis).

Thin: ``PerturbJob`` says how to check, prepare and transform; the release path
(``dpspark.spark.release``) reads, commits and records. ``perturb_text`` is the lazy
DataFrame → DataFrame transform for notebooks and pipelines; ``release`` writes a
release (manifest, ledger, refusals) from a DataFrame, as the CLI does from a path.
"""

from __future__ import annotations

import shutil
import uuid
import warnings
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dpspark import units
from dpspark.config import PerturbConfig
from dpspark.embeddings import embeddings_of
from dpspark.errors import ConfigError, InputDataError, PrivacyWarning, VocabularyTooSmallError
from dpspark.prepare import Prepared, prepare, vocabulary_rows
from dpspark.rng import new_job_key
from dpspark.scratch import scratch_dir
from dpspark.spark import resources
from dpspark.spark.release import check_stream, run_release
from dpspark.spark.transform import (
    SHAPE,
    count_columns,
    perturb,
    quote,
    token_counts,
    unit_aggregates,
    unit_counts,
    units_over_cap,
)
from dpspark.text import COUNT_NAMES, most_frequent
from dpspark.unit_table import UnitTable

# PerturbConfig fields that only a written release uses: perturb_text refuses them (dpspark.release takes them).
RELEASE_ONLY = ("output", "output_table", "table_format", "mode", "partition", "allow_rerelease")


def check_columns(df: DataFrame, config: PerturbConfig, hidden: list[str] | None = None) -> None:
    """Every named column exists and is a string; no output column would clash with an input one."""
    if not config.columns:
        raise ConfigError("columns: name at least one text column to perturb (--columns COL[,COL...])")
    fields = {f.name: f.dataType for f in df.schema.fields}
    for col in config.columns:
        if col not in fields:
            raise InputDataError(f"column {col!r} is not in the input; available columns: {', '.join(fields)}")
        if not isinstance(fields[col], T.StringType):
            raise InputDataError(
                f"column {col!r} has type {fields[col].simpleString()}, expected string: only text columns can be "
                "perturbed (cast it, or choose another column)"
            )
    added = [f"{c}_original" for c in config.columns] if config.keep_original else []
    added += [f"{c}_{suffix}" for suffix in config.spec.extra_columns for c in config.columns]
    clash = [n for n in [*added, *(hidden or [])] if n in fields]
    if clash:
        raise InputDataError(
            f"the input already has column(s) {', '.join(map(repr, clash))}, which the output would add: rename "
            "them first (or drop --keep-original)"
        )


def check_unit_column(df: DataFrame, config: PerturbConfig) -> None:
    """A ``column:`` unit's id column exists and holds one value per row (no array, map or struct)."""
    unit = config.unit
    if unit.kind != "column":
        return
    fields = {f.name: f.dataType for f in df.schema.fields}
    if unit.column not in fields:
        raise InputDataError(
            f"the unit column {unit.column!r} (--privacy-unit {unit.label()}) is not in the input; available "
            f"columns: {', '.join(fields)}"
        )
    kind = fields[unit.column]
    if kind.typeName() in ("array", "map", "struct", "variant", "udt"):
        raise InputDataError(
            f"the unit column {unit.column!r} has type {kind.simpleString()}: a unit's id is one value per row (a "
            "string, a number or a date); choose a scalar id column, or derive one first (e.g. a struct's field)"
        )


def refuse_null_ids(nulls: int, config: PerturbConfig) -> None:
    """A ``column:`` unit's rows without an id: refused, naming how many (a null is no person)."""
    if nulls:
        name = config.unit.column
        raise InputDataError(
            f"{nulls:,} row(s) have no {name} (null): a row without an id belongs to no unit, and its tokens would "
            f"share no budget; drop or fill them before the release (e.g. a view WHERE {name} IS NOT NULL), or use "
            "--privacy-unit document"
        )


def vocabulary_from_corpus(df: DataFrame, columns: list[str], size: int, embedded: dict[str, int]) -> list[str]:
    """The ``size`` most frequent embedded tokens of the corpus: data-dependent, published by the output."""
    return most_frequent(token_counts(df, *columns), embedded, size)


def corpus_too_short(c: PerturbConfig, words: int, embeddings: str, needed: int) -> VocabularyTooSmallError:
    """The refusal of a corpus-derived vocabulary (``vocab_from_corpus``) too small for the mechanism: the corpus
    is what is short, not --vocab-size. ``words`` is the vocabulary's size, which a release's manifest
    publishes anyway."""
    return VocabularyTooSmallError(
        f"the input has only {words} distinct words with a vector in {embeddings} (--vocab-from-corpus asked for "
        f"{c.vocab_size}), and {c.mechanism} needs at least {needed}: use a larger corpus, or drop "
        "--vocab-from-corpus for the embedding's own vocabulary, or a mechanism that needs fewer words",
        needed,
    )


def counts_in_corpus(df: DataFrame, columns: list[str], words: list[str]) -> dict[str, int]:
    """The corpus's count of each of ``words`` it holds (SanText+'s ``sensitive_from_corpus``), kept on the
    driver."""
    counts = token_counts(df, *columns)
    return {w: counts[w] for w in words if w in counts}


def opt_in_warnings(config: PerturbConfig) -> None:
    """Say it when an opt-in publishes what the guarantee does not cover."""
    if config.keep_original:
        warnings.warn(
            "keep_original writes the raw text beside the perturbed text: THIS OUTPUT IS NOT PRIVATE "
            "(the manifest says so)",
            PrivacyWarning,
            stacklevel=3,
        )
    if config.layout != "single":
        warnings.warn(
            f"layout {config.layout!r} publishes the input's "
            + ("line count" if config.layout == "lines" else "whitespace verbatim")
            + ", which the guarantee does not cover",
            PrivacyWarning,
            stacklevel=3,
        )
    if config.spec.guarantee_type == "none":
        warnings.warn(
            f"{config.mechanism} has no privacy guarantee dpspark can state (see the manifest's guarantee): use it "
            "to compare with published results, not to release private text",
            PrivacyWarning,
            stacklevel=3,
        )
    if config.vocab_from_corpus:
        warnings.warn(
            "the vocabulary is derived from the private corpus: the output space, and so the output, can reveal "
            "the corpus's frequent words; prefer the default data-independent vocabulary",
            PrivacyWarning,
            stacklevel=3,
        )
    if config.spec.corpus_counts_artefact() is not None:
        warnings.warn(
            "santext-plus's protected set is derived from the private corpus (its least frequent words): which words "
            "are protected, and so the output, can reveal the corpus's rare words, outside the guarantee; prefer the "
            "embedding's order (--sensitive-fraction alone) or a public list (--sensitive-words)",
            PrivacyWarning,
            stacklevel=3,
        )


UNCHANGED_WARNING = 0.9  # perturb warns above this expected share of tokens released as themselves
MEDIAN_SHARE = " (the median unit's share of the unit budget)"


def unchanged_warning(prepared: Prepared, epsilon: float | None = None) -> dict[str, Any]:
    """Warn when ε is so large that most tokens come out as themselves (``stats.expected_unchanged``,
    on public words only); the figure goes into the manifest. ``epsilon``: a privacy unit's release, the
    median unit's per-token ε (known once the output's shape is)."""
    from dpspark.stats import UNCHANGED_WORDS, expected_unchanged

    m = prepared.mechanism if epsilon is None else prepared.mechanism.at(epsilon)
    share, how = expected_unchanged(m)
    c = prepared.config
    # what the mechanism releases verbatim at every ε (SanText+: its non-sensitive words, with probability 1 − p)
    verbatim = m.verbatim_share(m.vocab_rows[:UNCHANGED_WORDS])
    if verbatim > UNCHANGED_WARNING:
        why, change = m.verbatim_advice()
        fix = f"{100 * verbatim:.0f}% of them by design, whatever epsilon ({why}): {change}"
    else:
        fix = "choose a smaller epsilon (see docs/choosing-epsilon.md, or run dpspark compare on your data)"
    if share > UNCHANGED_WARNING:
        warnings.warn(
            f"at epsilon {m.epsilon:g}{'' if epsilon is None else MEDIAN_SHARE} {c.mechanism} releases about "
            f"{100 * share:.0f}% of tokens unchanged ({how}, "
            f"over the {UNCHANGED_WORDS} most frequent vocabulary words): the output is close to the input; {fix}",
            PrivacyWarning,
            stacklevel=2,
        )
    out = {"share": share, "method": how, "words": UNCHANGED_WORDS, "warned": share > UNCHANGED_WARNING}
    return out if epsilon is None else {**out, "epsilon": epsilon}


class PerturbJob:
    """Check, prepare and transform for the perturb release."""

    command = "perturb"

    def __init__(self, config: PerturbConfig) -> None:
        self.config = config
        self.prepared: Prepared | None = None
        self.shipment: resources.Shipment | None = None
        self.job_key = b""
        self.table: UnitTable | None = None  # a column: unit's (dpspark.unit_table)

    def check(self, df: DataFrame) -> DataFrame:
        check_columns(df, self.config)
        check_unit_column(df, self.config)
        return df

    def prepare(self, df: DataFrame, spark: SparkSession, run_id: str) -> None:
        c = self.config
        opt_in_warnings(c)
        alloc = c.allocation_of
        self.job_key = new_job_key(c.seed)
        if c.unit.kind == "column":  # each person's tokens over the input: keyed hashes, before anything is prepared
            self.table, nulls = unit_counts(df, str(c.unit.column), list(c.columns), self.job_key)
            refuse_null_ids(nulls, c)
            units.check_units(self.table.unit_totals(), float(c.unit_budget), alloc)  # type: ignore[arg-type]
        elif alloc.kind == "cap" and alloc.over_cap == "refuse":  # before anything is prepared or written
            units.refuse_over_cap(*units_over_cap(df, list(c.columns), int(alloc.cap)), alloc)  # type: ignore[arg-type]
        workdir = scratch_dir() / f"index-{run_id}"
        try:
            from_corpus = c.spec.corpus_counts_artefact() is not None
            if c.vocab_from_corpus or from_corpus:
                emb = embeddings_of(c)
                words = (
                    vocabulary_from_corpus(df, list(c.columns), c.vocab_size, emb.word_index)
                    if c.vocab_from_corpus
                    else None
                )
                counts = None
                if from_corpus:  # the vocabulary's counts in the input, for the spec that requests them
                    vocabulary = [emb.words[r] for r in vocabulary_rows(c, emb, words)]
                    counts = counts_in_corpus(df, list(c.columns), vocabulary)
                try:
                    self.prepared = prepare(c, embeddings=emb, workdir=workdir, vocab_words=words, corpus_counts=counts)
                except VocabularyTooSmallError as exc:
                    if words is None or len(words) >= c.vocab_size:
                        raise
                    raise corpus_too_short(c, len(words), emb.name, exc.needed) from None
            else:
                self.prepared = prepare(c, workdir=workdir)
            self.shipment = resources.ship(spark, self.write_bundle)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        self.unchanged = unchanged_warning(self.prepared) if c.unit.is_token else None  # a unit's: after the pass

    def write_bundle(self, directory: Any) -> None:
        """The prepared bundle, and a ``column:`` unit's table (``dpspark.unit_table``) beside it."""
        self.prepared.write_bundle(directory)
        if self.table is not None:
            self.table.save(directory)

    def transform(self, df: DataFrame, run_id: str) -> tuple[DataFrame, list[Any]]:
        c = self.config
        extra = c.spec.extra_columns
        column = c.unit.column if c.unit.kind == "column" else None
        out = perturb(
            df, self.shipment.name, self.job_key, list(c.columns), c.keep_original, run_id, extra, unit_column=column
        )
        sums = [F.sum(F.col(quote(col))).alias(name) for col, name in zip(count_columns(run_id), COUNT_NAMES)]
        if c.oov != "unk" and c.allocation_of.kind != "cap":  # placeholders: of unk, or of a cap
            sums = sums[:1]
        if c.unit_budget is not None:
            sums += unit_aggregates(run_id, c.allocation_of)
        return out, sums

    def replaced_columns(self) -> list[str]:
        return list(self.config.columns)

    def side_files(self) -> dict[str, bytes]:
        return {}

    def manifest_fields(self, observed: dict[str, int]) -> dict[str, Any]:
        fields = {
            "columns": list(self.config.columns),
            **self.prepared.manifest_fields(),
            "expected_unchanged": self.unchanged,
        }
        return {**fields, **self.unit_fields(observed, fields)}

    def unit_fields(self, observed: dict[str, int], fields: dict[str, Any]) -> dict[str, Any]:
        """The privacy unit's part of the manifest: the unit and the adjacency its guarantee compares; under a
        unit other than the token its budget, allocation, bound (E·D in the mechanism's metric: D its
        ``unit_diameter``) and the units' shape (``dpspark.units.shape_counts``), and the guarantee in words."""
        c, spec, space = self.config, self.prepared.spec, self.prepared.space
        unit = c.unit
        out: dict[str, Any] = {"privacy_unit": unit.fields(), "adjacency": unit.adjacency()}
        if unit.is_token:
            return out
        alloc, budget = c.allocation_of, float(c.unit_budget)  # type: ignore[arg-type]
        counts = units.shape_counts(*self.unit_shape(observed), budget, alloc)
        bound = units.unit_bound(
            spec.guarantee_type,
            budget,
            spec.unit_diameter(space),
            p=spec.ledger_cost_terms().get("p"),
            tokens=self.unit_tokens(observed),
        )
        out |= {"unit_budget": budget, "allocation": alloc.fields(), "unit_bound": bound, "unit_counts": counts}
        if counts["token_epsilon"] is not None:
            out["expected_unchanged"] = unchanged_warning(self.prepared, counts["token_epsilon"]["median_unit"])
        if "euclidean_epsilon_bound" in fields:  # a per-token figure at ε = E: the unit's bound replaces it
            out["euclidean_epsilon_bound"] = None
        if c.keep_original:  # NOT PRIVATE stays the guarantee's first words
            return out
        who = unit.kind if unit.kind != "column" else f"{unit.column} value"
        item = "draw of a synthetic document" if spec.text_level else "token"
        out["guarantee"] = (
            f"Per {who}: replacing one {who}'s text by another of the same shape (the same rows, tokens "
            f"per row and placeholder positions) changes the probability of any output by at most a factor "
            f"exp({bound['bound']:.6g}) ({bound['how']}). Each {item} is drawn by {spec.name} at its share of the "
            f"unit budget {budget:g} ({alloc.label()}: {units.ALLOCATION_TEXT[alloc.kind]}). The mechanism's "
            f"statement per token, at the largest share a token can get: {fields['guarantee']}"
        )
        return out

    def unit_shape(self, observed: dict[str, int]) -> tuple[int, dict[str, int]]:
        """How many units, and their shape (``dpspark.units.shape_of``): a document's from the output's rows, a
        ``column:`` unit's from its table."""
        if self.table is not None:
            totals = self.table.unit_totals()
            lengths, counts = np.unique(totals, return_counts=True)
            return len(totals), units.shape_of(dict(zip(lengths.tolist(), counts.tolist())), self.config.allocation_of)
        return observed["rows"], {k[len(SHAPE) :]: v for k, v in observed.items() if k.startswith(SHAPE)}

    def unit_tokens(self, observed: dict[str, int]) -> int:
        """The most tokens of a unit drawn by the mechanism: the cap, or the longest unit."""
        most = int(self.unit_shape(observed)[1].get("max") or 0)
        alloc = self.config.allocation_of
        return min(most, int(alloc.cap)) if alloc.kind == "cap" else most  # type: ignore[arg-type]

    def ledger_terms(self, observed: dict[str, int]) -> dict[str, Any]:
        c = self.config
        terms = self.prepared.ledger_terms()
        if c.unit.is_token:
            return terms
        unit = {"privacy_unit": c.unit.fields(), "unit_budget": c.unit_budget, "allocation": c.allocation_of.fields()}
        return {**terms, **unit, "epsilon": c.unit_budget, "unit_tokens": self.unit_tokens(observed)}

    def close(self) -> None:
        if self.shipment is not None:
            self.shipment.close()


def run_perturb(config: PerturbConfig, spark: SparkSession | None = None, df: DataFrame | None = None) -> dict:
    """Release ``config.input`` (or ``df``) into ``config.output``; return the manifest."""
    return run_release(PerturbJob(config), df=df, spark=spark)


def release(
    df: DataFrame,
    output: str | None = None,
    columns: list[str] | str | None = None,
    epsilon: float | None = None,
    **settings: Any,
) -> dict:
    """Write a private release of ``df`` to ``output`` (or ``output_table=``): the same path as
    ``dpspark perturb``.

    Same manifest, ledger, refusals (output overlapping the input, existing output,
    re-release) and atomic commit as the CLI. Settings are PerturbConfig fields
    (mechanism and its parameters, vocab_size, oov, layout, mode, allow_rerelease, seed, ...).
    ``df`` is None where the release reads its input itself (``partition=`` with ``input=``, or
    ``input_table=``), in the active session. Returns the manifest.
    """
    given = {"output": output, "columns": columns, "epsilon": epsilon}
    config = PerturbConfig.parse({**{k: v for k, v in given.items() if v is not None}, **settings})
    return run_perturb(config, spark=df.sparkSession if df is not None else None, df=df)


def perturb_text(
    df: DataFrame,
    columns: list[str] | str,
    epsilon: float | None = None,
    spark: SparkSession | None = None,
    **settings: Any,
) -> DataFrame:
    """Privately perturb every token of ``columns``; return the DataFrame (lazy).

    Args:
        df: input DataFrame (bounded: a stream is refused).
        columns: text column(s) to rewrite.
        epsilon: ε per token (no default; None with a privacy unit's ``unit_budget``).
        spark: the session (default: the DataFrame's).
        **settings: any other PerturbConfig field (mechanism and its parameters, vocab_size,
            nn, oov, layout, seed, keep_original, embeddings, ...) but those of a written
            release (``RELEASE_ONLY``: output, mode, partition, ...), which are refused.

    The result is keyed by a fresh job key (or ``seed``), so evaluating it twice gives
    the same text; calling ``perturb_text`` again gives new noise. To *publish* the
    result, use ``release`` (manifest, ledger, refusals) rather than ``df.write``.
    """
    written = [k for k in settings if k.replace("-", "_") in RELEASE_ONLY]
    if written:
        raise ConfigError(
            f"perturb_text writes nothing and takes no {', '.join(written)}: call dpspark.release(df, output=..., "
            "...) to write a release (manifest, ledger, refusals)"
        )
    config = PerturbConfig.parse({"columns": columns, "epsilon": epsilon, **settings})
    check_stream(df)
    spark = spark or df.sparkSession
    run_id = uuid.uuid4().hex
    job = PerturbJob(config)
    job.check(df)
    job.prepare(df, spark, run_id)  # the archive stays until exit: the DataFrame may be evaluated any time
    out, _ = job.transform(df, run_id)
    return out.drop(*count_columns(run_id))
