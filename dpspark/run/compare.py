"""``dpspark compare``'s runner: the word mechanisms side by side on a labelled dataset, and at equal
empirical privacy (issue: "Choose a mechanism and ε from evidence"). No pyspark here: the data stays behind
a ``dpspark.run.backend.Backend`` (``dpspark.spark.compare`` runs it over Spark).

Built from the engines the other commands use:

1. the labelled input, its fixed train/test split and the non-private baseline model, as
   ``evaluate-utility`` makes them (the backend reads and splits it);
2. for every setting of the grid (mechanisms × ε × each mechanism's own axes), R independent
   perturbations through the release's own executor transform:
   - **utility**: train-time (train on perturbed, test on plain) and test-time (the baseline
     model on perturbed test), mean and 95% interval over the R repeats;
   - **the field's privacy metrics** on the perturbed test split against its original, summed
     per partition on the executors (``dpspark.evaluation.field_metrics``): PP, LOW, CS, the
     share of dictionary words;
3. **re-identification** over the whole text column with the ``privacy-risk`` engine (its
   strongest attacker, intervals), beside the attacker's floor: guessing the corpus's most
   frequent words whatever the output (prior only);
4. MLDP's Nw/Sw (25 words × 100 trials, Sw without the word itself) and PUC, per setting;
5. **equal empirical privacy**: per mechanism, the ε at which top-1 re-identification (and the
   mean Nw as a share of K) reaches the target, by monotone interpolation over the grid, refined
   by extra ε points where the target falls between two grid points (``--refine`` rounds), and
   the utility there;
6. the recommendation under the user's bounds (``calibrate``'s: ``--max-utility-loss``,
   ``--max-reidentification``), or without bounds the best utility among the settings whose
   top-1 re-identification interval lies below the target; or why none qualifies, and where the
   feasible region would lie;
7. one report (``report.md``, a self-contained ``report.html``, ``frontier.png``),
   ``compare.parquet`` (a row per setting), ``equal_privacy.parquet`` and a manifest, committed
   all-or-nothing by the backend; logged to MLflow when it is installed and a run
   is active.

The outputs are computed from the raw data (the baseline, the examples, every figure): an
evaluation for the data owner, not a release. The manifest and the report say so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import dpspark
from dpspark import report, utility
from dpspark.config import CompareConfig
from dpspark.embeddings import embeddings_of
from dpspark.errors import ConfigError, InputDataError
from dpspark.evaluation import compare_report as cr
from dpspark.evaluation import field_metrics as fm
from dpspark.evaluation.compare_analysis import Analysis, round_robin
from dpspark.evaluation.compare_mlflow import log_to_mlflow
from dpspark.mechanisms import MechanismSpec
from dpspark.prepare import Prepared, prepare_grid
from dpspark.progress import Costs, duration, eta_line, log_progress, periodically
from dpspark.rng import derive_key, derived_generator, new_job_key
from dpspark.run.backend import Backend, Data, Shipment
from dpspark.run.risk import risk_rows
from dpspark.run.settings import (
    ORIGINAL,
    TEXT,
    UNIT,
    Halves,
    People,
    prepare_settings,
    release_bundle,
    setting_key,
    token_spec,
    unit_grid,
    unit_line,
    unit_word,
)
from dpspark.scratch import scratch_dir
from dpspark.text import tokenize
from dpspark.wordfiles import read_word_list, warn_unmatched

log = logging.getLogger("dpspark")

PROGRESS_EVERY = 20.0  # seconds between compare's run-wide progress lines


class CompareRun:
    """One run of ``compare``: the state its steps share (the split, the baseline, the grid), its data
    behind ``backend``."""

    def __init__(
        self,
        backend: Backend,
        config: CompareConfig,
        df: Data,
        train: Data,
        test: Data,
        values: list[Any],
        class_counts: list[int],
        local: Path,
    ) -> None:
        self.backend, self.config, self.df, self.train, self.test = backend, config, df, train, test
        self.halves = Halves(train, test)  # and, under a column: unit, their people (after the preparation)
        self.local = local  # the report's files are written here (the backend commits them)
        self.values, self.class_counts = values, class_counts
        self.n_classes = len(values)
        self.metrics = utility.metric_names(self.n_classes)
        if config.utility_metric not in self.metrics:
            raise ConfigError(
                f"utility_metric {config.utility_metric!r} is not measured for {self.n_classes} classes: choose one "
                f"of {', '.join(self.metrics)}"
            )
        self.model = backend.classifier(config.model, self.n_classes)
        self.master = new_job_key(config.seed)
        self.workdir = scratch_dir() / f"compare-{backend.run_id}"
        self.ships: list[Shipment] = []
        self.points: list[dict[str, Any]] = []  # one per setting measured, in order
        self.timings: dict[str, float] = {}
        self.skipped: list[dict[str, Any]] = []  # settings the vocabulary refuses, with the reason
        self.probe: Any = None  # a Space of the vocabulary, to ask each setting whether it can run
        self.costs = Costs()  # seconds per setting measured: the estimate of the time left
        self.pending: list[MechanismSpec] = []  # the settings of the stage being measured, not yet done
        self.kinds: dict[int, str] = {}  # id(spec) -> how its attacker gets its likelihoods (its main cost)
        self.planned_extra: float | None = None  # after the grid: the refinement or solve points still expected
        self.grid_epsilons: dict[str, list[float]] = {}
        self.solve_prior: float | None = None  # --solve: the points expected before any is measured
        self.unit: dict[str, Any] = {}  # the privacy unit's manifest fields (settings.unit_grid), after the baseline
        self.step, self.chunk_started = "preparation", time.monotonic()

    # --- the steps -------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        try:
            with periodically(PROGRESS_EVERY, self.report_progress):
                self.steps()
            log_progress(f"compare: {len(self.points)} settings measured in {duration(time.monotonic() - started)}")
        finally:
            for s in self.ships:
                s.close()
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.step = "writing the report"
        return self.publish()

    def steps(self) -> None:
        """Prepare, the baseline and vocabulary only, the grid, then the refinement (or solve) rounds."""
        c = self.config
        t0 = time.perf_counter()
        self.step = "preparing the grid's mechanisms"
        self.emb = embeddings_of(c)
        specs = self.usable(c.settings())
        preps = prepare_settings(c, specs, self.emb, self.workdir / "grid")
        self.first = preps[0]
        self.timings["preparation_s"] = time.perf_counter() - t0
        rounds, stage = (c.solve_rounds, "solve") if c.solve else (c.refine, "refinement")
        self.grid_epsilons = {}
        for spec in specs:
            self.grid_epsilons.setdefault(spec.series_label(), []).append(spec.epsilon)
        # solve: about three points per series and bound; refine: the outlook of the points measured so far
        if c.solve:
            self.solve_prior = 3.0 * len(self.grid_epsilons) * max(1, len(Analysis([], c, {}).bounds()))
        self.pending = list(specs)

        t0 = time.perf_counter()
        self.step = "the non-private baseline and vocabulary only"
        self.backend.describe("compare", "non-private baseline")
        if c.unit.kind == "column":  # each person's tokens over both halves, walked by every perturbed copy
            self.halves = Halves(
                self.train, self.test, People.count(self.backend, c.unit, [self.train, self.test], [TEXT], UNIT)
            )
        self.ships.append(self.backend.ship(release_bundle(self.first, self.halves.people)))
        self.base_bundle = self.ships[0].name
        self.fitted_plain = self.model.fit(self.train, self.base_bundle)
        self.baseline = self.model.score(self.fitted_plain, self.test, self.base_bundle)
        self.baseline["majority_label"] = self.values[self.baseline["majority_class"]]
        acc = self.baseline["accuracy"]  # one run: the Wilson interval alone
        self.baseline["beats_majority"] = utility.beats_majority(
            acc, acc, self.baseline["majority_rate"], self.baseline["test_rows"]
        )
        self.corpus = self.corpus_facts()
        self.unit = unit_grid(self.backend, c, [self.train, self.test], people=self.halves.people)
        self.vocabulary_only = self.measure_vocabulary_only()
        self.timings["baseline_s"] = time.perf_counter() - t0

        self.measure(preps, "grid")
        for round_ in range(rounds):
            analysis = self.analysis()
            extra = self.usable(analysis.solve_points() if c.solve else analysis.refinements())
            if not extra:
                break
            # this round's points, and half as many in each round left (at most two more)
            self.planned_extra = len(extra) / 2 * min(rounds - round_ - 1, 2)
            more = prepare_settings(c, extra, self.emb, self.workdir / f"{stage}-{round_}")
            self.measure(more, f"{stage} {round_ + 1}")
        self.planned_extra = 0.0

    def usable(self, specs: list[MechanismSpec]) -> list[MechanismSpec]:
        """The settings this vocabulary can take; the others (e.g. Truncated Gumbel at or below its
        threshold) are left out of the comparison with the mechanism's own reason, which the report
        lists. None usable: the first reason, as the command that refuses it would give it."""
        if self.probe is None:
            self.probe = prepare_grid(self.config, [], self.workdir / "probe", self.emb).space
        kept = []
        for spec in specs:
            try:
                spec.prepare(self.probe)
            except ConfigError as exc:
                self.skipped.append({"setting": spec.series_label(), "epsilon": spec.epsilon, "reason": str(exc)})
                continue
            kept.append(spec)
        if not kept and not self.points:
            raise ConfigError(f"no setting of the grid can run on this vocabulary: {self.skipped[0]['reason']}")
        return kept

    def measure(self, preps: list[Prepared], stage: str) -> None:
        """Utility, the text metrics, re-identification and MLDP's Nw/Sw of every setting of ``preps``, a
        chunk of settings at a time (two per executor core), the mechanisms taken in turn, so that the
        cost of each is measured early and the estimate of the time left holds; the points are kept in
        the order of ``preps``."""
        phase = "grid" if stage == "grid" else "refinement"
        for prep in preps:
            self.kinds[id(prep.spec)] = "exact likelihoods" if prep.mechanism.closed_form else "fitted likelihoods"
        order = round_robin(preps, lambda prep: prep.spec.series_label(), lambda prep: self.kinds[id(prep.spec)])
        self.pending = [prep.spec for prep in order]
        size = max(2, 2 * self.backend.cores())
        first = len(self.points)
        for k in range(0, len(order), size):
            chunk = order[k : k + size]
            self.step, self.chunk_started = f"{stage}: re-identification of {len(chunk)} settings", time.monotonic()
            t0 = time.perf_counter()
            self.backend.describe("compare", self.step)
            risks, shares = self.reidentification(chunk)
            spent = time.perf_counter() - t0
            total = sum(shares) or 1.0  # the chunk's own wall time, split as the attackers took it
            shares = [spent * x / total for x in shares]
            self.add_time(f"{phase}_reidentification_s", spent)
            for prep, risk_row, risk_share in zip(chunk, risks, shares):
                t0 = time.perf_counter()
                self.step = f"{stage}: {prep.spec.label()}, utility"
                point = self.point(prep, *self.utility_of(prep, stage), risk_row)
                point["time_s"] = round(time.perf_counter() - t0 + risk_share, 3)
                point["stage"] = stage
                self.points.append(point)
                self.pending.remove(prep.spec)
                self.costs.record(prep.spec.series_label(), prep.spec.name, point["time_s"], self.kinds[id(prep.spec)])
                self.add_time(f"{phase}_utility_s", time.perf_counter() - t0)
            self.chunk_started = time.monotonic()
        rank = {id(prep.spec): i for i, prep in enumerate(preps)}
        self.points[first:] = sorted(self.points[first:], key=lambda p: rank[id(p["spec"])])

    def utility_of(self, prep: Prepared, stage: str) -> tuple[dict[str, list[dict[str, float]]], Any]:
        """R perturbations of each split by the release's transform: the utility scores of both modes and
        the text metrics' sums (test split)."""
        c, spec = self.config, prep.spec
        self.backend.describe("compare", f"{stage}: {spec.label()}, {c.repeats} perturbations")
        if prep is self.first:
            bundle = self.base_bundle  # the baseline's bundle is the first setting's
        else:
            self.ships.append(self.backend.ship(release_bundle(prep, self.halves.people)))
            bundle = self.ships[-1].name
        scores: dict[str, list[dict[str, float]]] = {m: [] for m in utility.MODES}
        sums = None
        for r in range(c.repeats):
            for mode in utility.MODES:
                key = derive_key(self.master, mode, setting_key(spec), r)
                testing = mode == "test-time"
                walk = self.halves.walk(testing)
                noisy = self.backend.perturbed(self.halves.of(testing), bundle, key, keep=testing, walk=walk)
                try:
                    if testing:
                        scores[mode].append(
                            self.model.score(self.fitted_plain, self.backend.without(noisy, ORIGINAL), bundle)
                        )
                        aligned = not spec.text_level
                        part = self.backend.text_metric_sums(noisy, bundle, self.rare, c.pp_tokens, aligned)
                        sums = part if sums is None else sums + part
                    else:
                        fitted = self.model.fit(noisy, bundle)
                        scores[mode].append(self.model.score(fitted, self.test, bundle))
                finally:
                    self.backend.release(noisy)
        return scores, sums

    # --- the estimate of the time left -------------------------------------------------------------

    def remaining(self) -> float | None:
        """Seconds left in all: the settings of this stage not yet measured (each at its series', else
        its mechanism's, else its kind's, else the mean measured cost: ``Costs.estimate``) less the time
        the current chunk has run, and the refinement or solve points still expected (``expected_extra``)
        at the mean cost."""
        mean = self.costs.mean()
        if mean is None:
            return None

        def cost(spec: MechanismSpec) -> float:
            return self.costs.estimate(spec.series_label(), spec.name, self.kinds.get(id(spec))) or mean

        left = sum(map(cost, self.pending))
        running = sum(map(cost, self.pending[: max(2, 2 * self.backend.cores())]))
        left -= min(time.monotonic() - self.chunk_started, 0.9 * running)
        return max(left, 0.0) + self.expected_extra() * mean

    def expected_extra(self) -> float:
        """Refinement or solve points still expected: once the grid is measured, the next round's count
        and half as many per round left; while it is measured, the outlook of the points so far."""
        if self.planned_extra is not None:
            return self.planned_extra
        if self.solve_prior is not None:
            return self.solve_prior
        if not hasattr(self, "baseline"):  # nothing measured: one half per series (refinement_outlook's prior)
            return 0.5 * len(self.grid_epsilons) if self.config.refine else 0.0
        return self.analysis().refinement_outlook(self.grid_epsilons, self.config.refine)

    def report_progress(self) -> None:
        planned = len(self.points) + len(self.pending) + round(self.expected_extra())
        log_progress(eta_line("compare", len(self.points), planned, self.remaining(), self.step))

    def add_time(self, key: str, seconds: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + seconds

    def measure_vocabulary_only(self) -> dict[str, float]:
        """The utility at ε = ∞, both modes: every word replaced by its nearest vocabulary word (itself
        when it is one), every token without a vector by the placeholder, no noise
        (``dpspark.bundle.VocabularyOnly``). What the vocabulary alone costs: no ε does better."""
        self.backend.describe("compare", "vocabulary only (ε = ∞)")
        out: dict[str, float] = {}
        for mode in utility.MODES:
            testing = mode == "test-time"
            key = derive_key(self.master, "vocabulary-only", mode)
            text = self.backend.perturbed(
                self.test if testing else self.train, self.base_bundle, key, vocabulary_only=True
            )
            try:
                fitted = self.fitted_plain if testing else self.model.fit(text, self.base_bundle)
                scores = self.model.score(fitted, text if testing else self.test, self.base_bundle)
            finally:
                self.backend.release(text)
            out.update({f"{mode}_{m}": scores[m] for m in self.metrics})
        return out

    def point(self, prep: Prepared, scores: dict, sums: Any, risk_row: dict) -> dict[str, Any]:
        """One row of compare.parquet: the setting, its guarantee, utility, re-identification, metrics."""
        spec, c = prep.spec, self.config
        facts = spec.facts(prep.space)
        row: dict[str, Any] = {
            "spec": spec,
            "mechanism": spec.name,
            "setting": spec.series_label(),
            "epsilon": spec.epsilon,
            "token_epsilon": self.privacy_spec(spec).epsilon,  # the per-token ε of the privacy columns
            **{a: spec.axes().get(a) for a in report.axis_names()},
            "guarantee_type": facts["guarantee_type"],
            "guarantee_unit": facts["unit"],
        }
        for mode, runs in scores.items():
            for m in self.metrics:
                mean, lo, hi = utility.mean_ci([s[m] for s in runs])
                row[f"{mode}_{m}"], row[f"{mode}_{m}_lo"], row[f"{mode}_{m}_hi"] = mean, max(lo, 0.0), min(hi, 1.0)
        row.update(majority_columns(row, self.baseline))
        row.update(risk_row)
        text = finish_text_metrics(sums)
        row.update(text)
        row.update(self.mldp(prep, row[f"train-time_{c.utility_metric}"], text))
        row["examples"] = prep.perturber().perturb_texts(
            self.examples, derived_generator(self.master, "examples", setting_key(spec))
        )
        return row

    def report(self) -> cr.Comparison:
        """What the report says, as plain data (``dpspark.evaluation.compare_report`` renders it)."""
        emb = {"name": self.emb.name, "dim": self.emb.dim, "sha256": self.emb.sha256}
        return cr.Comparison(
            self.config,
            self.points,
            self.baseline,
            self.vocabulary_only,
            self.corpus,
            emb,
            len(self.first.vocab_rows),
            self.n_classes,
            self.examples,
            self.skipped,
            self.unit_sentence(),
        )

    def unit_sentence(self) -> str | None:
        line = unit_line(self.unit)
        if line is None:
            return None
        return (
            f"{line} Re-identification, the unchanged share and Nw/Sw are measured per token at the median "
            f"{unit_word(self.unit)}'s ε (compare.parquet's token_epsilon); utility and the text "
            "metrics come from the unit releases themselves."
        )

    def analysis(self) -> Analysis:
        """The analysis of the points measured so far (``dpspark.evaluation.compare_analysis``)."""
        return Analysis(self.points, self.config, self.baseline)

    # --- the outputs -----------------------------------------------------------------------------

    def table(self) -> pa.Table:
        """compare.parquet: one row per setting measured (grid and refinement points), no text."""
        rows = [{k: v for k, v in p.items() if k not in ("examples", "spec")} for p in self.points]
        axes = report.axis_names()
        columns: dict[str, pa.Array] = {}
        for name in rows[0]:
            values = [r.get(name) for r in rows]
            if name in axes:
                columns[name] = report.axis_column(values)
            elif all(v is None or isinstance(v, str) for v in values):
                columns[name] = pa.array(values, pa.string())
            elif all(v is None or isinstance(v, bool) for v in values):
                columns[name] = pa.array(values, pa.bool_())
            elif all(v is None or isinstance(v, int) and not isinstance(v, bool) for v in values):
                columns[name] = pa.array(values, pa.int64())
            else:
                columns[name] = pa.array([None if v is None else float(v) for v in values], pa.float64())
        return pa.table(columns)

    def publish(self) -> dict[str, Any]:
        c, local = self.config, self.local
        m = c.utility_metric
        analysis = self.analysis()
        chosen, why = analysis.recommend()
        equal = analysis.equal_privacy()
        table = self.table()
        pq.write_table(table, local / "compare.parquet")
        pq.write_table(pa.Table.from_pylist(equal), local / "equal_privacy.parquet")
        frontier = cr.write_frontier(
            local,
            self.points,
            m,
            self.baseline[m],
            self.corpus["floor_top1"],
            c.target_reidentification,
            chosen,
            max_reidentification=c.max_reidentification,
            max_utility_loss=c.max_utility_loss,
        )
        title = "Comparison of word mechanisms"
        sections = self.report().sections(chosen, why, equal, frontier)
        (local / "report.md").write_text(cr.render_md(title, sections), encoding="utf-8")
        (local / "report.html").write_text(cr.render_html(title, sections, local), encoding="utf-8")
        grid_points = len(self.points)
        spent = sum(p["time_s"] for p in self.points)
        manifest = {
            "dpspark_version": dpspark.__version__,
            "command": "compare",
            "status": "succeeded",
            "privacy_note": cr.PRIVACY_NOTE,
            "input": c.input,
            "text_column": c.text_column,
            "label_column": c.label_column,
            "classes": [{"label": v, "rows": n} for v, n in zip(self.values, self.class_counts)],
            "model": c.model,
            "model_params": self.model.params(),
            "utility_metric": m,
            "baseline": self.baseline,
            "repeats": c.repeats,
            "runs": c.runs,
            "mechanisms": list(dict.fromkeys(p["mechanism"] for p in self.points)),
            "settings": [p["setting"] for p in self.points],
            "epsilons": c.grid_epsilons(),
            **self.unit,  # the privacy unit; under a document unit the grid's ε are its budgets E
            "targets": {"reidentification": c.target_reidentification, "nw_fraction": c.target_nw_fraction},
            "bounds": {"max_utility_loss": c.max_utility_loss, "max_reidentification": c.max_reidentification},
            "recommended": None
            if chosen is None
            else {k: chosen[k] for k in ("mechanism", "setting", "epsilon", "top1", "top1_hi")},
            "recommendation": why,
            "skipped": self.skipped,
            "equal_privacy": equal,
            "corpus": self.corpus,
            "vocabulary_only": self.vocabulary_only,
            "solve": analysis.solutions() if c.solve else None,
            "embeddings": {"name": self.emb.name, "sha256": self.emb.sha256, "words": len(self.emb)},
            "vocabulary": {"size": int(len(self.first.vocab_rows))},
            "noise": "seeded (--seed): reproducible, tests and experiments only"
            if c.seed is not None
            else "operating system entropy",
            "seeded": c.seed is not None,
            "files": ["compare.parquet", "equal_privacy.parquet", frontier, "report.md", "report.html"],
            "timings": {
                **{k: round(v, 3) for k, v in self.timings.items()},
                "grid_points": grid_points,
                "per_grid_point_s": round(spent / max(grid_points, 1), 3),
            },
        }
        log_to_mlflow(manifest, table, local)
        return manifest

    # --- the corpus ------------------------------------------------------------------------------

    def corpus_facts(self) -> dict[str, Any]:
        """The split's sizes and the attacker's floor: the share of corpus tokens (with a vector, as
        privacy-risk counts them) recovered by guessing the most frequent word(s) whatever the output.
        Sets ``examples`` (rows of the test split for the report) and ``rare`` (LOW's least-occurring
        words of the test split): raw text, kept out of the manifest."""

        c = self.config
        n_train, n_test = self.backend.rows(self.train), self.backend.rows(self.test)
        texts = self.backend.texts(self.test, TEXT, 50 * max(c.examples, 1))
        self.examples = [t for t in texts if t is not None and len(tokenize(t)[0]) >= 4][: c.examples]
        test_counts = self.backend.token_counts(self.test, TEXT)
        self.rare = fm.least_occurring({t: n for t, n in test_counts.items() if fm.is_word(t)}, fm.LOW_WORDS)
        counts = self.backend.token_counts(self.df, c.text_column)
        index = self.emb.word_index
        ranked = sorted(((n, index[t]) for t, n in counts.items() if t in index), key=lambda x: (-x[0], x[1]))
        if not ranked:  # as privacy-risk refuses it: no corpus word for the attacker to recover
            raise InputDataError(
                f"text column {c.text_column!r} has no token with a vector in {self.emb.name}: nothing to measure"
            )
        embedded = [n for n, _ in ranked]
        vocabulary = set(self.first.vocab_rows.tolist())
        in_vocabulary = sum(n for n, w in ranked if w in vocabulary)
        measured = embedded[: c.max_words] if c.max_words else embedded
        total = sum(measured)
        # privacy-risk's prior: the measured corpus words (embedding rows) and their token counts
        self.prior = {w: float(n) for n, w in ranked[: len(measured)]}
        self.token_rows = {t: index[t] for t in counts if t in index}
        self.sensitive: set[int] = set()
        if c.sensitive_words:
            listed = read_word_list(c.sensitive_words)  # normalised as the tokenizer reads text
            warn_unmatched(c.sensitive_words, "sensitive words file", index, f"the embedding {self.emb.name}")
            self.sensitive = {index[w] for w in listed if w in index and index[w] in self.prior}
        return {
            "train_rows": n_train,
            "test_rows": n_test,
            "tokens": sum(counts.values()),
            "tokens_with_vector": sum(embedded),
            "tokens_in_vocabulary": in_vocabulary,
            "vocabulary_coverage": in_vocabulary / max(sum(counts.values()), 1),
            "vector_coverage": sum(embedded) / max(sum(counts.values()), 1),
            "words_measured": len(measured),
            "token_coverage": total / max(sum(embedded), 1),
            "floor_top1": measured[0] / total if total else math.nan,
            "floor_top5": sum(measured[:5]) / total if total else math.nan,
            "low_words": len(self.rare),
            "dictionary": fm.english_words(fallback=self.emb.words).source,
        }

    def reidentification(self, preps: list[Prepared]) -> tuple[list[dict[str, Any]], list[float]]:
        """The privacy-risk engine's figures of ``specs`` (``dpspark.run.risk.risk_rows``): the strongest
        known attacker's top-1 and top-5 with 95% intervals, the unchanged share, Nw, and with
        ``--sensitive-words`` the per-document exposure; and each setting's share of the seconds
        (``risk.cost_shares``: the exact attacker's to its settings, the fitted one's to its own)."""
        c = self.config
        specs = [self.privacy_spec(p.spec) for p in preps]
        if c.nn == "exact":  # the settings share one prepared grid (``prepare_settings``): no second preparation
            grid = dataclasses.replace(preps[0].grid, specs=specs)
        else:  # an annoy index per setting: the risk engine's own grid over them all
            grid = prepare_grid(c, specs, self.workdir / f"risk-{len(self.points)}", self.emb)
        self.ships.append(self.backend.ship(lambda d: grid.write_bundle(d, c.embeddings_dir)))
        doc = (self.df, c.text_column, self.token_rows, self.sensitive) if self.sensitive else None
        key = derive_key(self.master, "reidentification", *(setting_key(s) for s in specs))  # a part's own draws
        rows, _, seconds = risk_rows(self.backend, c, grid, self.ships[-1].name, self.prior, self.sensitive, doc, key)
        keep = [f"{k}{t}" for k in ("top1", "top5", "unchanged") for t in ("", "_lo", "_hi")]
        keep += ["attacker", "attacker_top5", "likelihood", "converged", "fit_runs"]
        keep += [f"doc_exposure{t}" for t in ("", "_lo", "_hi")] + ["doc_rows"]
        figures = [
            {**{k: r[k] for k in keep if k in r}, "nw_fraction": r["nw_mean"] / c.runs, "nw_mean": r["nw_mean"]}
            for r in rows
        ]
        return figures, seconds

    def privacy_spec(self, spec: MechanismSpec) -> MechanismSpec:
        """The setting whose per-token privacy figures stand for ``spec`` here (``settings.token_spec``)."""
        return token_spec(self.unit, spec)

    def mldp(self, prep: Prepared, utility_value: float, text: dict[str, float]) -> dict[str, Any]:
        """MLDP's Nw and Sw (``mldp_words`` words × ``mldp_trials`` trials, Sw without the word itself) on
        one public sample of vocabulary words for every setting, and the composite (``fm.PUC_DEFINITION``)."""
        c = self.config
        words = fm.mldp_words(prep.vocab_rows, c.mldp_words, np.random.default_rng(0))  # public words, not noise
        rng = derived_generator(self.master, "mldp", setting_key(prep.spec))
        d = fm.mldp_nw_sw(prep.mechanism.at(self.privacy_spec(prep.spec).epsilon), words, c.mldp_trials, rng)
        out: dict[str, Any] = {"mldp_nw": d.mean_nw, "mldp_sw": d.mean_sw}
        out["mldp_exact_nw"], out["mldp_exact_sw"] = d.exact_mean_nw, d.exact_mean_sw
        try:
            comp = fm.puc(
                utility=utility_value,
                baseline_utility=self.baseline[c.utility_metric],
                pp=text["pp"],
                low=text["low"],
                cs=text["cs"],
                nw=d.mean_nw,
                sw=d.mean_sw,
                trials=c.mldp_trials,
            )
            out.update(privacy_score=comp.privacy, relative_utility=comp.utility, puc=comp.puc)
        except ConfigError:  # a metric is undefined here (e.g. no rare word in the test split)
            out.update(privacy_score=None, relative_utility=None, puc=None)
        return out


def majority_columns(row: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """compare.parquet's majority-class columns of a point: the test split's rate, whether each mode's
    accuracy beats it (``utility.beats_majority``) and whether both do (``beats_majority``)."""
    rate, rows = baseline["majority_rate"], baseline["test_rows"]
    out: dict[str, Any] = {"majority_rate": rate}
    for mode in utility.MODES:
        out[f"{mode}_beats_majority"] = utility.beats_majority(
            row[f"{mode}_accuracy"], row[f"{mode}_accuracy_lo"], rate, rows
        )
    out["beats_majority"] = all(out[f"{mode}_beats_majority"] for mode in utility.MODES)
    return out


TEXT_SUMS = ("pp", "low", "cs", "dictionary")  # each a (numerator, denominator) pair, summed over batches


def text_sums(
    res: Any,
    perturbed: list[str | None],
    original: list[str | None],
    rare: frozenset[str],
    first: int | None,
    aligned: bool,
) -> np.ndarray:
    """The (numerator, denominator) pairs of ``TEXT_SUMS`` over a batch of rows (perturbed text, the original
    beside it), from a shipped bundle's resources ``res``: an engine's partial, added over batches."""
    if "dictionary" not in res.derived:
        res.derived["dictionary"] = fm.english_words(fallback=res.words.take(np.arange(len(res.words))))
    pert = [(t or "").split() for t in perturbed]  # layout single: one field per token
    orig = [tokenize(t or "")[0] for t in original]
    parts = [
        fm.perturbation_partial(orig, pert, first, aligned),
        fm.low_partial(orig, pert, rare, aligned),
        fm.cosine_partial(orig, pert, fm.mean_vector_encoder(res.vectors, res.words)),
        fm.dictionary_partial(pert, res.derived["dictionary"]),
    ]
    return np.array([float(part[i]) for part in parts for i in (0, 1)], dtype=np.float64)


def finish_text_metrics(sums: np.ndarray | None) -> dict[str, float]:
    """PP, LOW, CS and the dictionary share from their (numerator, denominator) sums (NaN: none measured)."""
    if sums is None:
        return {name: math.nan for name in TEXT_SUMS}
    return {name: fm.finish((sums[2 * i], sums[2 * i + 1])) for i, name in enumerate(TEXT_SUMS)}
