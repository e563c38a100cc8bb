"""``dpspark privacy-risk``'s runner: the share of a corpus an informed attacker recovers (``dpspark.risk``).

No pyspark here: the corpus stays behind a ``dpspark.run.backend.Backend`` (``dpspark.spark.risk`` runs it
over Spark, where every primitive goes through DataFrames, so it runs on Spark Connect too):

1. the corpus's token counts (tokenised as perturb tokenises) give the attacker's prior
   over the corpus words that have a vector;
2. every corpus word is perturbed K times with the privacy statistics' own work items
   (``dpspark.stats.plan`` / ``engine.nw_sw.create``: the perturb mechanism, the same bundle),
   cut into two blocks of K/2 independent runs: the fitting half and the scoring half;
3. the attacks: settings with exact likelihoods take the exact attacker (``exact_attack``); every
   setting is also attacked on its runs (``FittedRuns``, the engine ``dpspark.engine.fitted_attack``): a
   task per (setting, span of corpus words) draws its words' fitting and scoring runs once and keeps
   their pair counts on the executors (the backend's ``keep``); pass 1 gives every output's five w with the largest
   prior(w)·count(w → u) in the fitting half, the model attacker's β is fitted on the executors from
   the counts of at most ``risk.MODEL_WORDS`` words and its guesses folded there too, and pass 2
   counts each word's hits on the scoring half; the driver turns that small table into shares and
   intervals (``risk.shares``). Settings without exact likelihoods: the fitting runs are doubled
   (drawn into the kept counts) until the figures move by less than ``--precision`` (``risk_rows``);
4. with ``--sensitive-words``, the per-document exposure (the backend's ``doc_exposures``): on the executors,
   each row holding a sensitive word, exactly or perturbed ``--doc-runs`` times;
5. per setting the shares with 95% intervals, a table, a plot and a manifest, committed
   all-or-nothing by the backend.

``risk_rows`` returns the per-setting rows without writing anything (for ``compare``).
The figures are computed from the raw corpus: an evaluation for the data owner, not a
release (the manifest says so).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import dpspark
from dpspark import report, risk
from dpspark.config import RiskConfig
from dpspark.embeddings import embeddings_of
from dpspark.engine import exact_attack as ea
from dpspark.engine import fitted_attack as fa
from dpspark.errors import InputDataError
from dpspark.mechanisms import grid_facts
from dpspark.prepare import prepare_grid
from dpspark.progress import Progress
from dpspark.rng import batch_generator, derive_key, new_job_key
from dpspark.run.backend import Backend, Data, Kept, pack, unpack
from dpspark.run.settings import mechanism_fields, token_spec, unit_grid, unit_line, unit_word
from dpspark.stats import WorkItem, plan
from dpspark.text import tokenize
from dpspark.wordfiles import read_word_list, warn_unmatched

log = logging.getLogger("dpspark")

PRIVACY_NOTE = (
    "An evaluation for the data owner, not a release: the word frequencies and every share are computed from the "
    "raw corpus. Keep these files with the raw data."
)


def guesses_on_executors(
    backend: Backend, items: list, scores_of: Any, bundle: str, corpus: ea.Corpus, step: str
) -> dict[int, ea.Guesses]:
    """An attacker's best guesses per output, per setting: one task per (setting, span of corpus words)
    of ``items``, each ``ea.create_guesses`` with ``scores_of(mechanism, setting)``'s scores on the
    executor; the partial tables merged on the driver."""

    load = backend.bundle

    def guesses(item: tuple[int, tuple[int, int]]) -> list[bytes]:
        s, span = item
        mech = load(bundle).mechanisms()[s]
        g = ea.create_guesses(scores_of(mech, s), mech.space, corpus, span)
        return [pack(g.score, g.word)]

    best: dict[int, ea.Guesses] = {}
    progress = Progress(f"privacy-risk: {step}", len(items), "tasks")
    for i, payload in backend.run_items(items, guesses, progress):
        g = ea.Guesses(*unpack(payload))
        s = items[i][0]
        best[s] = g if s not in best else ea.merge_guesses(best[s], g)
    return best


def attack_items(cores: int, settings: list[int], mechs: list, corpus: ea.Corpus) -> list:
    """(setting, span) work items: two tasks per core at least where the words allow, at most 16 spans
    per setting."""
    if not settings:
        return []
    parts = min(16, -(-2 * cores // len(settings)))
    return [(s, span) for s in settings for span in ea.spans(len(corpus.words), mechs[s].space.block, parts)]


def exact_attack(
    backend: Backend, bundle: str, mechs: list, prior: dict[int, float], sensitive: set[int], runs: int
) -> dict[int, dict[str, float] | None]:
    """``risk.exact_reidentification`` of every setting with a closed form (None for the others),
    folded on the executors: the engine's two passes (``dpspark.engine.exact_attack``), one task per
    (setting, span of corpus words); between them the merged guesses are shipped to the executors.
    Only the per-output guesses and the sums reach the driver, no text."""
    corpus = ea.Corpus.of(prior, sensitive)
    closed = [i for i, m in enumerate(mechs) if ea.has_closed_form(m, corpus)]
    out: dict[int, dict[str, float] | None] = dict.fromkeys(range(len(mechs)))
    if not closed:
        return out
    items = attack_items(backend.cores(), closed, mechs, corpus)

    best = guesses_on_executors(
        backend, items, lambda mech, s: ea.exact_scores(mech, corpus), bundle, corpus, "exact likelihoods, pass 1 of 2"
    )

    shipped = backend.ship_arrays({f"best-{s}": g.word for s, g in best.items()})
    load, read = backend.bundle, backend.shipped_array

    def hits(item: tuple[int, tuple[int, int]]) -> list[bytes]:
        s, span = item
        words = read(shipped, f"best-{s}")
        h = ea.create_hits(load(bundle).mechanisms()[s], corpus, span, words, runs)
        return [pack(np.array([start]), sums, nw) for start, (sums, nw) in h.blocks.items()]

    per_setting: dict[int, ea.Hits] = {s: ea.Hits({}) for s in closed}
    progress = Progress("privacy-risk: exact likelihoods, pass 2 of 2", len(items), "tasks")
    for i, payload in backend.run_items(items, hits, progress):
        start, sums, nw = unpack(payload)
        per_setting[items[i][0]].blocks[int(start[0])] = (sums, nw)
    for s in closed:
        out[s] = risk.finish(*ea.finish_hits(per_setting[s]))
    return out


def fit_cap(config: RiskConfig) -> int:
    """The most fitting runs per word the doubling may reach: ``--max-fit-runs``, by default 16 × K/2."""
    return config.max_fit_runs or 16 * (config.runs // 2)


def risk_rows(
    backend: Backend,
    config: RiskConfig,
    grid: Any,
    bundle: str,
    prior: dict[int, float],
    sensitive: set[int],
    doc: tuple[Data, str, dict[str, int], set[int]] | None = None,
    job_key: bytes | None = None,
) -> Measured:
    """The figures of every setting of ``grid`` as rows (dicts; nothing written): every attacker's shares
    and 95% intervals, the strongest attacker's (``top1``, ``top5``, ``attacker``), the convergence of the
    fitted likelihoods and, with ``doc``, the per-document exposure; the number of draws; and each
    setting's share of the wall time (``risk.cost_shares``), for a caller that estimates the time left.

    1. K runs per corpus word (``plan``), K/2 to fit the attack and K/2 to score it.
    2. Settings with exact likelihoods (``distribution``): the exact attacker, exact shares
       (``risk.exact_reidentification``); the runs' estimate stays beside them (``estimated_*``).
    3. The others: the fitted attacker and the model attacker, scored on the same K/2 runs. The
       fitting runs are doubled (new draws added to those already drawn) until the reported top-1
       and top-5 move by less than ``config.precision``, or ``config.max_fit_runs`` is reached
       (``converged`` False); ``fit_curve`` holds every step.

    Args:
        grid: the prepared grid (``dpspark.prepare.prepare_grid``), its bundle shipped as ``bundle``.
        prior: corpus word (embedding row) → its number of tokens, the words measured.
        sensitive: the embedding rows of the sensitive words among ``prior``.
        doc: (corpus, text column, token → embedding row of every corpus token with a vector, embedding
            rows of the sensitive words): the per-document exposure, ``config.doc_runs`` runs per row.
        job_key: the key of the runs' draws (default: a new one, or the seed's); a caller measuring a grid
            in parts gives each part its own.
    """
    specs, mechs = grid.specs, grid.mechanisms()
    rows = np.array(sorted(prior), dtype=np.int64)
    items = plan(specs, rows, config.runs, config.words_per_task, config.runs // 2)
    job_key = job_key or new_job_key(config.seed)
    t0 = time.perf_counter()
    exact = exact_attack(backend, bundle, mechs, prior, sensitive, config.runs)
    t1 = time.perf_counter()
    fitted = _Fitted.measure(backend, config, items, job_key, bundle, mechs, prior, sensitive, exact)
    t2 = time.perf_counter()
    exposure = {}
    if doc is not None:
        exposure = backend.doc_exposures(*doc, bundle, list(range(len(specs))), config.doc_runs, job_key)
    closed = {i for i, e in exact.items() if e is not None}
    shared = (t2 - t1 - fitted.fitted_s) + (time.perf_counter() - t2)
    seconds = risk.cost_shares(len(specs), closed, t1 - t0, fitted.fitted_s, shared)

    axes = report.axis_names()
    out = []
    for i, spec in enumerate(specs):
        fields = fitted.result[i]
        likelihood = "estimated: fitted runs and the model attacker"
        if exact[i] is not None:
            fields = {**risk.exact_row(exact[i]), **{f"estimated_{k}": fitted.result[i][k] for k in risk.RATES}}
            likelihood = "exact (closed form)"
        row = {
            "mechanism": spec.name,
            "setting": spec.series_label(),
            "epsilon": spec.epsilon,
            **{a: spec.axes().get(a) for a in axes},
            "runs": config.runs,
            "likelihood": likelihood,
            **{f"estimated_{k}": None for k in risk.RATES},
            **fields,
            "nw_mean": fitted.nw[i],
            "fit_runs": fitted.fit_runs[i],
            "converged": fitted.converged[i],
            "fit_curve": fitted.curve[i],
            "model_beta": fitted.betas.get(i),
        }
        if doc is not None:
            values, is_exact = exposure[i]
            v, lo, hi = risk.doc_interval(np.array(values), config.doc_runs, is_exact)
            row.update({"doc_exposure": v, "doc_exposure_lo": lo, "doc_exposure_hi": hi, "doc_rows": len(values)})
            row["doc_exposure_exact"] = is_exact
        out.append(row)
    draws = sum(len(it.rows) * it.runs for it in items)  # the fitting runs added included
    return Measured(out, draws, seconds)


def with_budget(row: dict[str, Any], epsilon: float) -> dict[str, Any]:
    """A measured setting's row with the grid's ε (a unit's budget E under a unit) as ``epsilon`` and the per-token
    ε it was measured at as ``token_epsilon`` beside it (equal under the token unit)."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        out[k] = epsilon if k == "epsilon" else v
        if k == "epsilon":
            out["token_epsilon"] = v
    return out


class Measured(NamedTuple):
    """``risk_rows``' result: a row per setting, the draws made, each setting's share of the seconds."""

    rows: list[dict]
    draws: int
    seconds: list[float]


def _point(fit_runs: int, result: dict) -> dict:
    """One step of a fit curve."""
    return {"fit_runs": fit_runs, "top1": result["top1"], "top5": result["top5"]}


class FittedRuns:
    """The fitted attacker's runs on the executors (``dpspark.engine.fitted_attack``): a task per (setting,
    span of corpus words), whose pair counts, fitting and scoring runs, are drawn once and kept there
    (the backend's ``keep``) while the passes read them and the doublings add to them. The driver receives the
    per-output guesses (top × V per setting), the model words' counts and the per-word hits: counts of
    public-noise draws, no text."""

    def __init__(
        self, backend: Backend, items: list, job_key: bytes, bundle: str, mechs: list, corpus: ea.Corpus
    ) -> None:
        self.backend, self.job_key, self.bundle, self.mechs, self.corpus = backend, job_key, bundle, mechs, corpus
        settings = sorted({it.setting for it in items})
        parts = min(16, -(-2 * backend.cores() // max(1, len(settings))))
        self.tasks = fa.tasks(items, corpus.words, parts)
        self.kept: Kept | None = None
        self.model_s = 0.0  # seconds of the model attacker's β and guesses: the fitted settings' own
        fit = [self._encoded(fa.items_of(t, items, corpus.words, risk.FIT_HALF)) for t in self.tasks]
        score = [self._encoded(fa.items_of(t, items, corpus.words, risk.SCORE_HALF)) for t in self.tasks]
        words, key, load = corpus.words, job_key, backend.bundle

        def draw(i: int) -> bytes:
            mechanisms = load(bundle).mechanisms()
            state = fa.create(_decoded(fit[i], words), _decoded(score[i], words), key, mechanisms)
            return pack(*state.arrays())

        self.kept = backend.keep(self.tasks, draw, self._progress("fitting and scoring runs"))

    def _progress(self, step: str) -> Progress:
        return Progress(f"privacy-risk: {step}", len(self.tasks), "tasks")

    def _encoded(self, items: list) -> np.ndarray:
        """Items as (item, setting, first word's position, words, runs, block) rows: the task's closure
        carries these numbers, not the words."""
        pos = np.searchsorted(self.corpus.words, [it.rows[0] for it in items]).astype(np.int64)
        rows = [(it.item, it.setting, p, len(it.rows), it.runs, it.block) for it, p in zip(items, pos)]
        return np.array(rows, dtype=np.int64).reshape(-1, 6)

    def add(self, extra: list, settings: set[int]) -> None:
        """Draw the fitting items ``extra`` of ``settings`` into the kept counts."""
        words, key, bundle, load = self.corpus.words, self.job_key, self.bundle, self.backend.bundle
        more = {
            i: self._encoded(fa.items_of(t, extra, words, risk.FIT_HALF))
            for i, t in enumerate(self.tasks)
            if t.setting in settings
        }

        def grow(i: int, payload: bytes) -> bytes:
            if i not in more:
                return payload
            state = fa.State.of(unpack(payload))
            mechanisms = load(bundle).mechanisms()
            return pack(*fa.add(state, _decoded(more[i], words), key, mechanisms).arrays())

        assert self.kept is not None
        self.kept = self.kept.update(grow, self._progress("more fitting runs"))

    def attack(self, settings: set[int], model_settings: set[int], prior: dict[int, float]) -> tuple[dict, dict]:
        """(per setting of ``settings``: its shares and intervals with ``nw_mean``, per setting of
        ``model_settings``: the model attacker's β) from the kept counts as they stand."""
        assert self.kept is not None
        corpus, bundle, tasks = self.corpus, self.bundle, self.tasks
        load, read = self.backend.bundle, self.backend.shipped_array
        model_words = risk.model_words(corpus.words)

        def pass1(i: int, payload: bytes) -> list[bytes]:
            t = tasks[i]
            if t.setting not in settings:
                return []
            state = fa.State.of(unpack(payload))
            g = fa.guesses(state, load(bundle).mechanisms()[t.setting].space, corpus)
            pairs = fa.model_pairs(state, model_words) if t.setting in model_settings else {}
            keys = np.array(list(pairs), dtype=np.int64).reshape(-1, 2)
            return [pack(g.score, g.word, keys, np.array(list(pairs.values()), dtype=np.int64))]

        best: dict[int, ea.Guesses] = {}
        fit: dict[int, dict[tuple[int, int], int]] = {s: {} for s in model_settings}
        for i, payload in self.kept.collect(pass1, self._progress("fitted attacker, pass 1 of 2")):
            score, word, keys, counts = unpack(payload)
            s = tasks[i].setting
            g = ea.Guesses(score, word)
            best[s] = g if s not in best else ea.merge_guesses(best[s], g)
            if s in model_settings:
                fit[s].update({(int(w), int(u)): int(c) for (w, u), c in zip(keys, counts)})
        t0 = time.perf_counter()
        model, betas = self.model_attacker(fit)
        arrays = {f"bayes-{s}": g.word for s, g in best.items()}
        arrays.update({f"seen-{s}": g.score[0] > 0 for s, g in best.items()})
        arrays.update({f"model-{s}": g.word for s, g in model.items()})
        self.model_s += time.perf_counter() - t0
        shipped = self.backend.ship_arrays(arrays)

        def pass2(i: int, payload: bytes) -> list[bytes]:
            t = tasks[i]
            if t.setting not in settings:
                return []
            s = t.setting
            state = fa.State.of(unpack(payload))
            space = load(bundle).mechanisms()[s].space
            bayes = ea.Guesses(read(shipped, f"seen-{s}")[None, :], read(shipped, f"bayes-{s}"))
            model = read(shipped, f"model-{s}") if s in model_settings else None
            table = fa.hits(state, space, bayes, model)
            words, nw = fa.nw(state)
            return [pack(words, nw, *(table[k] for k in ("word", *fa.HIT_COLUMNS)))]

        parts: dict[int, list[dict[str, np.ndarray]]] = {s: [] for s in settings}
        nw: dict[int, list[np.ndarray]] = {s: [] for s in settings}
        for i, payload in self.kept.collect(pass2, self._progress("fitted attacker, pass 2 of 2")):
            words, counts, *table = unpack(payload)
            s = tasks[i].setting
            parts[s].append(dict(zip(("word", *fa.HIT_COLUMNS), table)))
            nw[s].append(counts)
        sensitive = {int(w) for w in corpus.words[corpus.sensitive]}
        out = {}
        for s in sorted(settings):
            table = fa.finish_hits(parts[s])
            if not model_settings:  # no setting of this step has a model attacker: no such columns
                table = {k: v for k, v in table.items() if not k.startswith("model_")}
            nw_mean = float(np.concatenate(nw[s]).mean()) if nw[s] else math.nan
            out[s] = {**risk.shares(table, prior, sensitive), "nw_mean": nw_mean}
        return out, betas

    def model_attacker(self, fit: dict[int, dict[tuple[int, int], int]]) -> tuple[dict[int, ea.Guesses], dict]:
        """The model attacker of every setting of ``fit`` (its model words' fitting counts): per setting its
        merged guesses and its β, both computed on the executors, never on the driver: β by one task per
        setting (its counts shipped as files), the guesses as the exact attacker's (``guesses_on_executors``)."""
        if not fit:
            return {}, {}
        settings, bundle, load, read = sorted(fit), self.bundle, self.backend.bundle, self.backend.shipped_array
        arrays = {
            f"pairs-{s}": np.array([(*k, c) for k, c in sorted(f.items())]).reshape(-1, 3) for s, f in fit.items()
        }
        shipped = self.backend.ship_arrays(arrays)

        def beta(s: int) -> list[bytes]:
            space = load(bundle).mechanisms()[s].space
            pairs = {(int(w), int(u)): int(c) for w, u, c in read(shipped, f"pairs-{s}")}
            return [pack(np.array([risk.fit_beta(space, pairs)]))]

        progress = Progress("privacy-risk: model attacker's β", len(settings), "settings")
        betas = {settings[i]: float(unpack(b)[0][0]) for i, b in self.backend.run_items(settings, beta, progress)}
        corpus = self.corpus
        items = attack_items(self.backend.cores(), settings, self.mechs, corpus)
        best = guesses_on_executors(
            self.backend,
            items,
            lambda mech, s: ea.model_scores(mech.space, betas[s], corpus),
            bundle,
            corpus,
            "model attacker",
        )
        return best, betas

    def release(self) -> None:
        if self.kept is not None:
            self.kept.release()
            self.kept = None


def _decoded(rows: np.ndarray, words: np.ndarray) -> list[WorkItem]:
    """``FittedRuns._encoded``'s rows as the items they stand for."""
    return [
        WorkItem(int(i), int(s), tuple(int(w) for w in words[p : p + n]), int(r), int(b)) for i, s, p, n, r, b in rows
    ]


@dataclass
class _Fitted:
    """The runs' attack of every setting (``result``: shares and intervals, ``nw``: Nw out of the first K
    runs), with the fitting runs doubled for the settings without exact likelihoods until they converge:
    per setting its fitting runs, ``converged`` (None: exact likelihoods), the curve and the model's β."""

    result: dict[int, dict]
    nw: dict[int, float]
    fit_runs: dict[int, int]
    curve: dict[int, list[dict]]
    converged: dict[int, bool | None]
    betas: dict[int, float]
    fitted_s: float = 0.0  # seconds of the model attacker and the doubled fitting runs: the fitted settings' own

    @classmethod
    def measure(
        cls,
        backend: Backend,
        config: RiskConfig,
        items: list,
        job_key: bytes,
        bundle: str,
        mechs: list,
        prior: dict[int, float],
        sensitive: set[int],
        exact: dict[int, Any],
    ) -> _Fitted:
        """Draw ``items`` (the fitting runs added to it), fit and score every setting."""
        n, half = len(mechs), config.runs // 2
        fitted = {i for i, e in exact.items() if e is None}
        out = cls({}, {}, dict.fromkeys(range(n), half), {i: [] for i in range(n)}, dict.fromkeys(range(n)), {})
        runs = FittedRuns(backend, items, job_key, bundle, mechs, ea.Corpus.of(prior, sensitive))
        try:
            out.result, out.betas = runs.attack(set(range(n)), fitted, prior)
            out.fitted_s += runs.model_s
            out.nw = {i: r["nw_mean"] for i, r in out.result.items()}  # Nw of the first K runs, as privacy-stats
            for i in fitted:
                out.curve[i].append(_point(half, out.result[i]))
            t0 = time.perf_counter()
            out._double(config, runs, items, prior, fitted)
            out.fitted_s += time.perf_counter() - t0
        except BaseException:
            # The failure is what the user must see: releasing the kept runs can fail after it too (a JVM that ran
            # out of memory and ended), and must not put its own error in the failure's place.
            with contextlib.suppress(Exception):
                runs.release()
            raise
        runs.release()
        return out

    def _double(
        self, config: RiskConfig, runs: FittedRuns, items: list, prior: dict[int, float], fitted: set[int]
    ) -> None:
        """Double the fitting runs of the unconverged settings (new draws added to the kept counts and to
        ``items``) until top-1 and top-5 move by less than ``config.precision`` or the cap is reached."""
        pending, cap = set(fitted), fit_cap(config)
        while pending and 2 * max(self.fit_runs[i] for i in pending) <= cap:
            extra = risk.more_fit_items(items, pending, max(self.fit_runs[i] for i in pending))
            items += extra
            runs.add(extra, pending)
            step, betas = runs.attack(set(pending), set(pending), prior)
            self.betas.update(betas)
            for i in sorted(pending):
                self.fit_runs[i] *= 2
                self.curve[i].append(_point(self.fit_runs[i], step[i]))
                if not risk.moved(self.result[i], step[i], config.precision):
                    self.converged[i] = True
                    pending.discard(i)
                self.result[i] = {**step[i], "nw_mean": self.nw[i]}
        for i in pending:
            self.converged[i] = False


def assess(backend: Backend, config: RiskConfig, df: Data, local: Path, started: float, t0: float) -> dict[str, Any]:
    """The risk estimate of the corpus ``df`` behind ``backend`` (its text column checked): writes risk.parquet,
    summary.md and the plot into ``local`` and returns the manifest. ``started``: the run's start
    (``time.time()``), ``t0``: its preparation's (``time.perf_counter()``)."""
    emb = embeddings_of(config)
    corpus = _Corpus.count(backend, df, config, emb)
    specs = config.settings()
    # Under a unit the grid's ε are budgets E: each setting is measured at the per-token ε its budget gives the
    # median row (the privacy figures are per token), and its rows name both.
    unit = unit_grid(backend, config, [df], (config.text_column,))
    grid = prepare_grid(config, [token_spec(unit, spec) for spec in specs], local)
    vocab_rows = grid.vocab_rows
    shipment = backend.ship(lambda d: grid.write_bundle(d, config.embeddings_dir))
    if grid.annoy is not None:
        (local / "index.ann").unlink(missing_ok=True)
    half = config.runs // 2
    prep_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    doc = None
    if config.sensitive_words:
        index = {t: emb.word_index[t] for t in corpus.tokens if t in emb.word_index}
        listed = {emb.word_index[w] for w in corpus.listed if w in emb.word_index}
        doc = (df, config.text_column, index, listed & set(index.values()))
    measured, draws, _ = risk_rows(backend, config, grid, shipment.name, corpus.prior, corpus.sensitive, doc)
    table_rows = [with_budget(row, spec.epsilon) for row, spec in zip(measured, specs)]
    risk_s = time.perf_counter() - t0
    pq.write_table(pa.Table.from_pylist(table_rows), local / "risk.parquet")
    notes = _notes(config, specs, len(vocab_rows), corpus, table_rows)
    line = unit_line(unit)
    if line:  # under a unit: what the grid's ε is, and the per-token ε each setting was measured at
        notes.append(
            f"{line} Each setting is measured at the per-token ε its budget gives the median "
            f"{unit_word(unit)} (risk.parquet's token_epsilon): shorter ones get more, longer ones less."
        )
    (local / "summary.md").write_text(risk.summary_md(table_rows, "Re-identification risk", notes), encoding="utf-8")
    plot = risk.write_plot(table_rows, local, len(corpus.prior), len(vocab_rows), emb.name)
    first_draws = len(specs) * len(corpus.prior) * config.runs
    manifest = {
        "dpspark_version": dpspark.__version__,
        "command": "privacy-risk",
        "status": "succeeded",
        "run_id": backend.run_id,
        "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "privacy_note": PRIVACY_NOTE,
        "input": config.input,
        "text_column": config.text_column,
        "mechanism": config.mechanism,
        "mechanisms": list(dict.fromkeys(spec.name for spec in specs)),
        "settings": grid.facts(),
        "epsilons": config.grid_epsilons(),
        **grid_facts(specs, grid.space),  # each family's facts of the grid (the noise family's λ grid)
        **unit,  # the privacy unit; under a document unit the grid's ε are its budgets E
        "runs": config.runs,
        "fit_runs": half,
        "score_runs": half,
        "attacker": "the strongest per setting (column attacker) of: identity (u is its own original); bayes, "
        "argmax_w prior(w)·P(u|w) with exact likelihoods where the mechanism has a closed form, else fitted "
        "counts (unseen outputs guessed as themselves); model, P(u|w) ∝ exp(−β·d(w,u)) with β fitted on the runs",
        "precision": config.precision,
        "max_fit_runs": fit_cap(config),
        "doc_runs": config.doc_runs if config.sensitive_words else None,
        "corpus": {**corpus.facts(), "rows_with_sensitive_word": table_rows[0].get("doc_rows")},
        **mechanism_fields(config, emb, vocab_rows, grid.annoy),
        "draws": first_draws,
        "fit_draws_added": draws - first_draws,
        "results": table_rows,
        "files": ["risk.parquet", "summary.md", plot],
        "timings": {"preparation_s": round(prep_s, 3), "risk_s": round(risk_s, 3)},
        "duration_s": round(time.time() - started, 3),
    }
    return manifest


@dataclass
class _Corpus:
    """The corpus as privacy-risk measures it: its token counts (kept on the driver, never written), the
    words measured with their counts as the attacker's prior, and the sensitive words among them."""

    tokens: dict[str, int]
    embedded_tokens: int  # tokens with a vector
    prior: dict[int, float]  # embedding row → tokens, the words measured
    listed: list[str]  # the sensitive words given (lower case)
    sensitive: set[int]  # the embedding rows of those among ``prior``

    @classmethod
    def count(cls, backend: Backend, df: Data, config: RiskConfig, emb: Any) -> _Corpus:
        tokens = backend.token_counts(df, config.text_column)
        embedded = sorted(
            ((c, emb.word_index[t]) for t, c in tokens.items() if t in emb.word_index), key=lambda x: (-x[0], x[1])
        )
        if not embedded:
            raise InputDataError(
                f"text column {config.text_column!r} has no token with a vector in {emb.name}: nothing to measure"
            )
        measured = embedded[: config.max_words] if config.max_words else embedded
        prior = {w: float(c) for c, w in measured}
        listed: list[str] = []
        sensitive: set[int] = set()
        if config.sensitive_words:
            listed = read_word_list(config.sensitive_words)  # normalised as the tokenizer reads text
            warn_unmatched(config.sensitive_words, "sensitive words file", emb.word_index, f"the embedding {emb.name}")
            sensitive = {emb.word_index[w] for w in listed if w in emb.word_index and emb.word_index[w] in prior}
        return cls(tokens, sum(c for c, _ in embedded), prior, listed, sensitive)

    @property
    def coverage(self) -> float:
        """The share of the tokens with a vector that the measured words hold."""
        return sum(self.prior.values()) / self.embedded_tokens

    def facts(self) -> dict[str, Any]:
        return {
            "tokens": sum(self.tokens.values()),
            "tokens_with_vector": self.embedded_tokens,
            "words_measured": len(self.prior),
            "token_coverage": self.coverage,
            "sensitive_words_listed": len(self.listed),
            "sensitive_words_in_corpus": len(self.sensitive),
        }


def _notes(config: RiskConfig, specs: list, vocab_words: int, corpus: _Corpus, table_rows: list[dict]) -> list[str]:
    """summary.md's notes: the attacker, the runs, the coverage, what did not converge, the sensitive words."""
    half, all_tokens = config.runs // 2, sum(corpus.tokens.values())
    notes = [
        f"Attacker: knows the mechanism ({', '.join(dict.fromkeys(spec.name for spec in specs))}), the "
        f"embedding, the {vocab_words}-word "
        "vocabulary and the corpus word frequencies. Reported: the strongest of three attackers on the same "
        "scoring runs (column `attacker`): the identity guess (each released word is its own original: "
        "its top-1 is the unchanged share), the Bayes guess argmax prior(w)·P(u|w) with exact likelihoods "
        "where the mechanism has a closed form, else with likelihoods fitted on the runs (`bayes`), and "
        "for the latter also the model guess with P(u|w) ∝ exp(−β·d(w,u)), β fitted by maximum likelihood "
        "on the same runs (`model`).",
        f"Fitted likelihoods from K/2 = {half} runs per word, doubled with new runs until top-1 and top-5 move "
        f"by less than {100 * config.precision:g} percentage points (at most {fit_cap(config)} fitting runs); "
        f"scored on the other {half} independent runs. "
        f"{len(corpus.prior)} corpus words with a vector, {100 * corpus.coverage:.1f}% of the tokens with a vector "
        f"({100 * corpus.embedded_tokens / all_tokens:.1f}% of all tokens; the rest are released as [UNK]).",
        "In brackets: 95% intervals over the scoring runs (per-word binomial, Agresti–Coull; zero width "
        "for exact figures).",
    ]
    unconverged = [r["setting"] + f" ε={r['epsilon']:g}" for r in table_rows if r["converged"] is False]
    if unconverged:
        notes.append(
            f"Not converged at {fit_cap(config)} fitting runs (raise --max-fit-runs): {', '.join(unconverged)}."
        )
    if config.sensitive_words:
        notes.append(
            f"Sensitive words: {len(corpus.sensitive)} of the {len(corpus.listed)} listed occur in the corpus."
        )
        notes.append(
            f"Per-document exposure: the share of the {table_rows[0]['doc_rows']} rows holding a sensitive word "
            "in which one of their sensitive words appears anywhere in the perturbed row (exact where the "
            f"mechanism has a closed form, else from {config.doc_runs} perturbations of each row)."
        )
    return notes


# --- the per-document exposure of --sensitive-words: a kernel over rows, folded by either backend ----------


def doc_exposure_rows(
    texts: Sequence[str | None],
    ids: Iterable[int],
    index: dict[str, int],
    sensitive: set[int],
    mechs: list,
    settings: list[int],
    runs: int,
    job_key: bytes,
) -> dict[str, list]:
    """(setting, exposure, exact) of every row of ``texts`` holding a sensitive word, per setting
    (``risk.doc_exposure``). A row's draws come from ``batch_generator(key, row id, setting)`` under a key
    of their own (derived from ``job_key``); ``ids``: each row's id, stable for the same input."""
    key = derive_key(job_key, "doc-exposure")
    out: dict[str, list] = {"setting": [], "exposure": [], "exact": []}
    for text, rid in zip(texts, ids):
        toks = [index[t] for t in tokenize(text)[0] if t in index] if text else []
        sens = sorted(set(toks) & sensitive)
        if not sens:
            continue
        for s in settings:
            value, exact = risk.doc_exposure(
                mechs[s], np.array(toks), np.array(sens), runs, batch_generator(key, rid, s)
            )
            out["setting"].append(s)
            out["exposure"].append(value)
            out["exact"].append(exact)
    return out


def doc_exposures_of(parts: Iterable[dict[str, list]], settings: list[int]) -> dict[int, tuple[list[float], bool]]:
    """Per setting: the exposures of ``doc_exposure_rows``' parts, in their order, and whether all are exact."""
    result: dict[int, tuple[list[float], bool]] = {s: ([], True) for s in settings}
    for part in parts:
        for s, value, exact in zip(part["setting"], part["exposure"], part["exact"]):
            values, all_exact = result[s]
            values.append(value)
            result[s] = (values, all_exact and exact)
    return result
