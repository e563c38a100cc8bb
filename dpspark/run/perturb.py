"""``dpspark perturb``'s job, over any engine: its warnings, its preparation and its part of the manifest and the
ledger, no pyspark here.

``PerturbRelease`` does everything a release of perturbed text decides; the passes over the data it needs
before anything is prepared (a ``column:`` unit's counts, the documents over a cap, the corpus's token counts)
and the shipping of the bundle are the engine's (``Passes``): ``dpspark.spark.perturb.PerturbJob`` answers them
with Spark, ``dpspark.local.LocalPasses`` with pyarrow in this process.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dpspark import units
from dpspark.config import PerturbConfig
from dpspark.embeddings import embeddings_of
from dpspark.errors import ConfigError, InputDataError, PrivacyWarning, VocabularyTooSmallError
from dpspark.prepare import Prepared, prepare, vocabulary_rows
from dpspark.rng import new_job_key
from dpspark.run.backend import Shipment
from dpspark.scratch import scratch_dir
from dpspark.stats import UNCHANGED_WORDS, expected_unchanged
from dpspark.text import COUNT_NAMES, most_frequent
from dpspark.unit_table import ORDERS, Counts, UnitTable

UNCHANGED_WARNING = 0.9  # perturb warns above this expected share of tokens released as themselves
MEDIAN_SHARE = " (the median unit's share of the unit budget)"


class Passes(Protocol):
    """What the job asks of the engine that holds the input, before anything is prepared."""

    def unit_counts(
        self, unit_column: str, columns: list[str], job_key: bytes, shipment: Shipment | None = None
    ) -> Counts: ...  # with a shipment: each row's draws (``dpspark.run.transform.row_draws``)

    def over_cap(self, columns: list[str], cap: int) -> tuple[int, int]: ...  # documents over the cap, the longest

    def token_counts(self, columns: list[str]) -> dict[str, int]: ...  # the tokenizer's tokens → occurrences

    def ship(self, write: Callable[[Path], object]) -> Shipment: ...  # the bundle ``write(dir)`` makes


def check_columns(
    kinds: dict[str, str], text: set[str], config: PerturbConfig, hidden: list[str] | None = None
) -> None:
    """Every named column exists and is a string (``text``: the input's string columns; ``kinds``: every
    column's type as the engine names it); no output column would clash with an input one."""
    if not config.columns:
        raise ConfigError("columns: name at least one text column to perturb (--columns COL[,COL...])")
    for col in config.columns:
        if col not in kinds:
            raise InputDataError(f"column {col!r} is not in the input; available columns: {', '.join(kinds)}")
        if col not in text:
            raise InputDataError(
                f"column {col!r} has type {kinds[col]}, expected string: only text columns can be "
                "perturbed (cast it, or choose another column)"
            )
    added = [f"{c}_original" for c in config.columns] if config.keep_original else []
    added += [f"{c}_{suffix}" for suffix in config.spec.extra_columns for c in config.columns]
    clash = [n for n in [*added, *(hidden or [])] if n in kinds]
    if clash:
        raise InputDataError(
            f"the input already has column(s) {', '.join(map(repr, clash))}, which the output would add: rename "
            "them first (or drop --keep-original)"
        )


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


def opt_in_warnings(config: PerturbConfig) -> None:
    """Say it when an opt-in publishes what the guarantee does not cover."""
    if config.keep_original:
        warnings.warn(
            "keep_original writes the raw text beside the perturbed text: THIS OUTPUT IS NOT PRIVATE "
            "(the manifest says so)",
            PrivacyWarning,
            stacklevel=4,
        )
    if config.layout != "single":
        warnings.warn(
            f"layout {config.layout!r} publishes the input's "
            + ("line count" if config.layout == "lines" else "whitespace verbatim")
            + ", which the guarantee does not cover",
            PrivacyWarning,
            stacklevel=4,
        )
    if config.spec.guarantee_type == "none":
        warnings.warn(
            f"{config.mechanism} has no privacy guarantee dpspark can state (see the manifest's guarantee): use it "
            "to compare with published results, not to release private text",
            PrivacyWarning,
            stacklevel=4,
        )
    if config.vocab_from_corpus:
        warnings.warn(
            "the vocabulary is derived from the private corpus: the output space, and so the output, can reveal "
            "the corpus's frequent words; prefer the default data-independent vocabulary",
            PrivacyWarning,
            stacklevel=4,
        )
    if config.spec.corpus_counts_artefact() is not None:
        warnings.warn(
            "santext-plus's protected set is derived from the private corpus (its least frequent words): which words "
            "are protected, and so the output, can reveal the corpus's rare words, outside the guarantee; prefer the "
            "embedding's order (--sensitive-fraction alone) or a public list (--sensitive-words)",
            PrivacyWarning,
            stacklevel=4,
        )


def unchanged_warning(prepared: Prepared, epsilon: float | None = None) -> dict[str, Any]:
    """Warn when ε is so large that most tokens come out as themselves (``stats.expected_unchanged``,
    on public words only); the figure goes into the manifest. ``epsilon``: a privacy unit's release, the
    median unit's per-token ε (known once the output's shape is)."""
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


class PerturbRelease:
    """Prepare, describe and account for the perturb release, on any engine (see the module docstring)."""

    command = "perturb"

    def __init__(self, config: PerturbConfig) -> None:
        self.config = config
        self.prepared: Prepared | None = None
        self.shipment: Shipment | None = None
        self.job_key = b""
        self.table: UnitTable | None = None  # a column: unit's (dpspark.unit_table)
        self.unit_order: str | None = None  # the order its cap counts in (dpspark.unit_table.ORDERS)
        self.unchanged: dict[str, Any] | None = None

    def prepare_over(self, passes: Passes, run_id: str) -> None:
        """The job key, a unit's checks, the preparation (embeddings, Σ, index, ...) and the shipped bundle."""
        c = self.config
        opt_in_warnings(c)
        alloc = c.allocation_of
        self.job_key = new_job_key(c.seed)
        columns = list(c.columns)
        # A column: unit's count: each person's tokens over the input (keyed hashes), before anything is prepared;
        # a text-level mechanism's draws follow the vocabulary, counted after the bundle is shipped (below).
        draws = c.unit.kind == "column" and c.spec.text_level
        if c.unit.kind == "column":
            if not draws:
                self.count_units(passes)
        elif alloc.kind == "cap" and alloc.over_cap == "refuse":  # before anything is prepared or written
            units.refuse_over_cap(*passes.over_cap(columns, int(alloc.cap)), alloc)  # type: ignore[arg-type]
        workdir = scratch_dir() / f"index-{run_id}"
        try:
            if c.vocab_from_corpus or c.spec.corpus_counts_artefact() is not None:
                self.prepared = self._prepare_from_corpus(passes.token_counts(columns), workdir)
            else:
                self.prepared = prepare(c, workdir=workdir)
            self.shipment = passes.ship(self.write_bundle)
            if draws:  # each person's draws, by the shipped bundle; then the bundle again, with the table
                self.count_units(passes, self.shipment)
                self.shipment.close()
                self.shipment = passes.ship(self.write_bundle)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        self.unchanged = unchanged_warning(self.prepared) if c.unit.is_token else None  # a unit's: after the pass

    def count_units(self, passes: Passes, shipment: Shipment | None = None) -> None:
        """A ``column:`` unit's table (``dpspark.unit_table``: each person's tokens, or with the mechanism's
        ``shipment`` its draws), checked: no null id, the unit's budget against its shape."""
        c = self.config
        counts = passes.unit_counts(str(c.unit.column), list(c.columns), self.job_key, shipment)
        units.refuse_null_ids(counts.nulls, c.unit)
        self.table, self.unit_order = counts.table(), counts.order
        units.check_units(self.table.unit_totals(), float(c.unit_budget), c.allocation_of)  # type: ignore[arg-type]
        if c.allocation_of.kind == "cap" and counts.order == "partitions":
            warnings.warn(
                f"the cap counts each {c.unit.column} value's tokens in {ORDERS['partitions']}: where that order "
                "follows the data (a query's, a shuffle's), the placeholders' positions can too; release files "
                "(their order is by path and row), or use --allocation scale",
                PrivacyWarning,
                stacklevel=3,
            )

    def _prepare_from_corpus(self, counts: dict[str, int], workdir: Path) -> Prepared:
        """The preparation of a vocabulary derived from the corpus (``vocab_from_corpus``: its most frequent
        embedded tokens, published by the output), or of a spec that requests the vocabulary's counts in it."""
        c = self.config
        emb = embeddings_of(c)
        words = most_frequent(counts, emb.word_index, c.vocab_size) if c.vocab_from_corpus else None
        in_corpus = None
        if c.spec.corpus_counts_artefact() is not None:  # the vocabulary's counts in the input, kept on the driver
            vocabulary = [emb.words[r] for r in vocabulary_rows(c, emb, words)]
            in_corpus = {w: counts[w] for w in vocabulary if w in counts}
        try:
            return prepare(c, embeddings=emb, workdir=workdir, vocab_words=words, corpus_counts=in_corpus)
        except VocabularyTooSmallError as exc:
            if words is None or len(words) >= c.vocab_size:
                raise
            raise corpus_too_short(c, len(words), emb.name, exc.needed) from None

    def write_bundle(self, directory: Any) -> None:
        """The prepared bundle, and a ``column:`` unit's table (``dpspark.unit_table``) beside it."""
        self.prepared.write_bundle(directory)
        if self.table is not None:
            self.table.save(directory)

    def sums(self) -> list[str]:
        """The per-row counts (``dpspark.text.COUNT_NAMES``) the release sums: the tokens, and the placeholders
        where any can be written (of ``--oov unk``, or of a cap)."""
        c = self.config
        return list(COUNT_NAMES if c.oov == "unk" or c.allocation_of.kind == "cap" else COUNT_NAMES[:1])

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
        allocation = alloc.fields()
        if alloc.kind == "cap" and self.unit_order is not None:  # a column: unit's cap counts in this order
            allocation["order"] = ORDERS[self.unit_order]
        out |= {"unit_budget": budget, "allocation": allocation, "unit_bound": bound, "unit_counts": counts}
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
        return observed["rows"], {k[len(units.SHAPE) :]: v for k, v in observed.items() if k.startswith(units.SHAPE)}

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
