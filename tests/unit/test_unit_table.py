"""A ``column:`` unit's table (dpspark.unit_table, issue 41): each person's tokens over every partition, the
unit's tokens before each row in the input's order, the keyed hashes of the ids, and the allocation it drives
(a person's εᵢ add up to E under ``scale``; exactly the first K of a person's tokens are drawn under
``cap:K``, wherever the person's rows are)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dpspark import units
from dpspark.errors import ConfigError
from dpspark.unit_table import (
    SEGMENT,
    Cursor,
    UnitsChanged,
    UnitTable,
    Walk,
    counted,
    id_hashes,
    id_key,
    partition_counts,
)

pytestmark = pytest.mark.runtime  # numpy's and pyarrow's arrays

KEY = id_key(b"k" * 16)
# Three partitions (tasks) of rows: (id, tokens), in the order each task reads them.
PARTITIONS = [[("a", 2), ("b", 3), ("a", 4)], [("b", 5), ("c", 1)], [("a", 7), ("d", 0)]]


def rows_of(part) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"u": [i for i, _ in part], "n": [n for _, n in part]})


def tokens_of(batch: pa.RecordBatch) -> np.ndarray:
    return np.asarray(batch.column(1).to_numpy(), np.int64)


def table(partitions=PARTITIONS) -> UnitTable:
    """The count pass of every partition (each a task of its own, ``partition_counts``), ordered (``counted``)."""
    tasks = [partition_counts([rows_of(part)], "u", [], KEY, tokens_of, p) for p, part in enumerate(partitions)]
    return counted(tasks).table()


def walk(t: UnitTable, partitions=PARTITIONS) -> list[tuple[int, int]]:
    """Each row's (unit total, unit tokens before it), partition by partition, two rows per call at most."""
    out = []
    for p, part in enumerate(partitions):
        cursor = Cursor(t, p, KEY)
        for s in range(0, len(part), 2):
            chunk = part[s : s + 2]
            totals, before = cursor.within(pa.array([i for i, _ in chunk]), np.array([n for _, n in chunk]))
            out += list(zip(totals.tolist(), before.tolist()))
    return out


def test_each_row_gets_its_persons_total_and_the_tokens_before_it_in_input_order():
    # a: 2 + 4 (partition 0) + 7 (partition 2) = 13; b: 3 + 5 = 8; c: 1; d: 0
    assert walk(table()) == [(13, 0), (8, 0), (13, 2), (8, 3), (1, 0), (13, 6), (0, 0)]
    assert sorted(table().unit_totals().tolist()) == [0, 1, 8, 13]


def test_ids_are_hashed_with_a_key_of_the_run_nulls_flagged_any_scalar_type():
    h1, null = id_hashes(pa.array(["a", None, "a", "b"]), KEY)
    assert null.tolist() == [False, True, False, False] and h1[0] == h1[2] != h1[3]
    other, _ = id_hashes(pa.array(["a"]), id_key(b"j" * 16))
    assert other[0] != h1[0]  # another run's key: another hash
    ints, _ = id_hashes(pa.array([7, 7, 8]), KEY)
    text, _ = id_hashes(pa.array(["7"]), KEY)
    assert ints[0] == ints[1] == text[0] != ints[2]  # a number hashes as its text
    assert id_key(b"k" * 16) != b"k" * 16 and len(KEY) == 32


def test_a_task_that_meets_more_of_a_person_than_the_count_pass_stops():
    t = table()
    with pytest.raises(UnitsChanged, match="more tokens"):
        Cursor(t, 1, KEY).within(pa.array(["b", "b"]), np.array([5, 1]))
    with pytest.raises(UnitsChanged, match="did not see"):
        Cursor(t, 1, KEY).within(pa.array(["a"]), np.array([1]))
    with pytest.raises(UnitsChanged, match="did not see"):
        Cursor(t, 0, KEY).within(pa.array([None], pa.string()), np.array([1]))


