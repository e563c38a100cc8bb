"""``dpspark evaluate-utility``'s runner: how much worse does a model get on perturbed text? No pyspark here:
the labelled split's halves stay behind a ``dpspark.run.backend.Backend`` (``dpspark.spark.utility`` reads,
checks and splits the input, and runs this over Spark).

1. the non-private **baseline**: the model trained on plain train, scored on plain test;
2. for every setting of the grid (``config.settings()``: mechanisms × ε × each mechanism's own axes; without
   ``--mechanisms`` the noise family's default grid), one ``dpspark.prepare.Prepared`` (the vocabulary, the
   index and the mechanisms' artefacts prepared once and shared under exact search) and one shipped bundle,
   then R independent perturbations (each its own job key, ``dpspark.rng.derive_key(the run's key, mode,
   the setting's parameters, repeat)``) through the release's own transform:
   - **train-time**: train on perturbed train, score on plain test;
   - **test-time**: the baseline model scores perturbed test;
3. results and summary Parquet (model, mode, mechanism, setting, ε, one column per grid axis, ``lambda``
   first, null where it is not the setting's), ``summary.md`` (a row per setting, columns ε), plots with 95%
   CI bands (a line per setting) and the manifest; the backend commits them all-or-nothing.

The outputs are computed from the raw data (the baseline most plainly): an evaluation for the data owner, not
a release. The manifest says so.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import dpspark
from dpspark import report, utility
from dpspark.config import EvaluateUtilityConfig
from dpspark.embeddings import embeddings_of
from dpspark.mechanisms import grid_facts
from dpspark.prepare import Prepared
from dpspark.progress import Progress
from dpspark.rng import derive_key, new_job_key
from dpspark.run.backend import Backend, Classifier, Data, Shipment
from dpspark.run.settings import (
    TEXT,
    UNIT,
    Halves,
    People,
    prepare_settings,
    release_bundle,
    setting_key,
    unit_grid,
    unit_line,
)
from dpspark.scratch import scratch_dir

log = logging.getLogger("dpspark")

PRIVACY_NOTE = (
    "An evaluation for the data owner, not a release: the baseline and every metric are computed from the raw "
    "data (labels and plain text). Keep these files with the raw data."
)


def evaluate(
    backend: Backend,
    config: EvaluateUtilityConfig,
    train: Data,
    test: Data,
    values: list[Any],
    class_counts: list[int],
    local: Path,
) -> dict[str, Any]:
    """The evaluation of the split's halves behind ``backend`` (see the module docstring): writes its files into
    ``local`` and returns the manifest."""
    n_classes = len(values)
    metrics = utility.metric_names(n_classes)
    model = backend.classifier(config.model, n_classes)
    modes = utility.MODES if config.mode == "both" else (config.mode,)
    n_train, n_test = backend.rows(train), backend.rows(test)
    people = People.count(backend, config.unit, [train, test], [TEXT], UNIT) if config.unit.kind == "column" else None
    unit = unit_grid(backend, config, [train, test], people=people)
    specs = config.settings()
    axes = report.axis_names()
    workdir = scratch_dir() / f"utility-{backend.run_id}"
    ships: list[Shipment] = []
    try:
        t0 = time.perf_counter()
        emb = embeddings_of(config)
        preps = prepare_settings(config, specs, emb, workdir)
        first = preps[0]
        prep_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        backend.describe("evaluate-utility", "non-private baseline")
        ships.append(backend.ship(release_bundle(first, people)))
        base_bundle = ships[0].name
        fitted_plain = model.fit(train, base_bundle)
        baseline = {"mechanism": None, "setting": None, "epsilon": None, **dict.fromkeys(axes)}
        results: list[dict[str, Any]] = [
            {"mode": utility.BASELINE, **baseline, "repeat": 0, **model.score(fitted_plain, test, base_bundle)}
        ]
        baseline_s = time.perf_counter() - t0
        log.info("evaluate-utility baseline: %s", {m: round(results[0][m], 4) for m in metrics})

        halves = Halves(train, test, people)
        point_s = _score_settings(backend, config, model, preps, ships, halves, fitted_plain, results)
    finally:
        for s in ships:
            s.close()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = utility.summarise(results, metrics)
    pq.write_table(result_table(results, config.model, axes, metrics), local / "results.parquet")
    pq.write_table(summary_table(summary, axes, metrics), local / "summary.parquet")
    names = list(dict.fromkeys(spec.name for spec in specs))
    rows = (n_train, n_test)
    plots = _write_summary(
        config, summary, metrics, names, len(first.vocab_rows), emb.name, values, rows, local, unit_line(unit)
    )
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
        "split": {"method": utility.SPLIT_METHOD, "test_fraction": config.test_fraction, "seed": config.split_seed},
        "model": config.model,
        "model_params": model.params(),
        "modes": list(modes),
        "metrics": list(metrics),
        "mechanism": config.mechanism,
        "mechanisms": names,
        "settings": [prep.spec.facts(prep.space) for prep in preps],
        "epsilons": config.grid_epsilons(),
        **unit,  # the privacy unit; under a document unit the grid's ε are its budgets E
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
    local: Path,
    unit: str | None = None,
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
    if unit:
        notes.append(unit)
    base = utility.baseline_of(summary)
    label = values[base["majority_class"]] if base.get("majority_class") is not None else None
    md = utility.summary_md(summary, metrics, "Utility of perturbed text", notes, len(values), label)
    (local / "summary.md").write_text(md, encoding="utf-8")
    majority = base["majority_rate"]
    return utility.write_plots(summary, metrics, local, config.model, vocab_words, embeddings, majority)


def _score_settings(
    backend: Backend,
    config: EvaluateUtilityConfig,
    model: Classifier,
    preps: list[Prepared],
    ships: list[Shipment],
    halves: Halves,
    fitted_plain: Any,
    results: list[dict[str, Any]],
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
        backend.describe("evaluate-utility", f"{spec.label()}, {config.repeats} perturbations")
        t0 = time.perf_counter()
        if prep is preps[0]:
            shipment = ships[0]  # the baseline's bundle is the first setting's
        else:
            shipment = backend.ship(release_bundle(prep, halves.people))
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
                testing = mode == "test-time"
                noisy = backend.perturbed(halves.of(testing), shipment.name, key, walk=halves.walk(testing))
                try:
                    if not testing:
                        scores = model.score(model.fit(noisy, shipment.name), halves.test, shipment.name)
                    else:
                        scores = model.score(fitted_plain, noisy, shipment.name)
                finally:
                    backend.release(noisy)
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
