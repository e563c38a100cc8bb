"""Releases under concurrent runs, cached inputs, escaped partition names and damaged ledgers.

Each refused run is checked for its exit code, its message, an unchanged output and input,
and nothing left beside the output. Races are made certain, not hoped for: the threaded tests
hold every run at a barrier after its checks and before its commit, so both have read the
same ledger; the process test races two real CLI processes (a race needs two contenders).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from test_release_safety import leftovers, perturb, refused, snapshot

import dpspark
from dpspark.config import PerturbConfig
from dpspark.errors import ConfigError, LedgerError, OutputExistsError, ReleaseRefusedError
from dpspark.spark import io, release
from dpspark.spark.perturb import run_perturb

pytestmark = pytest.mark.spark


def ledger_entries(spark, out: Path) -> list[dict]:
    return io.read_ledger(io.FileSystem(spark), str(out))


def nested_stages(out: Path) -> list[str]:
    return [p.name for p in out.rglob("_dpspark_tmp_*")]


def described(errors: list[BaseException]) -> list[str]:
    """Each error with its message (an AnalysisException's repr has none)."""
    return [f"{type(e).__name__}: {e}"[:2000] for e in errors]


def race(spark, monkeypatch, configs: list[dict]) -> tuple[list[dict], list[BaseException]]:
    """Run releases in threads of this session, all held after their checks until every one has
    passed them: each reads the ledger before any commits."""
    barrier = threading.Barrier(len(configs), timeout=120)
    write = getattr(release._write, "original", release._write)  # an earlier race's patch: not nested
    arrived = set()

    def held(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        arrived.add(threading.get_ident())
        barrier.wait()
        return write(*args, **kwargs)

    held.original = write
    monkeypatch.setattr(release, "_write", held)
    results, errors = [], []

    def run(config: dict) -> None:
        try:
            results.append(run_perturb(PerturbConfig.parse({"columns": "text", "vocab_size": 3000, **config}), spark))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
            if threading.get_ident() not in arrived:  # it failed before the barrier: the others stop waiting
                barrier.abort()

    threads = [threading.Thread(target=run, args=(c,)) for c in configs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


# --- one new output, overwrites, ETL partitions ------------------------------------------------------


@pytest.mark.runtime
def test_two_first_releases_into_one_new_output(spark, monkeypatch, tmp_path, dataset):
    before, out = snapshot(dataset), tmp_path / "out"
    config = {"input": str(dataset), "output": str(out), "epsilon": 10}
    results, errors = race(spark, monkeypatch, [config, config])
    assert len(results) == 1 and len(errors) == 1, described(errors)
    assert isinstance(errors[0], OutputExistsError) and errors[0].exit_code == 5
    assert "created by another run while this one ran" in str(errors[0]) and "not spent" in str(errors[0])
    assert nested_stages(out) == [] and leftovers(tmp_path) == []
    assert [e["run_id"] for e in ledger_entries(spark, out)] == [results[0]["run_id"]]
    assert json.loads((out / io.MANIFEST).read_text())["run_id"] == results[0]["run_id"]
    assert snapshot(dataset) == before


def test_two_overwrites_at_once_one_wins(spark, monkeypatch, tmp_path, dataset):
    out = tmp_path / "out"
    assert perturb(dataset, out) == 0
    config = {"input": str(dataset), "output": str(out), "epsilon": 10, "mode": "overwrite", "allow_rerelease": True}
    results, errors = race(spark, monkeypatch, [config, config])
    assert len(results) == 1 and len(errors) == 1, described(errors)
    assert isinstance(errors[0], ReleaseRefusedError) and errors[0].exit_code == 7
    assert "released by another run while this one ran" in str(errors[0])
    entries = ledger_entries(spark, out)
    assert len(entries) == 2 and entries[-1]["run_id"] == results[0]["run_id"]
    manifest = json.loads((out / io.MANIFEST).read_text())
    assert (
        manifest["run_id"] == results[0]["run_id"] and manifest["ledger"]["epsilon_spent"][0]["epsilon_at_most"] == 20
    )
    assert nested_stages(out) == [] and leftovers(tmp_path) == []


@pytest.fixture()
def partitioned(tmp_path) -> Path:
    src = tmp_path / "in"
    for day, hour, texts in (("2026-11-20", "01", ["the cat sat"]), ("2026-11-20", "02", ["hello world"])):
        d = src / f"date={day}" / f"hour={hour}"
        d.mkdir(parents=True)
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), d / "part-0.parquet")
    return src


def test_overlapping_etl_runs_at_once_one_wins(spark, monkeypatch, tmp_path, partitioned):
    out = tmp_path / "out"
    base = {"input": str(partitioned), "output": str(out), "epsilon": 5}
    configs = [{**base, "partition": "date=2026-11-20"}, {**base, "partition": "date=2026-11-20/hour=01"}]
    results, errors = race(spark, monkeypatch, configs)
    assert len(results) == 1 and len(errors) == 1, described(errors)
    assert isinstance(errors[0], ReleaseRefusedError) and "while this one ran" in str(errors[0])
    entries = ledger_entries(spark, out)
    assert [e["run_id"] for e in entries] == [results[0]["run_id"]]
    assert nested_stages(out) == [] and leftovers(tmp_path) == []
    # Disjoint partitions at once both land (the lock queues their commits only).
    out2 = tmp_path / "out2"
    disjoint = [
        {**base, "output": str(out2), "partition": "date=2026-11-20/hour=01"},
        {**base, "output": str(out2), "partition": "date=2026-11-20/hour=02"},
    ]
    results, errors = race(spark, monkeypatch, disjoint)
    assert errors == [] and len(ledger_entries(spark, out2)) == 2
    assert json.loads((out2 / io.MANIFEST).read_text())["ledger"]["releases"] == 2


@pytest.mark.runtime
def test_two_first_releases_into_one_new_table(spark, monkeypatch, tmp_path, dataset):
    spark.sql("CREATE DATABASE IF NOT EXISTS racedb")
    try:
        config = {"input": str(dataset), "output_table": "racedb.private", "epsilon": 10}
        results, errors = race(spark, monkeypatch, [config, config])
        assert len(results) == 1 and len(errors) == 1, described(errors)
        assert isinstance(errors[0], OutputExistsError) and "created by another run" in str(errors[0])
        entries = spark.table("racedb.private__dpspark_ledger").where("kind = 'entry'").collect()
        assert [r["run_id"] for r in entries] == [results[0]["run_id"]]
        assert spark.table("racedb.private").count() == 3
        assert [t.name for t in spark.catalog.listTables("racedb")] == ["private", "private__dpspark_ledger"]
        warehouse = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
        assert not list(warehouse.glob("racedb.db/_dpspark*"))  # the lock went with the commit
    finally:
        spark.sql("DROP DATABASE IF EXISTS racedb CASCADE")


def _cli(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS",)}
    code = f"import sys; from dpspark.cli import main; sys.exit(main({list(args)!r}))"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)


def test_two_processes_into_one_new_output_then_two_overwrites(tmp_path, dataset):
    before, out = snapshot(dataset), tmp_path / "out"
    args = ["perturb", "--input", str(dataset), "--output", str(out), "--columns", "text", "--epsilon", "10"]
    args += ["--vocab-size", "2000", "--master", "local[1]", "--quiet"]

    def two(*extra: str) -> list[tuple[int, str]]:
        procs = [_cli(*args, *extra) for _ in range(2)]
        errs = [p.communicate(timeout=600)[1] for p in procs]
        print("exit codes:", [p.returncode for p in procs])
        return [(p.returncode, err) for p, err in zip(procs, errs, strict=True)]

    done = two()
    codes = sorted(c for c, _ in done)
    assert codes[0] == 0 and codes[1] != 0 and set(codes) <= {0, 5, 7}, done
    assert len(ledger_entries_files(out)) == 1 and nested_stages(out) == [] and leftovers(tmp_path) == []
    done = two("--mode", "overwrite", "--allow-rerelease")
    codes = [c for c, _ in done]
    assert set(codes) <= {0, 7} and 0 in codes, done
    # Exactly as many ledger entries as releases that exited 0, and one release in the output.
    assert len(ledger_entries_files(out)) == 1 + codes.count(0)
    manifest = json.loads((out / io.MANIFEST).read_text())
    assert manifest["ledger"]["releases"] == 1 + codes.count(0)
    assert len(list(out.glob("*.parquet"))) >= 1 and nested_stages(out) == [] and leftovers(tmp_path) == []
    assert snapshot(dataset) == before


def ledger_entries_files(out: Path) -> list[Path]:
    return sorted((out / "_dpspark_ledger").glob("*.json"))


# --- lineage that caching cannot hide ----------------------------------------------------------------


@pytest.mark.runtime
def test_a_cached_input_is_still_traced(spark, tmp_path, dataset):
    before = snapshot(dataset)
    spark.read.parquet(str(dataset)).cache().count()
    try:
        fresh = spark.read.parquet(str(dataset))
        assert fresh.inputFiles() == []  # what hid the input before
        for df in (fresh, fresh.select("text")):
            with pytest.raises(ConfigError, match="lies inside the input"):
                dpspark.release(df, output=str(dataset / "private"), columns="text", epsilon=10)
        fresh.createOrReplaceTempView("raw_view")
        with pytest.raises(ConfigError, match="lies inside the input"):
            dpspark.release(spark.table("raw_view"), output=str(dataset / "x"), columns="text", epsilon=10)
    finally:
        spark.catalog.clearCache()
        spark.catalog.dropTempView("raw_view")
    assert snapshot(dataset) == before and leftovers(dataset.parent) == []


@pytest.mark.runtime
def test_a_cached_table_is_still_traced(spark, capsys, tmp_path, dataset):
    before = snapshot(dataset)
    spark.sql(f"CREATE TABLE raw_cached USING parquet LOCATION '{dataset}'")
    try:
        spark.sql("CACHE TABLE raw_cached")
        code = main_cli("--input-table", "raw_cached", "--output", str(dataset / "x"))
        refused(capsys, code, ConfigError, "lies inside the input")
        with pytest.raises(ConfigError, match="is the input table"):
            dpspark.release(spark.table("raw_cached"), output_table="raw_cached", columns="text", epsilon=10)
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS raw_cached")
        spark.sql("DROP TABLE IF EXISTS raw_cached")
    assert snapshot(dataset) == before


def main_cli(*args: str) -> int:
    from dpspark.cli import main

    return main(["perturb", *args, "--columns", "text", "--epsilon", "10", "--vocab-size", "3000", "--quiet"])


@pytest.mark.runtime
def test_input_adds_to_the_dataframes_sources(spark, tmp_path, dataset):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(ConfigError, match="lies inside the input"):
        dpspark.release(
            spark.read.parquet(str(dataset)),
            input=str(elsewhere),
            output=str(dataset / "p"),
            columns="text",
            epsilon=10,
        )
    assert not (dataset / "p").exists()


@pytest.mark.runtime
def test_untraceable_dataframes_need_input(spark, tmp_path, dataset):
    df = spark.read.parquet(str(dataset)).localCheckpoint()
    rows = spark.createDataFrame([(1, "the city")], "id long, text string")
    for untraced in (df, rows):
        with pytest.raises(ConfigError, match="cannot be traced.*pass input="):
            dpspark.release(untraced, output=str(tmp_path / "o"), columns="text", epsilon=10, vocab_size=3000)
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []
    # Named, it is checked against that source and released.
    with pytest.raises(ConfigError, match="lies inside the input"):
        dpspark.release(df, input=str(dataset), output=str(dataset / "o"), columns="text", epsilon=10)
    m = dpspark.release(df, input=str(dataset), output=str(tmp_path / "o"), columns="text", epsilon=10, vocab_size=3000)
    assert m["counts"]["rows"] == 3


# --- tables: where a new table would be created ------------------------------------------------------


@pytest.mark.runtime
def test_a_new_output_table_inside_the_input_is_refused(spark, capsys, tmp_path, dataset):
    before = snapshot(dataset)
    db = f"rawdb_{tmp_path.name[-12:].replace('-', '_')}"
    # Never dropped: DROP DATABASE deletes its location, which is the raw input here.
    spark.sql(f"CREATE DATABASE {db} LOCATION '{dataset}'")
    code = main_cli("--input", str(dataset), "--output-table", f"{db}.private")
    refused(capsys, code, ConfigError, "would be created with its files at", "overlaps the input")
    assert not spark.catalog.tableExists(f"{db}.private")
    assert not spark.catalog.tableExists(f"{db}.private__dpspark_ledger")
    assert snapshot(dataset) == before and spark.read.parquet(str(dataset)).count() == 3


def test_a_marked_table_without_its_ledger_is_damaged(spark, capsys, tmp_path, dataset):
    spark.sql("CREATE DATABASE IF NOT EXISTS outdb")
    try:
        assert main_cli("--input", str(dataset), "--output-table", "outdb.private") == 0
        spark.sql("DROP TABLE outdb.private__dpspark_ledger")
        before = spark.table("outdb.private").collect()
        code = main_cli(
            "--input", str(dataset), "--output-table", "outdb.private", "--mode", "overwrite", "--allow-rerelease"
        )
        refused(capsys, code, LedgerError, "ledger table", "damaged")
        assert sorted(spark.table("outdb.private").collect()) == sorted(before)
        assert not spark.catalog.tableExists("outdb.private__dpspark_ledger")
    finally:
        spark.sql("DROP DATABASE IF EXISTS outdb CASCADE")


# --- the ledger of a path output ---------------------------------------------------------------------


def test_a_manifest_without_its_ledger_is_damaged(spark, capsys, tmp_path, dataset):
    out = tmp_path / "o"
    assert perturb(dataset, out) == 0
    shutil.rmtree(out / "_dpspark_ledger")  # what a sync tool that skips _ folders leaves
    before = snapshot(out)
    code = perturb(dataset, out, "--mode", "overwrite", "--allow-rerelease")
    refused(capsys, code, LedgerError, "no ledger entries", "restore")
    assert snapshot(out) == before and leftovers(tmp_path) == []


# --- partition values that Spark escapes -------------------------------------------------------------

VALUES = ["a=b", "x:y", "50%", "q?#", "tab\there"]
HAND = ["a=b", "50%", "q?"]  # a literal ':' or '#' is no Hadoop path: Spark cannot read such a layout


def _write_layout(spark, root: Path, how: str) -> list[str]:
    """The input in one of three layouts; returns the values it holds."""
    values = HAND if how == "hand" else VALUES
    if how == "pyarrow" and not _pyarrow_escapes():
        values = HAND  # pyarrow before URI encoding (the runtimes' pyarrow 8) writes values literally, as by hand
    rows = [(i, v, f"the city number {i}") for v in values for i in range(2)]
    if how == "spark":
        df = spark.createDataFrame(rows, "id long, k string, text string")
        df.write.partitionBy("k").parquet(str(root))
    elif how == "pyarrow":  # pyarrow's hive partitioning escapes values as URIs (%3D ...) where it can
        table = pa.table({"id": [r[0] for r in rows], "k": [r[1] for r in rows], "text": [r[2] for r in rows]})
        ds.write_dataset(table, root, format="parquet", partitioning=["k"], partitioning_flavor="hive")
    else:  # by hand: the value written literally (where Hadoop can read such a name at all)
        for v in values:
            (root / f"k={v}").mkdir(parents=True)
            pq.write_table(
                pa.table({"id": [0, 1], "text": ["the city number 0", "the city number 1"]}),
                root / f"k={v}" / "part-0.parquet",
            )
    return values


def _pyarrow_escapes() -> bool:
    """Whether this pyarrow escapes partition values in directory names (a ':' written as %3A)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        ds.write_dataset(
            pa.table({"k": ["x:y"], "v": [1]}), d, format="parquet", partitioning=["k"], partitioning_flavor="hive"
        )
        return not Path(d, "k=x:y").exists()


@pytest.mark.runtime
@pytest.mark.parametrize("how", ["spark", "pyarrow", "hand"])
def test_escaped_partition_values_are_found_and_published(spark, capsys, tmp_path, how):
    src, out = tmp_path / "in", tmp_path / "out"
    values = _write_layout(spark, src, how)
    before = snapshot(src)
    for v in values:
        assert perturb(src, out, "--partition", f"k={v}") == 0, capsys.readouterr().err
        m = json.loads((out / io.MANIFEST).read_text())
        assert m["counts"]["rows"] == 2
    published = spark.read.parquet(str(out))
    assert sorted(r["k"] for r in published.select("k").distinct().collect()) == sorted(values)
    assert published.count() == 2 * len(values)
    assert sorted(e["partition"]["k"] for e in ledger_entries(spark, out)) == sorted(values)
    # The same records again, spelled as Spark writes the directory: a re-release.
    code = perturb(src, out, "--partition", "k=a%3Db")
    refused(capsys, code, ReleaseRefusedError, "overlaps 1 earlier release")
    assert snapshot(src) == before and leftovers(tmp_path) == []


def test_a_partition_the_input_lacks_is_an_error_not_an_empty_release(spark, capsys, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    _write_layout(spark, src, "spark")
    code = perturb(src, out, "--partition", "k=a=c")
    refused(capsys, code, dpspark.errors.InputDataError, "does not exist")
    assert not out.exists() and leftovers(tmp_path) == []


# --- paths no file system can take -------------------------------------------------------------------


@pytest.mark.parametrize("where", ["scheme", "localhost", "dangling"])
def test_outputs_that_cannot_be_paths_are_refused_before_the_job(spark, capsys, tmp_path, dataset, where):
    if where == "dangling":
        (tmp_path / "link").symlink_to(tmp_path / "nowhere" / "out", target_is_directory=True)
    output = {"scheme": "res:v2", "localhost": f"file://localhost{tmp_path}/o", "dangling": str(tmp_path / "link")}
    code = perturb(dataset, output[where])
    if where == "localhost" and code == 0:  # Hadoop took the host as the local machine: a release like any
        assert (tmp_path / "o" / io.MANIFEST).exists()
        return
    err = refused(capsys, code, ConfigError, "output")
    assert "Traceback" not in err and "Py4J" not in err
    assert not (tmp_path / "nowhere").exists() and leftovers(tmp_path) == []


@pytest.mark.runtime
def test_overlapping_sql_settings_of_two_threads_restore_the_sessions_value(spark):
    """Two releases in one session overlap their SqlConf blocks out of order (A enters, B enters, A
    leaves, B leaves): the session's own value comes back, and while B still runs it keeps its value."""
    key = "spark.sql.sources.partitionColumnTypeInference.enabled"
    original = spark.conf.get(key, None)
    a, b = io.SqlConf(spark, {key: "false"}), io.SqlConf(spark, {key: "false"})
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert spark.conf.get(key) == "false"  # B still holds it
    b.__exit__(None, None, None)
    assert spark.conf.get(key, None) == original
    # Real threads, many times over: never a value left behind.
    barrier = threading.Barrier(2)

    def block() -> None:
        barrier.wait()
        for _ in range(20):
            with io.SqlConf(spark, {key: "false"}):
                pass

    threads = [threading.Thread(target=block) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert spark.conf.get(key, None) == original


@pytest.mark.runtime
def test_a_path_removed_while_the_file_system_looks_at_it_reads_as_missing(spark, monkeypatch, tmp_path):
    """Another run's lock file comes and goes: a path that vanishes between Hadoop's calls is no
    directory and has no children (was: a Py4JJavaError of getFileStatus, seen in a release race)."""
    fs = io.FileSystem(spark)
    lock, folder = tmp_path / "lock", tmp_path / "folder"
    hadoop = fs._hadoop

    class Vanishing:  # the real Hadoop file system; the path goes after its existence was asked
        def __init__(self, real) -> None:  # noqa: ANN001
            self.real = real

        def __getattr__(self, name: str):  # noqa: ANN204
            def call(*args):  # noqa: ANN002, ANN202
                if name != "exists":
                    shutil.rmtree(folder, ignore_errors=True)
                    lock.unlink(missing_ok=True)
                return getattr(self.real, name)(*args)

            return call

    monkeypatch.setattr(fs, "_hadoop", lambda path: (Vanishing(hadoop(path)[0]), hadoop(path)[1]))
    for make in (lambda: lock.write_text("x"), lambda: folder.mkdir()):
        make()
        assert fs.is_dir(str(lock)) is False and fs.is_dir(str(folder)) is False
    folder.mkdir()
    (folder / "a").write_text("x")
    assert fs.list(str(folder)) == []
    monkeypatch.undo()
    folder.mkdir()
    (folder / "a").write_text("x")
    assert fs.is_dir(str(folder)) and [n for n, _ in fs.list(str(folder))] == ["a"]
