"""A ``column:NAME`` unit's table: every person's tokens over the whole input, and where each task's rows
begin among them (docs/privacy-units.md).

A ``column:`` unit spreads a person's budget E over all of that person's tokens, wherever their rows are.
Each task of a release sees only its partition, so the release makes two passes over the same rows:

1. **count** (``task_counts``): each task hashes its rows' ids with a key derived from the run's job key
   (``id_hashes``: keyed BLAKE2b, 64 bits) and sums the tokens of each hashed id in its partition. The
   partial counts reach the driver as task results: no id is shuffled, in plain text or hashed.
2. **release** (``Cursor``): the driver's table (``UnitTable.build``) gives each (partition, person) the
   person's tokens in all and those in earlier partitions; each task walks its rows in order and gives each
   row its unit's total and the unit's tokens before it (``dpspark.units.allocate``'s ``within``).

The unit's order, in which a cap counts, is the input's: partitions in order, rows as read within one, a
row's text columns in the order given, a text's tokens left to right. Within a task it depends on where a row
is, never on what it says; Spark orders an input's read tasks by their size in bytes, which a cap's order then
follows (docs/privacy-units.md states this limit). A task that meets more of a person's tokens than the
count found (the input changed between the passes) stops the release (``UnitsChanged``): a person's tokens
would then get more than E.

The table holds 64-bit keyed hashes and counts: no id, no text, no key. Pure numpy and pyarrow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpspark.npy import load_npy
from dpspark.text import row_tokens

FILES = ("unit-partition", "unit-hash", "unit-start", "unit-count", "unit-total")


class UnitsChanged(RuntimeError):
    """A task met more of a person's tokens than the count pass found: the input changed between passes."""


def id_key(job_key: bytes) -> bytes:
    """The key of the ids' hashes, derived from the run's job key (never the job key itself)."""
    return hashlib.blake2b(job_key, digest_size=32, person=b"dpspark-unit-id").digest()


