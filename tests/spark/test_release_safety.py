"""The release path as a careless or hostile user meets it: every refused or failed run
exits with its code, names the problem, changes nothing and leaves nothing behind.

Each test snapshots the input's bytes before and compares after; ``leftovers`` lists
anything a run left beside its output (stages, backups, probes).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark.cli import main
from dpspark.config import PerturbConfig
from dpspark.errors import (
    ConfigError,
    InputDataError,
    LedgerError,
    OutputError,
    ReleaseRefusedError,
)
from dpspark.spark import io
from dpspark.spark.perturb import run_perturb

pytestmark = pytest.mark.spark

FAST = ["--vocab-size", "3000", "--quiet"]


def snapshot(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(("_dpspark", ".dpspark")))


def perturb(inp, out, *extra) -> int:
    return main(
        ["perturb", "--input", str(inp), "--output", str(out), "--columns", "text", "--epsilon", "10", *FAST, *extra]
    )


def refused(capsys, code: int, error: type, *fragments: str) -> str:
    err = capsys.readouterr().err
    assert code == error.exit_code, err
    assert "error:" in err
    for f in fragments:
        assert f in err, f"{f!r} not in {err}"
    return err


@pytest.fixture()
def partitioned(tmp_path) -> Path:
    src = tmp_path / "in"
    for day, hour, texts in (
        ("2026-11-20", "01", ["the cat sat", "a dog ran"]),
        ("2026-11-20", "02", ["hello world"]),
        ("2026-11-21", "01", ["good morning", None, ""]),
    ):
        d = src / f"date={day}" / f"hour={hour}"
        d.mkdir(parents=True)
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), d / "part-0.parquet")
    return src


# --- paths that could hurt the input ---------------------------------------------------------------


@pytest.mark.runtime
@pytest.mark.parametrize("where", ["equal", "inside", "parent", "symlink", "relative"])
def test_output_overlapping_input_is_refused_in_overwrite_mode(spark, capsys, tmp_path, dataset, monkeypatch, where):
    before = snapshot(tmp_path)
    output = {
        "equal": dataset,
        "inside": dataset / "private",
        "parent": tmp_path,
        "symlink": tmp_path / "link",
        "relative": dataset / "sub" / "..",
    }[where]
    if where == "symlink":
        output.symlink_to(dataset, target_is_directory=True)
        before = snapshot(tmp_path)
    code = perturb(dataset, output, "--mode", "overwrite")
    refused(capsys, code, ConfigError, "the input", "never write over, into or around")
    assert snapshot(tmp_path) == before


def test_etl_output_equal_to_input_is_refused(spark, capsys, partitioned):
    before = snapshot(partitioned)
    code = perturb(partitioned, partitioned, "--partition", "date=2026-11-20/hour=01")
    refused(capsys, code, ConfigError, "is the input")
    assert snapshot(partitioned) == before


def test_overwrite_replaces_only_a_dpspark_release(spark, capsys, tmp_path, dataset):
    other = tmp_path / "reports"
    other.mkdir()
    (other / "q3.csv").write_text("precious")
    code = perturb(dataset, other, "--mode", "overwrite")
    refused(capsys, code, OutputError, "not a dpspark release")
    assert snapshot(other) == {"q3.csv": b"precious"}


def test_unwritable_output_fails_before_preparation(spark, capsys, tmp_path, dataset, monkeypatch):
    import dpspark.run.perturb as job  # the job on every engine

    monkeypatch.setattr(job, "prepare", lambda *a, **k: pytest.fail("prepared although the output is unwritable"))
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code = perturb(dataset, blocker / "out", "--mode", "overwrite")
    refused(capsys, code, OutputError, "cannot be written")
    assert blocker.read_text() == "x" and leftovers(tmp_path) == []


def test_seed_must_be_non_negative(spark, capsys, tmp_path, dataset):
    code = perturb(dataset, tmp_path / "o", "--seed", "-1")
    refused(capsys, code, ConfigError, "seed", "[0, 2**63)")
    assert not (tmp_path / "o").exists()


# --- the ledger ------------------------------------------------------------------------------------


def test_finer_then_coarser_release_is_refused_and_values_stay_strings(spark, capsys, tmp_path, partitioned):
    out = tmp_path / "out"
    assert perturb(partitioned, out, "--partition", "date=2026-11-20/hour=01") == 0
    assert sorted(p.name for p in (out / "date=2026-11-20").iterdir()) == ["hour=01"]  # not hour=1
    after_first = snapshot(out)
    code = perturb(partitioned, out, "--partition", "date=2026-11-20")
    refused(
        capsys, code, ReleaseRefusedError, "overlaps 1 earlier release", "date=2026-11-20/hour=01", "--allow-rerelease"
    )
    assert snapshot(out) == after_first and leftovers(tmp_path) == []
    # A disjoint partition is fine. Its directory keeps the value as written (hour=01), and Spark
    # reads it back as the string "01" with partition type inference off (as dpspark reads input);
    # Spark's default inference would turn it into the integer 1.
    assert perturb(partitioned, out, "--partition", "date=2026-11-21") == 0
    assert sorted(p.name for p in (out / "date=2026-11-21").iterdir()) == ["hour=01"]
    with io.SqlConf(spark, io.STRING_PARTITIONS):
        df = spark.read.option("basePath", str(out)).parquet(str(out / "date=2026-11-21"))
        rows = df.collect()
        assert dict(df.dtypes)["hour"] == "string" and dict(df.dtypes)["date"] == "string"
    assert len(rows) == 3 and {(r["date"], r["hour"]) for r in rows} == {("2026-11-21", "01")}
    # A reader with Spark's type inference on (its default; set here, whatever earlier tests left) sees 1.
    with io.SqlConf(spark, {"spark.sql.sources.partitionColumnTypeInference.enabled": "true"}):
        inferred = spark.read.option("basePath", str(out)).parquet(str(out / "date=2026-11-21"))
        assert dict(inferred.dtypes)["hour"] == "int" and {r["hour"] for r in inferred.collect()} == {1}
    entries = io.read_ledger(io.FileSystem(spark), str(out))
    assert sorted(json.dumps(e["partition"]) for e in entries) == sorted(
        [json.dumps({"date": "2026-11-20", "hour": "01"}), json.dumps({"date": "2026-11-21"})]
    )


def test_coarser_then_finer_release_is_refused(spark, capsys, tmp_path, partitioned):
    out = tmp_path / "out"
    assert perturb(partitioned, out, "--partition", "date=2026-11-20") == 0
    assert sorted(p.name for p in (out / "date=2026-11-20").iterdir()) == ["hour=01", "hour=02"]
    before = snapshot(out)
    code = perturb(partitioned, out, "--partition", "date=2026-11-20/hour=02")
    refused(capsys, code, ReleaseRefusedError, "overlaps")
    assert snapshot(out) == before
    assert perturb(partitioned, out, "--partition", "date=2026-11-20/hour=02", "--allow-rerelease") == 0
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    spent = {s["partition"]: s["epsilon_at_most"] for s in m["ledger"]["epsilon_spent"]}
    assert m["ledger"]["rerelease"] is True and spent["date=2026-11-20/hour=02"] == 20.0


def test_two_concurrent_partition_releases_both_enter_the_ledger(spark, tmp_path, partitioned):
    out = tmp_path / "out"
    assert perturb(partitioned, out, "--partition", "date=2026-11-21") == 0  # the output exists: a release
    results, errors = [], []

    def release(spec: str) -> None:
        try:
            config = PerturbConfig.parse(
                {
                    "input": str(partitioned),
                    "output": str(out),
                    "columns": "text",
                    "epsilon": 5,
                    "vocab_size": 3000,
                    "partition": spec,
                }
            )
            results.append(run_perturb(config, spark=spark))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [
        threading.Thread(target=release, args=(s,)) for s in ("date=2026-11-20/hour=01", "date=2026-11-20/hour=02")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(results) == 2
    entries = io.read_ledger(io.FileSystem(spark), str(out))
    assert sorted(e["run_id"] for e in entries if e["epsilon"] == 5) == sorted(r["run_id"] for r in results)
    assert len(entries) == 3


def test_corrupt_ledger_is_its_own_error(spark, capsys, tmp_path, partitioned):
    out = tmp_path / "out"
    assert perturb(partitioned, out, "--partition", "date=2026-11-21") == 0
    (entry,) = (out / "_dpspark_ledger").glob("*.json")
    entry.write_text('{"run_id": "x", "partition": ')
    before = snapshot(out)
    code = perturb(partitioned, out, "--partition", "date=2026-11-20")
    refused(capsys, code, LedgerError, str(entry.name), "damaged")
    assert snapshot(out) == before and leftovers(tmp_path) == []


def test_overwriting_a_full_release_keeps_its_history_and_needs_allow_rerelease(spark, capsys, tmp_path, dataset):
    out = tmp_path / "o"
    assert perturb(dataset, out) == 0
    before = snapshot(out)
    code = perturb(dataset, out, "--mode", "overwrite")
    refused(capsys, code, ReleaseRefusedError, "spends privacy again")
    assert snapshot(out) == before
    assert perturb(dataset, out, "--mode", "overwrite", "--allow-rerelease") == 0
    assert len(list((out / "_dpspark_ledger").glob("*.json"))) == 2 and leftovers(tmp_path) == []


# --- side outputs ----------------------------------------------------------------------------------


def _public(manifest: dict) -> dict:
    """A manifest without what may differ between runs: ids, times, paths, timings."""
    drop = {"run_id", "started_at", "finished_at", "input", "output", "timings", "duration_s", "ledger"}
    return {k: v for k, v in manifest.items() if k not in drop}


def test_inputs_with_the_same_output_give_the_same_side_outputs(spark, capsys, caplog, tmp_path):
    # Different inputs (an OOV token dropped, case, whitespace) whose outputs are the same text at ε = 1e6.
    texts = {"a": ["City  life,\tquiet zqxwvkj", "the river"], "b": ["city life, quiet", "The   river\r\n"]}
    runs = {}
    for name, rows in texts.items():
        src = tmp_path / f"in_{name}.parquet"
        pq.write_table(pa.table({"id": [1, 2], "text": rows}), src)
        caplog.clear()
        args = ["perturb", "--input", str(src), "--output", str(tmp_path / name), "--columns", "text"]
        with pytest.warns(dpspark.PrivacyWarning, match="100% of tokens unchanged"):  # ε = 1e6: perturb says so
            code = main([*args, "--epsilon", "1e6", "--vocab-size", "3000", "--oov", "drop"])
        assert code == 0
        stdout = json.loads(capsys.readouterr().out)
        manifest = json.loads((tmp_path / name / "_dpspark_manifest.json").read_text())
        logs = [json.loads(r.getMessage()) for r in caplog.records if r.name == "dpspark"]
        output = sorted(pq.read_table(tmp_path / name).column("text").to_pylist())
        runs[name] = (output, stdout, manifest, logs)
    (out_a, so_a, m_a, logs_a), (out_b, so_b, m_b, logs_b) = runs["a"], runs["b"]
    assert out_a == out_b and out_a[1] == "the river" and len(out_a[0].split()) == 4
    assert m_a["counts"] == m_b["counts"] == {"rows": 2, "tokens": 6}
    assert _public(m_a) == _public(m_b)
    strip = ("output", "timings", "ledger")
    assert {k: v for k, v in so_a.items() if k not in strip} == {k: v for k, v in so_b.items() if k not in strip}
    strip_log = ("run_id", "duration_s")
    assert [{k: v for k, v in e.items() if k not in strip_log} for e in logs_a] == [
        {k: v for k, v in e.items() if k not in strip_log} for e in logs_b
    ]


@pytest.mark.runtime
@pytest.mark.parametrize("groups", ["many", "one"])
def test_no_raw_text_under_spark_local_dir_during_a_run(spark, tmp_path, groups):
    """Many row groups: read as several tasks, nothing shuffled. One large group: its rows are
    spread over the cores through a shuffle, whose local files the session encrypts."""
    marker = "qqmarkerzz"
    rng = np.random.default_rng(3)
    noise = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 48)) for _ in range(40_000)]
    rows = [f"the {marker} city and the river {i} {w}" for i, w in enumerate(noise)]
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"id": list(range(len(rows))), "text": rows}), src, row_group_size=2_000 if groups == "many" else None
    )
    # conftest gives the session a spark.local.dir of its own (SPARK_LOCAL_DIRS), apart from /tmp.
    local_dirs = os.environ["SPARK_LOCAL_DIRS"].split(",")
    found, done = [], threading.Event()

    def scan() -> None:
        while not done.is_set():
            for root in local_dirs:
                for dirpath, _, files in os.walk(root):
                    for f in files:
                        try:
                            if marker.encode() in Path(dirpath, f).read_bytes():
                                found.append(os.path.join(dirpath, f))
                        except OSError:
                            pass
            time.sleep(0.05)

    scanner = threading.Thread(target=scan)
    scanner.start()
    try:
        assert perturb(src, tmp_path / "o", *(["--partitions", "4"] if groups == "many" else [])) == 0
    finally:
        done.set()
        scanner.join()
    assert found == []
    spread = json.loads((tmp_path / "o" / io.MANIFEST).read_text())["spread"]
    assert (spread is None) if groups == "many" else (spread["tasks"] == 2)
    # The scan would see the marker: a plain file with it under a local dir is found.
    probe = Path(local_dirs[0]) / f"probe-{marker}.txt"
    probe.write_text(marker)
    try:
        assert any(marker.encode() in p.read_bytes() for p in Path(local_dirs[0]).glob("probe-*.txt"))
    finally:
        probe.unlink()


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.runtime
def test_columns_with_dots_and_spaces_work(spark, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"meta.source": ["web", "app"], "body text": ["the city", "a dog"], "__dpspark_tokens": [1, 2]}), src
    )
    out = tmp_path / "o"
    assert (
        main(["perturb", "--input", str(src), "--output", str(out), "--columns", "body text", "--epsilon", "10", *FAST])
        == 0
    )
    t = pq.read_table(out)
    assert t.column_names == ["meta.source", "body text", "__dpspark_tokens"]
    assert sorted(t.column("meta.source").to_pylist()) == ["app", "web"]


@pytest.mark.runtime
def test_mixed_column_types_across_files(spark, capsys, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"id": [1], "text": ["the city"]}), d / "a.parquet")
    pq.write_table(pa.table({"id": [2], "text": pa.array([7], pa.int64())}), d / "b.parquet")
    before = snapshot(d)
    code = perturb(d, tmp_path / "o")
    refused(capsys, code, InputDataError, "type")
    assert snapshot(d) == before and not (tmp_path / "o").exists() and leftovers(tmp_path) == []


@pytest.mark.runtime
def test_invalid_utf8_row_is_one_oov_row(spark, tmp_path):
    src = tmp_path / "in.parquet"
    bad = pa.array([b"the city", b"\xff\xfe broken", b"a dog"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": [1, 2, 3], "text": bad}), src)
    out = tmp_path / "o"
    assert perturb(src, out, "--epsilon", "1e6") == 0
    rows = {r["id"]: r["text"] for r in pq.read_table(out).to_pylist()}
    assert rows == {1: "the city", 2: "[UNK]", 3: "a dog"}


def test_name_clash_with_original_column(spark, capsys, tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["the city"], "text_original": ["x"]}), src)
    code = perturb(src, tmp_path / "o", "--keep-original")
    refused(capsys, code, InputDataError, "'text_original'", "rename")
    assert not (tmp_path / "o").exists()


@pytest.mark.runtime
def test_streaming_dataframe_is_refused(spark, tmp_path, dataset):
    stream = spark.readStream.schema(spark.read.parquet(str(dataset)).schema).parquet(str(dataset))
    with pytest.raises(InputDataError, match="stream"):
        dpspark.release(stream, output=str(tmp_path / "o"), columns="text", epsilon=10)
    with pytest.raises(InputDataError, match="foreachBatch"):
        dpspark.perturb_text(stream, columns="text", epsilon=10)
    assert not (tmp_path / "o").exists()


@pytest.mark.runtime
def test_type_changes_are_warned_and_listed(spark, tmp_path):
    src = tmp_path / "in.parquet"
    ts = pa.array([0, 1], pa.timestamp("us", tz="Europe/Paris"))
    pq.write_table(pa.table({"n": pa.array([1, 2**63 + 5], pa.uint64()), "at": ts, "text": ["the city", "a dog"]}), src)
    out = tmp_path / "o"
    with pytest.warns(UserWarning, match="changed the type"):
        assert (
            main(
                [
                    "perturb",
                    "--input",
                    str(src),
                    "--output",
                    str(out),
                    "--columns",
                    "text",
                    "--epsilon",
                    "10",
                    "--vocab-size",
                    "3000",
                ]
            )
            == 0
        )
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    changed = {c["column"]: c for c in m["type_changes"]}
    assert set(changed) == {"n", "at"} and changed["n"]["input_type"] == "uint64"
    assert [int(x) for x in pq.read_table(out).column("n").to_pylist()] == [1, 2**63 + 5]


# --- killed runs, scratch, caches, CLI ----------------------------------------------------------------


def test_stale_temporaries_are_removed_and_hidden(spark, tmp_path, dataset):
    import socket

    dead = tmp_path / f"{io.TMP_PREFIX}o_{socket.gethostname()}_999999999_abc"
    old = tmp_path / f"{io.TMP_PREFIX}o_otherhost_1_def"
    other = tmp_path / f"{io.TMP_PREFIX}another_{socket.gethostname()}_999999999_ghi"
    for d in (dead, old, other):
        d.mkdir()
        (d / "part-0.parquet").write_bytes(b"half")
    os.utime(old, (time.time() - 2 * io.STALE_AFTER_S,) * 2)
    assert perturb(dataset, tmp_path / "o") == 0
    assert not dead.exists() and not old.exists() and other.exists()  # another output's temporary is not ours
    m = json.loads((tmp_path / "o" / "_dpspark_manifest.json").read_text())
    assert m["stale_temporaries_removed"] == 2
    # Readers never see a stage: Spark skips names starting with "_".
    assert spark.read.parquet(str(tmp_path / "o")).count() == 3


def test_scratch_is_removed_after_success_and_failure(spark, capsys, tmp_path, dataset):
    from dpspark.scratch import scratch_dir

    scratch = scratch_dir()
    before = set(scratch.iterdir())
    assert perturb(dataset, tmp_path / "o", "--nn", "annoy", "--recall-queries", "50") == 0
    code = perturb(dataset, tmp_path / "o2", "--embeddings", str(tmp_path / "missing.txt"))
    assert code == 4 and not (tmp_path / "o2").exists()
    # No index or bundle directory is left; only the shipped archive, which Spark needs while the
    # session lives: small, because the default embedding is not in it (executors load the package).
    added = set(scratch.iterdir()) - before
    assert all(p.is_file() and p.suffix == ".zip" for p in added) and len(added) == 1
    assert sum(p.stat().st_size for p in added) < 2_000_000


def test_executor_cache_is_bounded(glove, tmp_path, monkeypatch):
    """A worker's cache holds at most MAX_BUNDLES bundles and MAX_EMBEDDINGS embeddings, however
    many runs it serves (a notebook calling perturb_text in a loop), evicting the least recently
    used. Run as on an executor: bundles found through SparkFiles' worker root directory."""
    from pyspark import SparkFiles

    from dpspark.bundle import save_bundle
    from dpspark.spark import resources

    monkeypatch.setattr(SparkFiles, "_root_directory", str(tmp_path))
    monkeypatch.setattr(SparkFiles, "_is_running_on_worker", True)
    monkeypatch.setattr(resources, "_bundles", type(resources._bundles)())
    monkeypatch.setattr(resources, "_embeddings", type(resources._embeddings)())
    settings = {"epsilon": 10.0, "oov": "unk", "oov_token": "[UNK]", "layout": "single", "nn": "exact"}
    names = [f"bundle-{i}" for i in range(2 * resources.MAX_BUNDLES + 1)]
    for i, name in enumerate(names):
        save_bundle(tmp_path / name, glove, {**settings, "nn_params": {}}, np.arange(200 + i))
        loaded = resources.resources(name)
        assert loaded.index.size == 200 + i and resources.resources(name) is loaded  # the second call: cached
        assert resources.cached() == (min(i + 1, resources.MAX_BUNDLES), 1)
    # Least recently used first out: the newest bundles are held, the first one is not.
    assert list(resources._bundles) == names[-resources.MAX_BUNDLES :]
    assert resources.resources(names[-1]) is resources._bundles[names[-1]]
    # Bundles of one embedding share its words.
    assert len({id(b.words) for b in resources._bundles.values()}) == 1


