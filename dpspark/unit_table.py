"""A ``column:NAME`` unit's table: every person's tokens over the whole input, and where each task's rows
begin among them (docs/privacy-units.md).

A ``column:`` unit spreads a person's budget E over all of that person's tokens, wherever their rows are.
Each task of a release sees only its partition, so the release makes two passes over the same rows:

1. **count** (``partition_counts``): each task hashes its rows' ids with a key derived from the run's job key
   (``id_hashes``: keyed BLAKE2b, 64 bits) and sums the tokens of each hashed id in each of its **segments**.
   The partial counts reach the driver as task results: no id is shuffled, in plain text or hashed.
2. **release** (``Walk``, ``Cursor``): the driver's table (``counted``, ``UnitTable.build``) gives each
   (segment, person) the person's tokens in all and those in earlier segments; each task walks its rows in
   order and gives each row its unit's total and the unit's tokens before it (``dpspark.units.allocate``'s
   ``within``).

A segment is a run of rows that a task reads in a fixed order: one read split of one file (``SEGMENT``: the
file's path and the split's first byte, from Spark's file metadata), or, for a frame that has no file
metadata, one whole partition (``("", partition)``). Segments are ordered by path, then first byte: the
unit's order, in which a cap counts, is then the files' by path, rows in file order, a row's text columns in
the order given, a text's tokens left to right. It depends on where a row is, never on what it says, however
Spark packs the splits into tasks (by their size in bytes, which follows the text). A frame without file
metadata follows its partitions' order (``segment_order`` says which). A task that meets more of a person's
tokens than the count found (the input changed between the passes) stops the release (``UnitsChanged``): a
person's tokens would then get more than E.

The table holds 64-bit keyed hashes and counts: no id, no text, no key. Pure numpy and pyarrow.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpspark.npy import load_npy
from dpspark.text import row_tokens

FILES = ("unit-partition", "unit-hash", "unit-start", "unit-count", "unit-total", "unit-segment")
# A row's segment: the file it was read from and the first byte of its read split (hidden columns of a frame
# read from files, ``dpspark.spark.transform.with_segments``; never in an output).
SEGMENT = ("__dpspark_unit_file", "__dpspark_unit_block")
ORDERS = {
    "files": "input files by path, rows in file order",
    "partitions": "the input's partitions in order, rows as read (the input has no file metadata)",
}


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


def segment_key(file: str, block: int) -> int:
    """A segment's 64-bit name (unkeyed BLAKE2b of its file and first byte): how a task finds its ordinal."""
    digest = hashlib.blake2b(f"{file}\0{int(block)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def row_segments(batch: pa.RecordBatch, partition: int) -> tuple[list[tuple[str, int]], np.ndarray]:
    """Each row's segment: the batch's distinct (file, first byte) pairs, sorted, and each row's index among
    them. A batch without the ``SEGMENT`` columns is one segment, ``("", partition)``."""
    names = batch.schema.names
    if SEGMENT[0] not in names:
        return [("", int(partition))], np.zeros(batch.num_rows, np.int64)
    files = pc.dictionary_encode(pc.fill_null(batch.column(names.index(SEGMENT[0])), ""))
    code = np.asarray(files.indices.to_numpy(zero_copy_only=False), np.int64)
    block = np.asarray(pc.fill_null(batch.column(names.index(SEGMENT[1])), 0).to_numpy(zero_copy_only=False), np.int64)
    paths = files.dictionary.to_pylist()
    pairs = sorted({(paths[c], int(b)) for c, b in set(zip(code.tolist(), block.tolist()))}) if len(code) else []
    where = {p: i for i, p in enumerate(pairs)}
    index = np.array([where[(paths[c], int(b))] for c, b in zip(code.tolist(), block.tolist())], np.int64)
    return pairs, index


@dataclass(frozen=True)
class TaskCounts:
    """One task's count pass: per (segment, hashed id), the segment's file and first byte, the hash and its
    tokens; and how many of the task's rows have a null id."""

    file: list[str]
    block: np.ndarray
    hash: np.ndarray
    count: np.ndarray
    nulls: int


def partition_counts(
    batches: Iterable[pa.RecordBatch],
    unit_column: str,
    columns: list[str],
    key: bytes,
    lengths: Callable[[pa.RecordBatch], np.ndarray] | None = None,
    partition: int = 0,
) -> TaskCounts:
    """One task's count pass over its batches (``partition``: its partition, the segment of rows without file
    metadata): per segment (``row_segments``) its hashed ids, each one's tokens over ``columns`` (or, with
    ``lengths``, what ``lengths(batch)`` gives each row: a text-level mechanism's draws,
    ``dpspark.run.transform.row_draws``), and how many rows have a null id."""
    segments: dict[tuple[str, int], int] = {}
    seg, hashes, tokens, nulls = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], 0
    for b in batches:
        h, null = id_hashes(b.column(unit_column), key)
        n = row_tokens(b, columns) if lengths is None else lengths(b)
        pairs, index = row_segments(b, partition)
        ids = np.array([segments.setdefault(p, len(segments)) for p in pairs], np.int64)
        seg.append(ids[index][~null] if len(pairs) else index[~null])
        hashes.append(h[~null])
        tokens.append(n[~null])
        nulls += int(null.sum())
    s, h, n = np.concatenate(seg), np.concatenate(hashes), np.concatenate(tokens)
    by = np.lexsort((h, s))
    s, h, n = s[by], h[by], n[by]
    first = np.ones(len(s), dtype=bool)
    first[1:] = (s[1:] != s[:-1]) | (h[1:] != h[:-1])
    sums = np.add.reduceat(n, np.flatnonzero(first)) if len(s) else np.zeros(0, np.int64)
    pairs = list(segments)
    return TaskCounts(
        [pairs[i][0] for i in s[first]],
        np.array([pairs[i][1] for i in s[first]], np.int64),
        h[first],
        np.asarray(sums, np.int64),
        nulls,
    )


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
    """Per (segment, hashed id), sorted by segment (its ordinal: ``partition``) then hash: the tokens of that id
    in earlier segments (``start``), in this one (``count``) and in all (``total``); and each segment's
    ``segment_key`` by ordinal (``segment``; empty for a table built from partitions alone)."""

    partition: np.ndarray
    hash: np.ndarray
    start: np.ndarray
    count: np.ndarray
    total: np.ndarray
    segment: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def build(
        cls, partition: np.ndarray, hashes: np.ndarray, count: np.ndarray, segment: np.ndarray | None = None
    ) -> UnitTable:
        """From every segment's counts (one row per segment ordinal and hashed id)."""
        partition, hashes = np.asarray(partition, np.int64), np.asarray(hashes, np.int64)
        count = np.asarray(count, np.int64)
        by_unit = np.lexsort((partition, hashes))  # each unit's segments in order
        n = count[by_unit]
        start, run = _runs(hashes[by_unit], n)
        total = np.bincount(run, weights=n).astype(np.int64)[run]
        back = np.empty_like(by_unit)
        back[by_unit] = np.arange(len(by_unit))
        order = np.lexsort((hashes, partition))
        columns = (partition, hashes, start[back], count, total[back])
        return cls(*(a[order] for a in columns), np.asarray([] if segment is None else segment, np.int64))

    def unit_totals(self) -> np.ndarray:
        """Each unit's tokens in all (one entry per unit: the shape the manifest states)."""
        _, first = np.unique(self.hash, return_index=True)
        return self.total[first]

    def save(self, directory: str | Path) -> None:
        arrays = (self.partition, self.hash, self.start, self.count, self.total, self.segment)
        for name, array in zip(FILES, arrays):
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
    """One frame's count pass: per (segment ordinal, hashed id) its tokens, how many segments the frame has
    (``partitions``), how many of its rows have a null id, each segment's ``segment_key`` by ordinal, and the
    order the ordinals follow (``ORDERS``: ``files`` when every segment is a file's, else ``partitions``)."""

    partition: np.ndarray
    hash: np.ndarray
    count: np.ndarray
    partitions: int
    nulls: int
    segment: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    order: str = "partitions"

    def table(self) -> UnitTable:
        return UnitTable.build(self.partition, self.hash, self.count, self.segment)


