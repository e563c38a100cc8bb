"""Hostile use, round 5 (issue 39): the defects that need a Spark session. SQL with a common table
expression is traced like any other plan, and Spark's own error lines stay off a --quiet run's stderr."""

from __future__ import annotations

import json
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