def test_a_table_saves_and_loads(tmp_path):
    t = table()
    t.save(tmp_path)
    back = UnitTable.load(tmp_path)
    fields = ("partition", "hash", "start", "count", "total", "segment")
    assert all(np.array_equal(getattr(t, f), getattr(back, f)) for f in fields)
    assert UnitTable.load(tmp_path / "none") is None


# Three files of one input (rows: id, tokens); a read task reads one or more of them, in the order Spark packs
# them (by size in bytes, which follows the text), each its own batch or several in one batch.
FILES = {"part-b": [("a", 2), ("b", 3)], "part-a": [("a", 4)], "part-c": [("a", 1), ("b", 1), ("c", 2)]}
PACKINGS = [[["part-b", "part-c"], ["part-a"]], [["part-c", "part-a", "part-b"]], [["part-c"], ["part-b"], ["part-a"]]]


def read(file: str, block: int = 0) -> pa.RecordBatch:
    rows = FILES[file]
    return pa.RecordBatch.from_pydict(
        {
            "u": [i for i, _ in rows],
            "n": [n for _, n in rows],
            SEGMENT[0]: [file] * len(rows),
            SEGMENT[1]: [block] * len(rows),
        }
    )


def walk_packed(packing: list[list[str]], one_batch: bool) -> dict[tuple[str, int], tuple[int, int]]:
    """Both passes over ``packing``'s tasks: each (file, row)'s (unit total, unit tokens before it)."""
    tasks = [[read(f) for f in files] for files in packing]
    if one_batch:
        tasks = [[pa.Table.from_batches(t).combine_chunks().to_batches()[0]] for t in tasks]
    counts = counted(partition_counts(t, "u", [], KEY, tokens_of, p) for p, t in enumerate(tasks))
    assert counts.order == "files" and counts.partitions == 3
    table, out, w = counts.table(), {}, Walk("u", b"k" * 16)
    for p, batches in enumerate(tasks):
        cursor = w.cursor(table, p)
        for b in batches:
            totals, before = w.within(cursor, b)(tokens_of(b))
            files = b.column(2).to_pylist()
            for r, (f, tot, bef) in enumerate(zip(files, totals.tolist(), before.tolist())):
                out[(f, files[:r].count(f))] = (tot, bef)
    return out


def test_a_persons_tokens_are_counted_in_the_files_order_however_the_tasks_read_them():
    """A cap's order is by file path, then row, in every packing of the files into tasks: a's tokens are
    part-a's 4, then part-b's 2, then part-c's 1; b's part-b's 3, then part-c's 1."""
    want = {
        ("part-a", 0): (7, 0),
        ("part-b", 0): (7, 4),
        ("part-b", 1): (4, 0),
        ("part-c", 0): (7, 6),
        ("part-c", 1): (4, 3),
        ("part-c", 2): (2, 0),
    }
    for packing in PACKINGS:
        for one_batch in (False, True):
            assert walk_packed(packing, one_batch) == want, (packing, one_batch)


def test_a_segment_read_by_two_tasks_or_unseen_by_the_count_stops_the_walk():
    split = [partition_counts([read("part-a")], "u", [], KEY, tokens_of, p) for p in (0, 1)]
    with pytest.raises(UnitsChanged, match="two tasks"):
        counted(split)
    counts = counted([partition_counts([read("part-a")], "u", [], KEY, tokens_of, 0)])
    w = Walk("u", b"k" * 16)
    cursor = w.cursor(counts.table(), 0)
    with pytest.raises(UnitsChanged, match="did not see"):
        w.within(cursor, read("part-b"))(tokens_of(read("part-b")))
    no_files = counted([partition_counts([rows_of(FILES["part-a"])], "u", [], KEY, tokens_of, 4)])
    assert no_files.order == "partitions" and no_files.partitions == 1


def person_allocation(budget: float, allocation: units.Allocation) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each person's tokens' (ε, drawn), gathered over the partitions from ``allocate``'s ``within``."""
    per: dict[str, list] = {}
    t = table()
    for p, part in enumerate(PARTITIONS):
        ids, n = [i for i, _ in part], np.array([k for _, k in part])
        got = units.allocate(n, budget, allocation, Cursor(t, p, KEY).within(pa.array(ids), n))
        at = np.r_[0, np.cumsum(n)]
        for r, i in enumerate(ids):
            per.setdefault(i, []).append((got.epsilons[at[r] : at[r + 1]], got.drawn[at[r] : at[r + 1]]))
    return {i: tuple(np.concatenate(x) for x in zip(*parts)) for i, parts in per.items()}