def counted(tasks: Iterable[TaskCounts]) -> Counts:
    """One frame's ``Counts`` from its tasks' (``partition_counts``): segments ordered by file path, then first
    byte (a partition's segment, ``("", partition)``, by partition), however the tasks were packed. A segment
    met by two tasks (rows shuffled after the read) is refused: its rows then have no fixed order."""
    tasks = list(tasks)
    file = np.asarray([f for t in tasks for f in t.file], dtype=object)
    block = np.concatenate([np.zeros(0, np.int64), *[t.block for t in tasks]])
    hashes = np.concatenate([np.zeros(0, np.int64), *[t.hash for t in tasks]])
    count = np.concatenate([np.zeros(0, np.int64), *[t.count for t in tasks]])
    nulls = sum(t.nulls for t in tasks)
    if not len(file):
        return Counts(block, hashes, count, 0, nulls)
    paths, code = np.unique(file, return_inverse=True)
    pairs, ordinal = np.unique(np.stack([np.asarray(code, np.int64).reshape(-1), block]), axis=1, return_inverse=True)
    ordinal = np.asarray(ordinal, np.int64).reshape(-1)
    owner = np.concatenate([np.full(len(t.file), i, np.int64) for i, t in enumerate(tasks)])
    first_owner = np.full(pairs.shape[1], -1, np.int64)
    first_owner[ordinal[::-1]] = owner[::-1]
    if np.any(first_owner[ordinal] != owner):
        raise UnitsChanged("a read segment's rows reached two tasks: a column: unit's rows need their read order")
    keys = np.array([segment_key(paths[c], b) for c, b in pairs.T.tolist()], np.int64)
    order = "partitions" if (paths == "").any() else "files"
    return Counts(ordinal, hashes, count, pairs.shape[1], nulls, keys, order)


