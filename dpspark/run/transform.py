"""The release's transform of one partition, on every engine: Spark's tasks (``dpspark.spark.transform``) and
the local engine (``dpspark.local``) call the same function, so a partition's draws are the same wherever it
runs. Light: an executor imports this and what a bundle needs, nothing of the driver's preparation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from dpspark.arrow import numbers
from dpspark.rng import batch_generator
from dpspark.text import COUNT_NAMES
from dpspark.unit_table import Cursor, id_key


def count_columns(run_id: str) -> list[str]:
    """The hidden per-row count columns (``COUNT_NAMES``) of a release's transform: named by the run, so no input
    column can clash with them; the release sums them and drops them."""
    return [f"__dpspark_{run_id[:12]}_{n}" for n in COUNT_NAMES]


def perturb_partition(
    batches: Iterable[pa.RecordBatch],
    load: Callable[[], Any],
    partition: int,
    job_key: bytes,
    columns: list[str],
    keep: bool,
    counts: list[str],
    extra: tuple[str, ...] = (),
    vocabulary_only: bool = False,
    unit_column: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """One partition of the release's transform, batch by batch: batch i of ``partition`` draws from
    ``batch_generator(job_key, partition, i)``; the bundle's resources (``load()``) are loaded at the first batch,
    so an empty partition loads nothing. Each batch gets the per-row ``counts`` columns; a ``column:`` unit's
    tokens are walked in the partition's order (``dpspark.unit_table.Cursor``)."""
    perturber = cursor = None
    for number, batch in enumerate(batches):
        if perturber is None:
            shipped = load()
            perturber = shipped.perturber(vocabulary_only)
            if unit_column is not None:  # a column: unit: this partition's walk through its people's tokens
                cursor = Cursor(shipped.units, partition, id_key(job_key))
        rng = batch_generator(job_key, partition, number)
        within = None if cursor is None else partial(cursor.within, batch.column(unit_column))
        names, arrays, totals = perturber.perturb_batch(batch, rng, columns, keep, extra, within)
        names += counts
        arrays += [numbers(totals[:, j], np.int64) for j in range(len(COUNT_NAMES))]
        yield pa.RecordBatch.from_arrays(arrays, names=names)
