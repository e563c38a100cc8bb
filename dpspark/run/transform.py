"""The release's transform of one partition, on every engine: Spark's tasks (``dpspark.spark.transform``) and
the local engine (``dpspark.local``) call the same function, so a partition's draws are the same wherever it
runs. Light: an executor imports this and what a bundle needs, nothing of the driver's preparation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpspark.arrow import numbers, numpy_dtype, to_numpy
from dpspark.embeddings import WordRows, mean_token_vectors
from dpspark.privemb import m1, privemb
from dpspark.rng import batch_generator
from dpspark.text import COUNT_NAMES, decode_strings, tokenize
from dpspark.unit_table import SEGMENT, Walk


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
    walk: Walk | None = None,
) -> Iterator[pa.RecordBatch]:
    """One partition of the release's transform, batch by batch: batch i of ``partition`` draws from
    ``batch_generator(job_key, partition, i)``; the bundle's resources (``load()``) are loaded at the first batch,
    so an empty partition loads nothing. Each batch gets the per-row ``counts`` columns (none: ``counts`` empty);
    a ``column:`` unit's tokens are walked in its segments' order (``walk``: ``dpspark.unit_table.Walk``), and
    the segment columns (``SEGMENT``) leave no output. A bundle holding a unit table is never released without
    its walk: each row would be a unit of its own."""
    perturber = cursor = None
    for number, batch in enumerate(batches):
        if perturber is None:
            shipped = load()
            perturber = shipped.perturber(vocabulary_only)
            if walk is not None:  # a column: unit: this partition's walk through its people's tokens
                cursor = walk.cursor(shipped.units, partition)
            elif shipped.units is not None and not vocabulary_only:
                raise ValueError("a column: unit's bundle released without its walk (dpspark.unit_table.Walk)")
        rng = batch_generator(job_key, partition, number)
        within = None if cursor is None else walk.within(cursor, batch)
        names, arrays, totals = perturber.perturb_batch(batch, rng, columns, keep, extra, within)
        if SEGMENT[0] in names:
            kept = [i for i, n in enumerate(names) if n not in SEGMENT]
            names, arrays = [names[i] for i in kept], [arrays[i] for i in kept]
        if counts:
            names += counts
            arrays += [numbers(totals[:, j], np.int64) for j in range(len(COUNT_NAMES))]
        yield pa.RecordBatch.from_arrays(arrays, names=names)


def row_draws(load: Callable[[], Any], columns: list[str]) -> Callable[[pa.RecordBatch], np.ndarray]:
    """Each row's draws over ``columns`` for a text-level mechanism (SynTF: ``TextPerturber.documents``, one per
    token with a vector or the spec's ``draws`` per text), with the bundle ``load()`` gives (loaded at the first
    batch): what a ``column:`` unit's count pass sums for that mechanism in place of tokens, as its release
    allocates a unit's budget over draws."""

    def lengths(batch: pa.RecordBatch) -> np.ndarray:
        perturber = load().perturber(False)
        return sum((perturber.documents(batch.column(c)).draws for c in columns), np.zeros(batch.num_rows, np.int64))

    return lengths


def mean_vectors(texts: list[str | None], vectors: np.ndarray, words: WordRows) -> tuple[np.ndarray, np.ndarray]:
    """Mean embedding of each text's tokens (texts without an embedded token get the zero vector).

    Returns (n_valid × d, mask of non-null rows).
    """
    valid = np.array([t is not None for t in texts], dtype=bool)
    return mean_token_vectors([tokenize(t)[0] for t in texts if t is not None], vectors, words), valid


def vector_partition(
    batches: Iterable[pa.RecordBatch],
    partition: int,
    column: str,
    job_key: bytes,
    phi: np.ndarray | None,
    epsilon: float,
    beta: float,
    d: int,
    out_type: pa.DataType,
    load: Callable[[], Any] | None,
) -> Iterator[pa.RecordBatch]:
    """One partition of release-vectors' transform: batch i of ``partition`` draws from ``batch_generator(job_key,
    partition, i)``; the column's vectors (or, with ``load``, a bundle's resources, the mean word vector of each
    text) become PrivEmb's private vectors with Φ (M1's without it); null rows stay null."""
    dim = d if phi is None else phi.shape[0]
    for number, batch in enumerate(batches):
        rng = batch_generator(job_key, partition, number)
        names, arrays = list(batch.schema.names), list(batch.columns)
        i = names.index(column)
        col = arrays[i]
        if load is not None:
            res = load()
            texts, _ = decode_strings(col)
            x, valid = mean_vectors(texts, res.vectors, res.words)
        else:
            valid = ~to_numpy(pc.is_null(col))  # pc functions: Array methods import pandas (dpspark.arrow)
            flat = np.asarray(to_numpy(pc.list_flatten(pc.drop_null(col))), dtype=np.float64)
            x = flat.reshape(int(valid.sum()), d)  # an all-null batch is a (0, d) matrix
        private = privemb(x, phi, epsilon, beta, rng) if phi is not None else m1(x, epsilon, rng)
        lengths = np.where(valid, dim, 0)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = numbers(private, numpy_dtype(out_type.value_type))
        # Null rows stay null (from buffers: ListArray.from_arrays takes no mask before pyarrow 9).
        lists = pa.Array.from_buffers(
            pa.list_(values.type),
            len(valid),
            [numbers(valid, np.bool_).buffers()[1], pa.py_buffer(offsets)],
            null_count=int((~valid).sum()),
            children=[values],
        )
        arrays[i] = lists.cast(out_type)
        yield pa.RecordBatch.from_arrays(arrays, names=names)