def joined(frames: list[Counts]) -> tuple[UnitTable, list[int]]:
    """One table over frames walked one after another (a labelled split's train half, then its test half): frame
    i's segments follow frame i-1's, so a person's tokens in both count together and a cap's order is the
    frames' order. Returns the table and each frame's segment offset (``Walk.offset``)."""
    offsets = np.cumsum([0, *[f.partitions for f in frames]])[:-1].astype(int).tolist()
    partition = np.concatenate([np.zeros(0, np.int64), *[f.partition + o for f, o in zip(frames, offsets)]])
    hashes = np.concatenate([np.zeros(0, np.int64), *[f.hash for f in frames]])
    count = np.concatenate([np.zeros(0, np.int64), *[f.count for f in frames]])
    segment = np.concatenate([np.zeros(0, np.int64), *[f.segment for f in frames]])
    return UnitTable.build(partition, hashes, count, segment), offsets


@dataclass(frozen=True)
class Walk:
    """How a release's tasks find their rows' people in a ``column:`` unit's table (the bundle's): the id
    ``column``, the job key the count pass hashed the ids with (``id_key`` of it), and where this frame's
    segments lie in the table (``joined``'s offset and the frame's ``partitions``; a release's own input:
    from 0 to the end)."""

    column: str
    key: bytes
    offset: int = 0
    length: int | None = None

    def cursor(self, table: UnitTable | None, partition: int) -> TaskCursor:
        if table is None:
            raise ValueError("a column: unit's walk over a bundle without its unit table")
        end = len(table.segment) if self.length is None else self.offset + self.length
        return TaskCursor(table, id_key(self.key), self.offset, end, partition)

    def within(
        self, cursor: TaskCursor, batch: pa.RecordBatch
    ) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """``cursor.within`` bound to ``batch``'s ids and segments: what a batch's allocation calls with its
        rows' tokens."""
        ids, segments = batch.column(batch.schema.names.index(self.column)), row_segments(batch, cursor.partition)
        return lambda tokens: cursor.within(ids, tokens, segments)

    def __repr__(self) -> str:  # the key never reaches a log
        return f"Walk(column={self.column!r}, offset={self.offset}, length={self.length})"


class TaskCursor:
    """One task's walk through its rows' segments (``row_segments``): each segment's ``Cursor``, found by its
    ``segment_key`` among the frame's segments ``[lo, hi)`` of the table."""

    def __init__(self, table: UnitTable, key: bytes, lo: int, hi: int, partition: int) -> None:
        keys = table.segment[lo:hi]
        self.order = np.argsort(keys, kind="stable")
        self.keys, self.lo = keys[self.order], lo
        self.table, self.key, self.partition = table, key, partition
        self.cursors: dict[int, Cursor] = {}

    def ordinal(self, file: str, block: int) -> int:
        k = segment_key(file, block)
        at = int(np.searchsorted(self.keys, k))
        if at >= len(self.keys) or self.keys[at] != k:
            raise UnitsChanged("rows of a read segment the count pass did not see in this task")
        return self.lo + int(self.order[at])

    def within(
        self, ids: pa.Array | pa.ChunkedArray, tokens: np.ndarray, segments: tuple[list[tuple[str, int]], np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """For the next rows (their ids, tokens and ``row_segments``): each row's unit total and unit tokens
        before it, each segment walked by its own ``Cursor``."""
        pairs, index = segments
        tokens = np.asarray(tokens, dtype=np.int64)
        totals, before = np.zeros(len(tokens), np.int64), np.zeros(len(tokens), np.int64)
        for i, (file, block) in enumerate(pairs):
            o = self.ordinal(file, block)
            if o not in self.cursors:
                self.cursors[o] = Cursor(self.table, o, self.key)
            if len(pairs) == 1:  # the usual batch: one split's rows
                return self.cursors[o].within(ids, tokens)
            rows = np.flatnonzero(index == i)
            totals[rows], before[rows] = self.cursors[o].within(ids.take(pa.array(rows)), tokens[rows])
        return totals, before


class Cursor:
    """One task's walk through its partition's rows (``within``: each row's unit total and the unit's tokens
    before it), checking that no person has more tokens here than the count pass found."""

    def __init__(self, table: UnitTable, partition: int, key: bytes) -> None:  # partition: the segment's ordinal
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
