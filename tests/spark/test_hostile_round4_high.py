"""Hostile and careless use, round 4 (issue 30): the high defects 2, 3 and 4, and 10 and 13, on a real
local session. Every refused or failed run exits with its code and one line, changes nothing (the input
and any earlier output byte-identical) and leaves nothing behind.

The parts that need no JVM (cached artefacts, the embedding store) are in
tests/unit/test_hostile_round4_high_unit.py; the shuffle audit (defect 1) in test_shuffle_audit.py.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark.cli import main
from dpspark.errors import ConfigError

pytestmark = pytest.mark.spark

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"
FAST = ["--vocab-size", "3000", "--quiet"]


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(("_dpspark", ".dpspark")))


def one_line_error(capsys, code: int, expected: int, *fragments: str) -> str:
    err = capsys.readouterr().err
    assert code == expected, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpspark ") and ": error: " in lines[0], err
    for f in fragments:
        assert f in err, f"{f!r} not in {err}"
    return err


def write_text_dataset(directory: Path, ids: list[int]) -> Path:
    directory.mkdir(parents=True)
    rows = pq.read_table(SAMPLE).slice(0, len(ids)).select(["text"]).to_pylist()
    table = pa.table({"id": ids, "text": [r["text"] for r in rows]})
    pq.write_table(table, directory / "part-0.parquet")
    return directory


@pytest.fixture
def data(tmp_path) -> Path:
    return write_text_dataset(tmp_path / "in", list(range(40)))


@pytest.fixture(scope="module")
def outputs(spark, tmp_path_factory) -> dict[str, Path]:
    """A real release (perturb, with its ε ledger) and a real report (privacy-risk) of one small input."""
    root = tmp_path_factory.mktemp("kinds")
    data = write_text_dataset(root / "in", list(range(40)))
    release, report = root / "release", root / "report"
    assert main(["perturb", "--input", str(data), "--output", str(release), "--columns", "text", "--epsilon", "10"
                 , *FAST]) == 0  # fmt: skip
    risk = ["privacy-risk", "--input", str(data), "--text-column", "text", "--output", str(report)]
    assert main([*risk, "--mechanisms", "laplace", "--epsilons", "10", "--runs", "4", "--max-words", "20", *FAST]) == 0
    return {"input": data, "release": release, "report": report}


# --- 2: every path dpspark writes is checked against the inputs -------------------------------------


@pytest.mark.parametrize(
    "how",
    ["embeddings-dir", "cache-env", "report-embeddings-dir"],
)
def test_no_store_or_cache_inside_the_input(spark, data, tmp_path, capsys, monkeypatch, how):
    """The embedding store (--embeddings-dir) and the artefact cache ($DPSPARK_CACHE_DIR) inside the input
    wrote .npy files into the raw data (truncated-gumbel keeps its constants there). Refused, exit 2."""
    before = snapshot(data)
    out = tmp_path / "out"
    if how == "cache-env":
        monkeypatch.setenv("DPSPARK_CACHE_DIR", str(data / "cache"))
    where = ["--embeddings-dir", str(data)] if how != "cache-env" else []
    if how == "report-embeddings-dir":
        argv = ["privacy-risk", "--input", str(data), "--text-column", "text", "--output", str(out)]
        argv += ["--mechanisms", "truncated-gumbel", "--epsilons", "1000", "--runs", "4"]
    else:
        argv = ["perturb", "--input", str(data), "--output", str(out), "--columns", "text", "--epsilon", "1000"]
        argv += ["--mechanism", "truncated-gumbel"]
    code = main([*argv, *where, *FAST])
    what = "the artefact cache" if how == "cache-env" else "the embeddings directory"
    one_line_error(capsys, code, ConfigError.exit_code, what, "lies inside the input", "write into the raw data")
    assert snapshot(data) == before
    assert not out.exists() and leftovers(tmp_path) == []


# --- 3: the lineage sees through subqueries -----------------------------------------------------------


SUBQUERIES = {
    "in": "SELECT * FROM {a} WHERE id IN (SELECT id FROM {b})",
    "exists-correlated": "SELECT * FROM {a} x WHERE EXISTS (SELECT 1 FROM {b} y WHERE y.id = x.id)",
    "scalar-where": "SELECT * FROM {a} WHERE id < (SELECT max(id) FROM {b})",
    "scalar-select-correlated": "SELECT id, text, (SELECT count(*) FROM {b} y WHERE y.id = x.id) AS n FROM {a} x",
    "in-having": "SELECT id, first(text) AS text FROM {a} GROUP BY id HAVING id IN (SELECT id FROM {b})",
    "nested-in-a-join": "SELECT x.* FROM {a} x JOIN {a} z ON x.id = z.id WHERE x.id IN "
    "(SELECT id FROM {a} WHERE id IN (SELECT id FROM {b}))",
}


@pytest.mark.parametrize("source", ["path", "table"])
@pytest.mark.parametrize("query", list(SUBQUERIES))
def test_a_release_never_lands_inside_a_subquerys_input(spark, tmp_path, query, source):
    """A DataFrame of A filtered through a subquery over B (a path, or a table whose files are B), released
    to B/private: the release landed inside raw input B. Refused before any work, B byte-identical."""
    a = write_text_dataset(tmp_path / "a", list(range(30)))
    b = write_text_dataset(tmp_path / "b", list(range(0, 30, 3)))
    before = snapshot(b)
    name = f"round4_b_{query.replace('-', '_')}"
    if source == "table":
        spark.sql(f"CREATE TABLE {name} USING parquet LOCATION '{b}'")
    try:
        b_sql = name if source == "table" else f"parquet.`{b}`"
        df = spark.sql(SUBQUERIES[query].format(a=f"parquet.`{a}`", b=b_sql))
        with pytest.raises(ConfigError, match=r"output .*b/private lies inside the input .*b\b"):
            dpspark.release(df, output=str(b / "private"), columns="text", epsilon=10, vocab_size=3000)
    finally:
        if source == "table":
            spark.sql(f"DROP TABLE {name}")  # an external table: its files stay
    assert snapshot(b) == before
    assert leftovers(b) == [] and not (b / "private").exists()


def test_an_output_table_is_never_a_subquerys_input_table(spark, tmp_path):
    """The same for tables: A filtered by a subquery over table B, released with --mode overwrite into B
    itself. The lineage missed B: the run got past the input-table check, and was stopped only because B
    carries no dpspark ledger property."""
    import uuid

    schema = f"round4_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {schema}")
    try:
        a = write_text_dataset(tmp_path / "a", list(range(30)))
        spark.read.parquet(str(write_text_dataset(tmp_path / "b", list(range(0, 30, 3))))).write.saveAsTable(
            f"{schema}.b"
        )
        before = sorted(map(tuple, spark.table(f"{schema}.b").collect()))
        df = spark.sql(f"SELECT * FROM parquet.`{a}` x WHERE EXISTS (SELECT 1 FROM {schema}.b y WHERE y.id = x.id)")
        with pytest.raises(ConfigError, match=rf"output table {schema}.b is the input table"):
            dpspark.release(df, output_table=f"{schema}.b", columns="text", epsilon=10, mode="overwrite")
        assert sorted(map(tuple, spark.table(f"{schema}.b").collect())) == before
    finally:
        spark.sql(f"DROP SCHEMA {schema} CASCADE")


# --- 4: a command overwrites only its own kind of output ----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["privacy-stats", "--mode", "overwrite", "--epsilons", "10"],
        ["privacy-risk", "--mode", "overwrite", "--text-column", "text", "--input", "{input}"],
        ["compare", "--overwrite", "--text-column", "text", "--label-column", "id", "--input", "{input}"],
    ],
    ids=["privacy-stats", "privacy-risk", "compare"],
)
def test_a_report_never_replaces_a_release(spark, outputs, capsys, argv):
    """compare --overwrite, privacy-stats and privacy-risk --mode overwrite replaced a release, its data and its
    ε ledger: afterwards the ε already spent was recorded nowhere."""
    release = outputs["release"]
    before = snapshot(release)
    argv = [a.format(input=outputs["input"]) for a in argv]
    code = main([*argv, "--output", str(release), *FAST])
    one_line_error(capsys, code, 5, "holds a release, its data and its ε ledger", f"which {argv[0]} may not replace")
    assert snapshot(release) == before
    assert leftovers(release.parent) == []


def test_a_release_never_replaces_a_report(spark, outputs, capsys):
    report = outputs["report"]
    before = snapshot(report)
    code = main(["perturb", "--input", str(outputs["input"]), "--output", str(report), "--columns", "text",
                 "--epsilon", "10", "--mode", "overwrite", *FAST])  # fmt: skip
    one_line_error(capsys, code, 5, "holds a privacy-risk report", "which perturb may not replace")
    assert snapshot(report) == before
    assert leftovers(report.parent) == []


# --- 10: a full disk is exit 5 in one line --------------------------------------------------------------


def test_a_full_disk_is_exit_5_with_nothing_left_behind(spark, data, tmp_path, capsys, monkeypatch):
    """The release's write fills the disk: the Parquet files are half written into the stage when a Spark job
    fails with the executors' ENOSPC (a real failed job, as Spark reports it: not Python's OSError)."""
    from pyspark.sql.readwriter import DataFrameWriter

    write = DataFrameWriter.parquet

    def disk_full(_):  # noqa: ANN001, ANN202 - runs in a Python worker (a closure: pickled by value)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full(self, path, *args, **kwargs):  # noqa: ANN001, ANN202
        write(self, path, *args, **kwargs)  # the files reach the stage ...
        spark.sparkContext.parallelize([0], 1).foreach(disk_full)  # ... and then the disk is full

    monkeypatch.setattr(DataFrameWriter, "parquet", full)
    before = snapshot(data)
    out = tmp_path / "out"
    code = main(["perturb", "--input", str(data), "--output", str(out), "--columns", "text", "--epsilon", "10", *FAST])
    one_line_error(capsys, code, 5, "a disk is full: free space or choose another --output")
    assert snapshot(data) == before
    assert not out.exists() and leftovers(tmp_path) == []


# --- 13: a lock that can never be released ------------------------------------------------------------


@pytest.mark.parametrize("blocker", ["directory", "an output named so"])
def test_a_lock_that_can_never_be_released_is_refused_at_once(spark, data, outputs, tmp_path, capsys, blocker):
    """A directory where the commit lock goes (an output named _dpspark_lock_out, say) made a run wait 900 s
    without a word, then exit 5."""
    lock = tmp_path / "_dpspark_lock_out"
    if blocker == "directory":
        lock.mkdir()
    else:
        shutil.copytree(outputs["release"], lock)
    held = snapshot(lock)
    before = snapshot(data)
    t0 = time.monotonic()
    code = main(["perturb", "--input", str(data), "--output", str(tmp_path / "out"), "--columns", "text",
                 "--epsilon", "10", *FAST])  # fmt: skip
    assert time.monotonic() - t0 < 60
    one_line_error(capsys, code, 5, f"{lock}, is a directory, which no release removes", "move it away")
    assert snapshot(data) == before and snapshot(lock) == held
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == ["_dpspark_lock_out"]