def id_hashes(ids: pa.Array | pa.ChunkedArray, key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(each id's keyed 64-bit hash as int64, whether it is null): ids of any scalar type, hashed as their text
    (binary ids as their bytes). ``key``: ``id_key``'s."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    null = np.asarray(ids.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_binary(ids.type) or pa.types.is_large_binary(ids.type):
        values = ids.to_pylist()
    else:
        text = ids if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type) else pc.cast(ids, pa.string())
        values = [None if v is None else v.encode("utf-8") for v in text.to_pylist()]
    out = np.zeros(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        if v is not None:
            out[i] = int.from_bytes(hashlib.blake2b(v, digest_size=8, key=key).digest(), "little", signed=True)
    return out, null


def task_counts(hashes: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One task's count: each hashed id of its rows (sorted) and the tokens of its rows."""
    keys, inverse = np.unique(np.asarray(hashes, dtype=np.int64), return_inverse=True)
    return keys, np.bincount(inverse, weights=np.asarray(tokens, dtype=np.int64), minlength=len(keys)).astype(np.int64)


def partition_counts(
    batches: Iterable[pa.RecordBatch],
    unit_column: str,
    columns: list[str],
    key: bytes,
    lengths: Callable[[pa.RecordBatch], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """One partition's count pass (``task_counts`` over its batches): its hashed ids, each one's tokens over
    ``columns`` (or, with ``lengths``, what ``lengths(batch)`` gives each row: a text-level mechanism's draws,
    ``dpspark.run.transform.row_draws``), and how many of its rows have a null id."""
    hashes, tokens, nulls = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], 0
    for b in batches:
        h, null = id_hashes(b.column(unit_column), key)
        n = row_tokens(b, columns) if lengths is None else lengths(b)
        hashes.append(h[~null])
        tokens.append(n[~null])
        nulls += int(null.sum())
    keys, sums = task_counts(np.concatenate(hashes), np.concatenate(tokens))
    return keys, sums, nulls


def _runs(keys: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Over ``keys`` sorted into runs of equal values, ``n`` per entry: each entry's sum of ``n`` over the
    entries before it in its run, and its run's number."""
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    run = np.cumsum(first) - 1
    before = np.cumsum(n) - n
    return before - before[first][run], run


@dataclass(frozen=True)
class UnitTable:
    """Per (partition, hashed id), sorted by partition then hash: the tokens of that id in earlier partitions
    (``start``), in this one (``count``) and in all (``total``)."""

    partition: np.ndarray
    hash: np.ndarray
    start: np.ndarray
    count: np.ndarray
    total: np.ndarray

    @classmethod
    def build(cls, partition: np.ndarray, hashes: np.ndarray, count: np.ndarray) -> UnitTable:
        """From every task's ``task_counts`` (one row per partition and hashed id)."""
        partition, hashes = np.asarray(partition, np.int64), np.asarray(hashes, np.int64)
        count = np.asarray(count, np.int64)
        by_unit = np.lexsort((partition, hashes))  # each unit's partitions in order
        n = count[by_unit]
        start, run = _runs(hashes[by_unit], n)
        total = np.bincount(run, weights=n).astype(np.int64)[run]
        back = np.empty_like(by_unit)
        back[by_unit] = np.arange(len(by_unit))
        table = cls(partition, hashes, start[back], count, total[back])
        order = np.lexsort((table.hash, table.partition))
        return cls(*(a[order] for a in (table.partition, table.hash, table.start, table.count, table.total)))

    def unit_totals(self) -> np.ndarray:
        """Each unit's tokens in all (one entry per unit: the shape the manifest states)."""
        _, first = np.unique(self.hash, return_index=True)
        return self.total[first]

    def save(self, directory: str | Path) -> None:
        for name, array in zip(FILES, (self.partition, self.hash, self.start, self.count, self.total)):
            np.save(Path(directory) / f"{name}.npy", array)

    @classmethod
    def load(cls, directory: str | Path) -> UnitTable | None:
        """The table saved in ``directory``, or None when it holds none (a release of another unit)."""
        d = Path(directory)
        if not (d / f"{FILES[0]}.npy").exists():
            return None
        return cls(*(load_npy(d / f"{name}.npy") for name in FILES))


@dataclass(frozen=True)
class Counts:
    """One frame's count pass: per (partition, hashed id) its tokens (``task_counts`` of every task), how many
    partitions the frame has, and how many of its rows have a null id."""

    partition: np.ndarray
    hash: np.ndarray
    count: np.ndarray
    partitions: int
    nulls: int


def joined(frames: list[Counts]) -> tuple[UnitTable, list[int]]:
    """One table over frames walked one after another (a labelled split's train half, then its test half): frame
    i's partitions follow frame i-1's, so a person's tokens in both count together and a cap's order is the
    frames' order. Returns the table and each frame's partition offset (``Walk.offset``)."""
    offsets = np.cumsum([0, *[f.partitions for f in frames]])[:-1].astype(int).tolist()
    partition = np.concatenate([np.zeros(0, np.int64), *[f.partition + o for f, o in zip(frames, offsets)]])
    hashes = np.concatenate([np.zeros(0, np.int64), *[f.hash for f in frames]])
    count = np.concatenate([np.zeros(0, np.int64), *[f.count for f in frames]])
    return UnitTable.build(partition, hashes, count), offsets


@dataclass(frozen=True)
class Walk:
    """How a release's tasks find their rows' people in a ``column:`` unit's table (the bundle's): the id
    ``column``, the job key the count pass hashed the ids with (``id_key`` of it), and where this frame's
    partitions start in the table (``joined``'s offset; 0 for a release's own input)."""

    column: str
    key: bytes
    offset: int = 0

    def cursor(self, table: UnitTable | None, partition: int) -> Cursor:
        if table is None:
            raise ValueError("a column: unit's walk over a bundle without its unit table")
        return Cursor(table, partition + self.offset, id_key(self.key))

    def __repr__(self) -> str:  # the key never reaches a log
        return f"Walk(column={self.column!r}, offset={self.offset})"


class Cursor:
    """One task's walk through its partition's rows (``within``: each row's unit total and the unit's tokens
    before it), checking that no person has more tokens here than the count pass found."""

    def __init__(self, table: UnitTable, partition: int, key: bytes) -> None:
        lo, hi = np.searchsorted(table.partition, [partition, partition + 1])
        self.hash, self.start = table.hash[lo:hi], table.start[lo:hi]
        self.count, self.total = table.count[lo:hi], table.total[lo:hi]
        self.seen = np.zeros(hi - lo, dtype=np.int64)
        self.key = key

    def within(self, ids: pa.Array | pa.ChunkedArray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For the next rows (their ids and tokens, in order): each row's unit total and unit tokens before it."""
        hashes, null = id_hashes(ids, self.key)
        at = np.searchsorted(self.hash, hashes)
        known = (at < len(self.hash)) & ~null
        known[known] = self.hash[at[known]] == hashes[known]
        if not known.all():
            raise UnitsChanged(f"{int((~known).sum())} row(s) of a person the count pass did not see in this task")
        tokens = np.asarray(tokens, dtype=np.int64)
        order = np.argsort(at, kind="stable")  # rows by unit, in their order within one
        a = at[order]
        before = np.empty_like(tokens)
        before[order] = self.start[a] + self.seen[a] + _runs(a, tokens[order])[0]
        np.add.at(self.seen, at, tokens)
        if np.any(self.seen > self.count):
            raise UnitsChanged("a person has more tokens in this task than the count pass found")
        return self.total[at], before