def test_under_scale_a_persons_token_epsilons_add_up_to_the_budget_across_partitions():
    for person, (eps, drawn) in person_allocation(26.0, units.Allocation()).items():
        assert drawn.all()
        if len(eps):
            assert eps.sum() == pytest.approx(26.0) and np.allclose(eps, 26.0 / len(eps)), person


def test_under_a_cap_exactly_a_persons_first_k_tokens_are_drawn_wherever_their_rows_are():
    k = 5
    for person, (eps, drawn) in person_allocation(10.0, units.Allocation.parse("cap:5")).items():
        # PARTITIONS are in the unit's order: a's 13 tokens are 2, 4 (partition 0) then 7 (partition 2)
        assert drawn.tolist() == [True] * min(k, len(drawn)) + [False] * max(0, len(drawn) - k), person
        assert np.allclose(eps[drawn], 2.0) and np.isnan(eps[~drawn]).all()


def test_the_drivers_check_refuses_what_the_executors_would():
    with pytest.raises(ConfigError, match="1 unit"):
        units.check_units(np.array([3, 12, 5]), 10.0, units.Allocation.parse("cap:10", "refuse"))
    with pytest.raises(ConfigError, match="a unit of 2,000,000 tokens"):
        units.check_units(np.array([3, 2_000_000]), 1.0, units.Allocation())
    units.check_units(np.array([3, 12, 0]), 10.0, units.Allocation.parse("cap:10"))  # placeholders: no refusal
    units.check_units(np.zeros(0, np.int64), 10.0, units.Allocation())


def test_a_persons_rows_are_drawn_at_the_persons_share_not_their_rows(glove):
    """The release's entry point (``TextPerturber.perturb_batch`` with a cursor's ``within``) draws each token of
    a person at E/n over the person's tokens in all, draw for draw what ``perturb_array`` draws at those ε."""
    from dpspark.mechanisms import Space, parse
    from dpspark.text import TextPerturber

    space = Space(glove.vectors, np.arange(5000), words=glove.word_rows)
    mechanism = parse({"name": "laplace", "epsilon": 40.0}).build(space)
    perturber = TextPerturber(mechanism, glove.word_rows, unit_budget=40.0)
    texts = ["the cat sat on the mat", "a dog", "the river runs to the sea today"]
    ids = ["a", "b", "a"]
    lengths = np.array([6, 2, 7])
    t = table([list(zip(ids, lengths.tolist()))])
    batch = pa.RecordBatch.from_pydict({"text": pa.array(texts), "user": pa.array(ids)})
    cursor = Cursor(t, 0, KEY)
    _, arrays, _ = perturber.perturb_batch(
        batch, np.random.default_rng(3), ["text"], within=lambda n: cursor.within(batch.column("user"), n)
    )
    eps = np.repeat(40.0 / np.array([13, 2, 13]), lengths)
    want = units.Allocated(eps, np.ones(len(eps), bool))
    expected, _ = perturber.perturb_array(pa.array(texts), np.random.default_rng(3), want)
    assert arrays[0].to_pylist() == expected.to_pylist()
    as_documents, _ = perturber.perturb_array(
        pa.array(texts), np.random.default_rng(3), units.allocate(lengths, 40.0, units.Allocation())
    )
    assert as_documents.to_pylist() != expected.to_pylist()  # each row its own unit draws at E/6, E/2, E/7


def test_an_input_without_ids_gives_an_empty_table():
    t = UnitTable.build(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(t.hash) == 0 and len(t.unit_totals()) == 0
    totals, before = Cursor(t, 0, KEY).within(pa.array([], pa.string()), np.zeros(0, np.int64))
    assert len(totals) == len(before) == 0
