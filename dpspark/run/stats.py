"""``dpspark privacy-stats``' runner: Nw and Sw of every (setting, word), no pyspark here.

Each work item (a setting, a chunk of words, a block of runs; ``dpspark.stats.plan``) is drawn where the data
is with the same code as perturb (``dpspark.engine.nw_sw``) and folded there; the backend's ``nw_sw`` returns
only the small per-word result, from which this writes the tables, the plots and the manifest, beside the
exact E[Nw] and E[Sw] of the mechanisms with a closed form.
"""

from __future__ import annotations

import logging
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import dpspark
from dpspark import report
from dpspark.config import StatsConfig
from dpspark.embeddings import Embeddings
from dpspark.mechanisms import grid_facts
from dpspark.prepare import Grid, prepare_grid
from dpspark.rng import new_job_key
from dpspark.run.backend import Backend
from dpspark.run.settings import mechanism_fields, token_spec, unit_grid, unit_line, unit_word
from dpspark.scratch import scratch_dir
from dpspark.stats import exact_nw_sw, plan, rows_of_words, sample_words
from dpspark.wordfiles import read_word_list

log = logging.getLogger("dpspark")


def choose_words(config: StatsConfig, emb: Embeddings, vocab_rows: np.ndarray, backend: Backend) -> tuple:
    """(embedding rows of the words to measure, the rule in words)."""
    if config.word_list:
        words = read_word_list(config.word_list)
        return rows_of_words(words, emb.word_index, vocab_rows), f"word list {config.word_list}"
    if config.corpus:
        in_vocab = {emb.words[r]: int(r) for r in vocab_rows}
        words = backend.corpus_vocabulary(config.corpus, list(config.columns), config.words, in_vocab)
        return np.array(sorted(in_vocab[w] for w in words), np.int64), (
            f"the {len(words)} most frequent vocabulary words of {config.corpus}"
        )
    rows = sample_words(vocab_rows, config.words, config.words_seed)
    return rows, (
        f"{len(rows)} vocabulary words drawn uniformly without replacement with "
        f"numpy.random.default_rng({config.words_seed})"
    )