def test_version_and_quiet(spark, capsys, tmp_path, dataset):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"dpspark {dpspark.__version__}"
    assert perturb(dataset, tmp_path / "o") == 0
    captured = capsys.readouterr()  # --quiet: the one result line, no logs or warnings
    assert captured.out.startswith("dpspark perturb: released ") and captured.out.count("\n") == 1
    assert captured.err == ""


def test_flags_are_derived_from_the_models():
    from dpspark import config
    from dpspark.cli import COMMANDS, build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for command, (model, _, _) in COMMANDS.items():
        dests = {a.dest for a in subparsers[command]._actions} - {"help", "config"}
        fields = {alias or n for n, (alias, _, _) in getattr(config, model).fields().items()}
        assert dests == fields, command
    assert np.isfinite(PerturbConfig.parse({"epsilon": "10"}).epsilon)


@pytest.fixture()
def viewfs(spark, tmp_path):
    """A non-local default file system: viewfs://cluster/ with /data mounted on a local
    directory and everything else falling back to file:///, as on a federated HDFS."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    conf = {
        "fs.defaultFS": "viewfs://cluster/",
        "fs.viewfs.mounttable.cluster.link./data": f"file://{mount}",
        "fs.viewfs.mounttable.cluster.linkFallback": "file:///",
    }
    for k, v in conf.items():
        spark.conf.set(k, v)  # copied into the session's Hadoop conf for every read and write
    try:
        yield mount
    finally:
        for k in conf:
            spark.conf.unset(k)


@pytest.mark.runtime
def test_paths_resolve_through_a_non_local_default_file_system(spark, capsys, viewfs):
    pq.write_table(pa.table({"text": ["the city is quiet", "a dog ran home"]}), viewfs / "raw.parquet")
    (viewfs / "raw").mkdir()
    os.replace(viewfs / "raw.parquet", viewfs / "raw" / "p0.parquet")
    before = snapshot(viewfs / "raw")
    fs = io.FileSystem(spark)
    assert fs.resolve("/data/raw") == f"file:{viewfs}/raw"  # the mount point, followed

    # The same directory under its mounted name and under its physical name (via the fallback).
    for out in ("/data/raw/private", f"{viewfs}/raw/private"):
        code = perturb("/data/raw", out, "--mode", "overwrite")
        refused(capsys, code, ConfigError, "lies inside the input", f"file:{viewfs}/raw/private")
    assert snapshot(viewfs / "raw") == before

    assert perturb("/data/raw", "/data/private") == 0
    released = pq.read_table(viewfs / "private")
    assert released.num_rows == 2 and released.column_names == ["text"]
    assert snapshot(viewfs / "raw") == before
    assert leftovers(viewfs) == []
