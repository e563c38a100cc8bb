"""Hostile use, round 5 (issue 39): the defects that need a Spark session. SQL with a common table
expression is traced like any other plan, and Spark's own error lines stay off a --quiet run's stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark.errors import ConfigError
from dpspark.spark import lineage

pytestmark = pytest.mark.spark

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"


def snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(("_dpspark", ".dpspark")))


def write_text_dataset(directory: Path, ids: list[int]) -> Path:
    directory.mkdir(parents=True)
    rows = pq.read_table(SAMPLE).slice(0, len(ids)).select(["text"]).to_pylist()
    pq.write_table(pa.table({"id": ids, "text": [r["text"] for r in rows]}), directory / "part-0.parquet")
    return directory


# --- 8: SQL with WITH (a common table expression) ----------------------------------------------------

CTES = {
    "one": "WITH t AS (SELECT * FROM parquet.`{b}`) SELECT * FROM parquet.`{a}` WHERE id IN (SELECT id FROM t)",
    "chained": "WITH t AS (SELECT * FROM parquet.`{b}`), u AS (SELECT id FROM t WHERE id > 2) "
    "SELECT x.* FROM parquet.`{a}` x JOIN u ON x.id = u.id",
    "in-a-subquery": "SELECT * FROM parquet.`{a}` WHERE id IN (WITH t AS (SELECT id FROM parquet.`{b}`) "
    "SELECT id FROM t)",
}


@pytest.mark.runtime  # the lineage of a CTE: each Spark's analysed plan (WithCTE, CTERelationRef)
@pytest.mark.parametrize("query", list(CTES))
def test_a_cte_is_traced_to_the_files_it_reads(spark, tmp_path, query):
    """Any SQL with WITH was refused as untraceable, "a checkpoint, an RDD, or rows built in Python": the CTE's
    reference is a plan leaf of its own. Its definition's files are the sources, and only they."""
    a = write_text_dataset(tmp_path / "a", list(range(30)))
    b = write_text_dataset(tmp_path / "b", list(range(0, 30, 3)))
    found = lineage.sources(spark.sql(CTES[query].format(a=a, b=b)))
    assert found.known, found.unknown
    assert sorted(Path(p.removeprefix("file:")).name for p in found.paths) == ["a", "b"]


def test_a_recursive_cte_is_traced_to_its_anchors_files(spark, tmp_path):
    """WITH RECURSIVE (this suite's Spark has it; the runtimes' older ones do not): the loop's reference to
    itself reads nothing of its own, the anchor's files are the source."""
    a = write_text_dataset(tmp_path / "a", list(range(30)))
    b = write_text_dataset(tmp_path / "b", [1])
    query = f"WITH RECURSIVE r(id) AS (SELECT id FROM parquet.`{b}` UNION ALL SELECT id + 1 FROM r WHERE id < 3) "
    found = lineage.sources(spark.sql(query + f"SELECT x.* FROM parquet.`{a}` x JOIN r ON x.id = r.id"))
    assert found.known, found.unknown
    assert sorted(Path(p.removeprefix("file:")).name for p in found.paths) == ["a", "b"]


def test_a_cte_far_from_the_output_is_released(spark, tmp_path):
    a = write_text_dataset(tmp_path / "a", list(range(30)))
    b = write_text_dataset(tmp_path / "b", list(range(0, 30, 3)))
    before = snapshot(tmp_path)
    df = spark.sql(CTES["chained"].format(a=a, b=b))
    out = tmp_path / "out"
    manifest = dpspark.release(df, output=str(out), columns="text", epsilon=10, vocab_size=3000, quiet=True)
    assert manifest == json.loads((out / "_dpspark_manifest.json").read_text())
    assert sorted(pq.read_table(out).column("id").to_pylist()) == list(range(3, 30, 3))  # a's rows that u keeps
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out")} == before
    assert leftovers(tmp_path) == []


def test_a_cte_reading_the_output_is_refused(spark, tmp_path):
    """A CTE over B, released to B/private: the release would land inside raw input B."""
    a = write_text_dataset(tmp_path / "a", list(range(30)))
    b = write_text_dataset(tmp_path / "b", list(range(0, 30, 3)))
    before = snapshot(tmp_path)
    df = spark.sql(CTES["one"].format(a=a, b=b))
    with pytest.raises(ConfigError, match=r"output .*b/private lies inside the input .*b\b") as refused:
        dpspark.release(df, output=str(b / "private"), columns="text", epsilon=10, vocab_size=3000, quiet=True)
    assert "cannot be traced" not in str(refused.value)
    assert snapshot(tmp_path) == before  # B byte-identical, nothing left beside or inside it


# --- 9: Spark's error lines under --quiet ------------------------------------------------------------


def _fresh_env() -> dict[str, str]:
    """This process's environment without the Spark settings a session started here left in it (the child
    starts a JVM of its own, with the CLI's logging); Python workers run this interpreter."""
    drop = ("PYSPARK_SUBMIT_ARGS", "SPARK_SUBMIT_OPTS", "SPARK_LOCAL_IP", "PYSPARK_GATEWAY_PORT")
    drop += ("PYSPARK_GATEWAY_SECRET",)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "PYSPARK_PYTHON": sys.executable}


# The release's files reach the stage, then a Spark task fails with ENOSPC, as an executor's write on a
# full disk does: Spark logs the failed task (Executor, TaskSetManager: ERROR records with their stack
# frames) before the job's failure reaches the driver, where dpspark turns it into one line.
DISK_FULL_RUN = """
import errno, os, sys
from pyspark.sql import SparkSession
from pyspark.sql.readwriter import DataFrameWriter
from dpspark.cli import main

write = DataFrameWriter.parquet

def disk_full(_):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

def full(self, path, *args, **kwargs):
    write(self, path, *args, **kwargs)
    SparkSession.getActiveSession().sparkContext.parallelize([0], 1).foreach(disk_full)

DataFrameWriter.parquet = full
sys.exit(main({argv!r}))
"""


def test_a_full_disk_under_quiet_is_one_line_without_sparks_errors(tmp_path):
    """A full disk was exit 5 with the right last line, but Spark's ERROR records and Java stack frames came
    first, even with --quiet (386 lines for one task on a real full tmpfs)."""
    data = write_text_dataset(tmp_path / "in", list(range(40)))
    before = snapshot(data)
    out = tmp_path / "out"
    argv = ["perturb", "--input", str(data), "--output", str(out), "--columns", "text", "--epsilon", "10"]
    argv += ["--vocab-size", "3000", "--master", "local[1]", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-c", DISK_FULL_RUN.format(argv=argv)],
        env=_fresh_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 5, done.stderr
    assert "ERROR" not in done.stderr and "\tat " not in done.stderr, done.stderr
    assert done.stderr.splitlines() == ["dpspark perturb: error: a disk is full: free space or choose another --output"]
    assert done.stdout == ""
    assert snapshot(data) == before
    assert not out.exists() and leftovers(tmp_path) == []