def exact_statistics(grid: Grid, word_rows: np.ndarray, runs: int) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Per setting, E[Nw] and E[Sw] of every measured word from the mechanism's closed form
    (None for the noise family, which has none: its figures are the Monte Carlo's alone)."""
    return [exact_nw_sw(mech, word_rows, runs) for mech in grid.mechanisms()]


def per_word_table(specs: list, result: dict, words: Any, exact: list, word_rows: np.ndarray) -> pa.Table:
    """per_word.parquet: one row per (setting, word): mechanism, ε, one column per axis of every
    registered mechanism (null where it is not the setting's), the Monte Carlo's Nw, Sw and K, and
    the exact E[Nw], E[Sw] where the mechanism has a closed form (null otherwise)."""
    keys = sorted(result)
    at = {int(r): i for i, r in enumerate(word_rows)}
    axes = report.axis_names()
    columns: dict[str, pa.Array] = {
        "mechanism": pa.array([specs[k[0]].name for k in keys], pa.string()),
        "epsilon": pa.array([specs[k[0]].epsilon for k in keys], pa.float64()),
    }
    for axis in axes:
        columns[axis] = report.axis_column([specs[k[0]].axes().get(axis) for k in keys])
    columns.update(
        {
            "word": pa.array([words[k[1]] for k in keys], pa.string()),
            "rank": pa.array([k[1] for k in keys], pa.int64()),
            "nw": pa.array([result[k][0] for k in keys], pa.int64()),
            "sw": pa.array([result[k][1] for k in keys], pa.int64()),
            "runs": pa.array([result[k][2] for k in keys], pa.int64()),
            "exact_nw": pa.array(
                [None if exact[k[0]] is None else float(exact[k[0]][0][at[k[1]]]) for k in keys], pa.float64()
            ),
            "exact_sw": pa.array(
                [None if exact[k[0]] is None else float(exact[k[0]][1][at[k[1]]]) for k in keys], pa.float64()
            ),
        }
    )
    return pa.table(columns)


def measure(backend: Backend, config: StatsConfig, local: Path, started: float) -> dict[str, Any]:
    """The statistics of every (setting, word) behind ``backend``: per_word.parquet, the summaries and the plots
    written into ``local``; returns the manifest. ``started``: the run's start (``time.time()``)."""
    run_id = backend.run_id
    work = scratch_dir() / f"stats-{run_id}"
    work.mkdir()
    shipment = None
    try:
        t0 = time.perf_counter()
        budgets = config.settings()
        # Under a unit the grid's ε are budgets E: each setting is measured at the per-token ε its budget gives the
        # median unit of the corpus (a document, or a person's rows: Nw and Sw are per token), its rows naming both.
        of = config.unit
        documents = [] if of.is_token else [backend.corpus(str(config.corpus), list(config.columns), of)]
        unit = unit_grid(backend, config, documents, tuple(config.columns))
        specs = [token_spec(unit, spec) for spec in budgets]
        grid = prepare_grid(config, specs, work)
        emb, vocab_rows = grid.embeddings, grid.vocab_rows
        word_rows, rule = choose_words(config, emb, vocab_rows, backend)
        items = plan(specs, word_rows, config.runs, config.words_per_task, config.runs_per_task)
        shipment = backend.ship(lambda d: grid.write_bundle(d, config.embeddings_dir))
        prep_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        backend.describe("privacy-stats", f"Nw/Sw of {len(word_rows)} words at {len(items)} work items")
        result = backend.nw_sw(items, new_job_key(config.seed), shipment.name)
        draws = len(specs) * len(word_rows) * config.runs
        compute_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        exact = exact_statistics(grid, word_rows, config.runs)
        exact_s = time.perf_counter() - t0
        table = per_word_table(specs, result, emb.words, exact, word_rows)
        if "unit_counts" in unit:  # ε: each setting's budget E; token_epsilon: the per-token ε it was measured at
            token = table.column("epsilon")
            budget = pa.array([budgets[k[0]].epsilon for k in sorted(result)], pa.float64())
            at = table.schema.get_field_index("epsilon")
            table = table.set_column(at, "epsilon", budget).add_column(at + 1, "token_epsilon", token)
        pq.write_table(table, local / "per_word.parquet")
        summary = report.write_summary(table, local)
        line = unit_line(unit)
        if line:  # under a unit: what the tables' ε is, and the per-token ε each setting was measured at
            with open(local / "summary.md", "a", encoding="utf-8") as f:
                f.write(
                    f"{line} Each setting is measured at the per-token ε its budget gives the median "
                    f"{unit_word(unit)} (per_word.parquet's token_epsilon): shorter ones get more, "
                    "longer ones less.\n"
                )
        plots = report.write_plots(table, local, len(vocab_rows), emb.name)
        manifest = {
            "dpspark_version": dpspark.__version__,
            "command": "privacy-stats",
            "run_id": run_id,
            "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
            "epsilons": config.grid_epsilons(),
            **unit,  # the privacy unit; under a document unit the grid's ε are its budgets E
            **grid_facts(specs, grid.space),  # each family's facts of the grid (the noise family's λ grid)
            "mechanisms": list(dict.fromkeys(spec.name for spec in specs)),
            "settings": grid.facts(),
            "exact_statistics": sorted({spec.name for spec in specs if exact[specs.index(spec)] is not None}),
            "runs": config.runs,
            "words": int(len(word_rows)),
            "word_rule": rule,
            **mechanism_fields(config, emb, vocab_rows, grid.annoy),
            "draws": draws,
            "tasks": len(items),
            "timings": {
                "preparation_s": round(prep_s, 3),
                "statistics_s": round(compute_s, 3),
                "exact_statistics_s": round(exact_s, 3),
                "draws_per_s": round(draws / compute_s, 1),
            },
            "files": ["per_word.parquet", "summary.csv", "summary.md", *plots],
            "summary": summary,
            "duration_s": round(time.time() - started, 3),
        }
        manifest["status"] = "succeeded"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if shipment is not None:
            shipment.close()
    return manifest
