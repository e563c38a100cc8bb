"""Releases from and into metastore tables (Spark's built-in catalog, a warehouse of the test
session's own): the same one release path, refusals and ledger as for paths.

Each test works in a schema of its own, dropped after it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

import dpspark
from dpspark.cli import main
from dpspark.spark import tables

pytestmark = [pytest.mark.spark, pytest.mark.runtime]  # tables: the catalog differs across runtimes

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"

FAST = ["--vocab-size", "3000", "--quiet"]


@pytest.fixture()
def schema(spark):
    name = f"t_{uuid.uuid4().hex[:10]}"
    spark.sql(f"CREATE SCHEMA {name}")
    yield name
    spark.sql(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture()
def reviews(spark, schema):
    """examples/reviews.parquet as a metastore table, with a date column to partition by."""
    name = f"{schema}.reviews"
    df = spark.read.parquet(str(SAMPLE))
    df = df.withColumn("date", dpspark_date(df))
    df.write.saveAsTable(name)
    return name


def dpspark_date(df):  # noqa: ANN001, ANN201
    from pyspark.sql import functions as F

    return F.when(F.col("id") % 2 == 0, "2026-11-20").otherwise("2026-11-21")


def perturb(*args: str) -> int:
    return main(["perturb", "--columns", "text,title", "--epsilon", "10", *FAST, *args])


def rows(spark, table):  # noqa: ANN001, ANN201
    return sorted(tuple(r) for r in spark.table(table).collect())


def names(spark, schema):  # noqa: ANN001, ANN201
    return sorted(t.name for t in spark.catalog.listTables(schema))


def ledger_rows(spark, table):  # noqa: ANN001, ANN201
    return spark.table(table + tables.LEDGER_SUFFIX).collect()


def test_table_in_table_out(spark, schema, reviews, capsys):
    out = f"spark_catalog.{schema}.reviews_private"
    assert perturb("--input-table", reviews, "--output-table", out) == 0, capsys.readouterr().err
    released, raw = spark.table(out), spark.table(reviews)
    assert released.schema == raw.schema
    assert released.count() == raw.count() == 500
    before = {r["id"]: r for r in raw.collect()}
    after = {r["id"]: r for r in released.collect()}
    assert all(after[i]["rating"] == r["rating"] and after[i]["date"] == r["date"] for i, r in before.items())
    texts = [i for i, r in before.items() if r["text"]]
    assert sum(after[i]["text"] != before[i]["text"].lower() for i in texts) > 0.9 * len(texts)

    # Marked as a release, its ledger beside it, no staging table left.
    props = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {out}").collect()}
    assert props[tables.MARK] == f"`spark_catalog`.`{schema}`.`reviews_private__dpspark_ledger`"
    assert names(spark, schema) == ["reviews", "reviews_private", "reviews_private__dpspark_ledger"]
    m = tables.manifest_of(spark, out)
    assert m["status"] == "succeeded" and m["output"] == f"`spark_catalog`.`{schema}`.`reviews_private`"
    assert m["input"] == f"`spark_catalog`.`{schema}`.`reviews`" and m["counts"]["rows"] == 500
    assert sorted(r["kind"] for r in ledger_rows(spark, out)) == ["entry", "manifest"]

    # Again: refused (exists); with --mode overwrite: refused by the ledger; on purpose: replaced.
    first = rows(spark, out)
    assert perturb("--input-table", reviews, "--output-table", out) == 5
    assert "already exists" in capsys.readouterr().err
    assert perturb("--input-table", reviews, "--output-table", out, "--mode", "overwrite") == 7
    assert "--allow-rerelease" in capsys.readouterr().err
    assert rows(spark, out) == first
    assert perturb("--input-table", reviews, "--output-table", out, "--mode", "overwrite", "--allow-rerelease") == 0
    assert rows(spark, out) != first and spark.table(out).count() == 500
    assert tables.manifest_of(spark, out)["ledger"]["epsilon_spent"][0]["epsilon_at_most"] == 20.0
    assert names(spark, schema) == ["reviews", "reviews_private", "reviews_private__dpspark_ledger"]

    # A dropped output table leaves its ledger: those records were published.
    spark.sql(f"DROP TABLE {out}")
    assert perturb("--input-table", reviews, "--output-table", out) == 7
    assert names(spark, schema) == ["reviews", "reviews_private__dpspark_ledger"]


def test_python_api_from_a_table_and_path_to_table(spark, schema, reviews, tmp_path):
    m = dpspark.release(spark.table(reviews), output_table=f"{schema}.api", columns="text", epsilon=10, vocab_size=3000)
    assert m["status"] == "succeeded" and spark.table(f"{schema}.api").schema == spark.table(reviews).schema
    # A path in, a table out; a table in, a path out.
    assert perturb("--input", str(SAMPLE), "--output-table", f"{schema}.from_path") == 0
    assert spark.table(f"{schema}.from_path").schema == spark.read.parquet(str(SAMPLE)).schema
    assert perturb("--input-table", reviews, "--output", str(tmp_path / "to_path")) == 0
    assert spark.read.parquet(str(tmp_path / "to_path")).count() == 500
    manifest = json.loads((tmp_path / "to_path" / "_dpspark_manifest.json").read_text())
    assert manifest["input"] == f"`spark_catalog`.`{schema}`.`reviews`"


def test_etl_partition_of_a_table_and_the_ledger(spark, schema, reviews, capsys):
    src = f"{schema}.events"
    spark.table(reviews).write.partitionBy("date").saveAsTable(src)
    out = f"{schema}.events_private"

    def etl(day: str, *extra: str) -> int:
        return perturb("--input-table", src, "--output-table", out, "--partition", f"date={day}", *extra)

    assert etl("2026-11-20") == 0
    assert tables.partition_columns(spark, out) == ["date"]
    assert [r[0] for r in spark.sql(f"SHOW PARTITIONS {out}").collect()] == ["date=2026-11-20"]
    assert etl("2026-11-21") == 0
    first = sorted(tuple(r) for r in spark.table(out).where("date = '2026-11-20'").collect())
    assert len(first) == 250 and spark.table(out).count() == 500
    assert spark.table(out).schema == spark.table(src).schema
    snapshot = rows(spark, out)

    # A second release of a released partition: refused by the ledger (exit 7), nothing changed.
    assert etl("2026-11-21") == 7
    err = capsys.readouterr().err
    assert "date=2026-11-21" in err and "overlaps 1 earlier release" in err and "--allow-rerelease" in err
    assert rows(spark, out) == snapshot
    with pytest.raises(dpspark.ReleaseRefusedError):
        dpspark.release(spark.table(src), output_table=out, columns="text", epsilon=1, mode="overwrite")

    # On purpose: only that partition is replaced (dynamic partition overwrite), the other one kept.
    assert spark.conf.get("spark.sql.sources.partitionOverwriteMode") == "STATIC"
    assert etl("2026-11-21", "--allow-rerelease") == 0
    assert spark.conf.get("spark.sql.sources.partitionOverwriteMode") == "STATIC"  # restored
    assert sorted(tuple(r) for r in spark.table(out).where("date = '2026-11-20'").collect()) == first
    assert spark.table(out).count() == 500 and rows(spark, out) != snapshot
    entries = [r for r in ledger_rows(spark, out) if r["kind"] == "entry"]
    assert len(entries) == 3
    spent = {s["partition"]: s["epsilon_at_most"] for s in tables.manifest_of(spark, out)["ledger"]["epsilon_spent"]}
    assert spent == {"date=2026-11-20": 10.0, "date=2026-11-21": 20.0}

    assert etl("2030-01-01") == 3
    assert "SHOW PARTITIONS" in capsys.readouterr().err
    assert names(spark, schema) == ["events", "events_private", "events_private__dpspark_ledger", "reviews"]


def test_failed_commit_is_withdrawn_and_leaves_nothing(spark, schema, reviews, capsys):
    src = f"{schema}.events"
    spark.table(reviews).write.partitionBy("date").saveAsTable(src)
    out = f"{schema}.events_private"
    args = ["--input-table", src, "--output-table", out]
    assert perturb(*args, "--partition", "date=2026-11-20") == 0
    snapshot = rows(spark, out)
    # The release's columns differ from the output's (text_original): refused at commit, after the work.
    assert perturb(*args, "--partition", "date=2026-11-21", "--keep-original") == 5
    assert "other columns" in capsys.readouterr().err
    assert rows(spark, out) == snapshot
    assert names(spark, schema) == ["events", "events_private", "events_private__dpspark_ledger", "reviews"]
    kinds = sorted(r["kind"] for r in ledger_rows(spark, out))
    assert kinds == ["entry", "entry", "manifest", "manifest", "withdrawn"]
    # The withdrawn release does not count: the partition can be released.
    assert perturb(*args, "--partition", "date=2026-11-21") == 0
    assert spark.table(out).count() == 500


def test_output_table_equal_to_input_is_refused(spark, schema, reviews, capsys):
    before = rows(spark, reviews)
    for out in (reviews, f"spark_catalog.{schema.upper()}.REVIEWS"):
        assert perturb("--input-table", reviews, "--output-table", out, "--mode", "overwrite") == 2
        err = capsys.readouterr().err
        assert "is the input table" in err and "choose another --output-table" in err
    # The same table reached as a DataFrame (Python API): its plan names the table.
    with pytest.raises(dpspark.ConfigError, match="is the input table"):
        dpspark.release(spark.table(reviews), output_table=reviews, columns="text", epsilon=10, mode="overwrite")
    # The same files read by path (Python API): refused by location.
    with pytest.raises(dpspark.ConfigError, match="overlaps the input"):
        dpspark.release(
            spark.read.parquet(tables.location(spark, reviews)),
            output_table=reviews,
            columns="text",
            epsilon=10,
            mode="overwrite",
        )
    # A path output inside the input table's files: refused as for a path input.
    where = tables.location(spark, reviews)
    assert perturb("--input-table", reviews, "--output", f"{where}/private") == 2
    assert "lies inside the input" in capsys.readouterr().err
    assert rows(spark, reviews) == before
    assert names(spark, schema) == ["reviews"]
    assert not any("private" in p for p in os.listdir(where.removeprefix("file:")))


def test_bad_tables_are_refused_before_anything_is_created(spark, schema, reviews, capsys):
    for bad in ("a.b.c.d", "my table", f"{schema}.re-views", "", "`x"):
        assert perturb("--input-table", reviews, "--output-table", bad) == 2
        err = capsys.readouterr().err
        assert "is not a table name" in err and "catalog.schema.table" in err
    assert perturb("--input-table", "no_schema_here.t", "--output-table", f"{schema}.o") == 3
    assert "does not exist" in capsys.readouterr().err
    assert perturb("--input-table", reviews, "--output-table", "no_schema_here.t") == 5
    assert "schema `spark_catalog`.`no_schema_here` does not exist" in capsys.readouterr().err
    assert perturb("--input-table", reviews, "--output-table", f"{schema}.o", "--table-format", "no_such_format") == 5
    assert "cannot be created" in (err := capsys.readouterr().err) and "no_such_format" in err
    assert perturb("--input-table", reviews, "--input", str(SAMPLE), "--output-table", f"{schema}.o") == 2
    assert "choose one of input" in capsys.readouterr().err
    assert perturb("--input-table", reviews) == 2
    assert "--output-table TABLE" in capsys.readouterr().err

    # An existing table that is not a dpspark release is never replaced.
    spark.table(reviews).write.saveAsTable(f"{schema}.other")
    before = rows(spark, f"{schema}.other")
    assert perturb("--input-table", reviews, "--output-table", f"{schema}.other", "--mode", "overwrite") == 5
    assert "is not a dpspark release" in capsys.readouterr().err
    assert rows(spark, f"{schema}.other") == before
    assert names(spark, schema) == ["other", "reviews"]


def test_release_vectors_table_to_table(spark, schema, capsys):
    src, out = f"{schema}.vectors", f"{schema}.vectors_private"
    data = [(i, [float(i % 3), 1.0, -0.5, 2.0]) for i in range(40)]
    spark.createDataFrame(data, "id long, vec array<double>").write.saveAsTable(src)
    code = main(
        ["release-vectors", "--input-table", src, "--output-table", out, "--column", "vec", "--epsilon", "5"]
        + ["--dim", "3", "--quiet"]
    )
    assert code == 0, capsys.readouterr().err
    released = spark.table(out)
    assert released.schema == spark.table(src).schema and released.count() == 40
    assert {len(r["vec"]) for r in released.collect()} == {3}
    files = [r for r in ledger_rows(spark, out) if r["kind"] == "file"]
    assert [r["name"] for r in files] == ["_dpspark_projection.npy"]
    assert tables.manifest_of(spark, out)["output_dimension"] == 3


def test_etl_partition_of_a_table_into_a_path(spark, schema, reviews, tmp_path, capsys):
    src, out = f"{schema}.events", tmp_path / "out"
    spark.table(reviews).write.partitionBy("date").saveAsTable(src)
    args = ["--input-table", src, "--output", str(out), "--partition", "date=2026-11-20"]
    assert perturb(*args) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("date=")) == ["date=2026-11-20"]
    assert spark.read.parquet(str(out)).count() == 250
    assert perturb(*args) == 7
    assert "overlaps 1 earlier release" in capsys.readouterr().err


def test_table_settings_in_yaml(tmp_path):
    from dpspark.config import PerturbConfig, VectorsConfig

    conf = tmp_path / "perturb.yaml"
    conf.write_text("input-table: main.raw.reviews\noutput_table: main.shared.reviews\nepsilon: 10\n")
    c = PerturbConfig.from_sources(str(conf), {"partition": "date=2026-11-21"})
    assert (c.input_table, c.output_table, c.input, c.output) == ("main.raw.reviews", "main.shared.reviews", None, None)
    with pytest.raises(dpspark.ConfigError, match="choose one of output"):
        VectorsConfig.parse({"column": "v", "epsilon": 1, "output": "/x", "output_table": "t"})
