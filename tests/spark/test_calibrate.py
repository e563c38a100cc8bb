"""calibrate reads and writes through the session's file system (``reports.ReportOutput``):
beside the statistics it read, under their lock and only while they are the ones read; into a
new output with its manifest; on a default file system that is not the driver's disk. Malformed
report files and impossible bounds are refused with one sentence, nothing written.

Small hand-made outputs stand in for privacy-stats, evaluate-utility and privacy-risk runs (the
end-to-end runs are in test_stats_job.py and test_utility.py)."""

from __future__ import annotations

import errno
import json
import math
import os
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpspark
from dpspark import report, scratch
from dpspark.cli import NO_EPSILON_MEETS_BOUNDS, main
from dpspark.errors import ConfigError, InputDataError, OutputError
from dpspark.run import calibrate as calibrate_module
from dpspark.spark.fs import FileSystem
from dpspark.utility import BASELINE

pytestmark = pytest.mark.spark

MANIFEST = "_dpspark_manifest.json"
CALIBRATION = ("calibration.md", "calibration.json")


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, error: type, *fragments: str) -> None:
    assert code == error.exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpspark calibrate: error: "), err  # one line, no traceback
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in stderr: {err}"


def write_manifest(directory: Path, command: str) -> None:
    (directory / MANIFEST).write_text(
        json.dumps({"command": command, "run_id": uuid.uuid4().hex, "status": "succeeded"}), encoding="utf-8"
    )


def write_stats(directory: Path, rows: int = 6, runs: int = 10, seed: int = 0) -> None:
    """A privacy-stats output: per_word.parquet (the noise family's columns) and its manifest."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pq.write_table(
        pa.table(
            {
                "epsilon": [1.0, 5.0, 10.0] * (rows // 3) + [1.0] * (rows % 3),
                "lambda": [1.0] * rows,
                "word": list(range(rows)),
                "nw": rng.integers(0, 3, rows),
                "sw": rng.integers(max(runs - 2, 1), runs + 1, rows),
                "runs": [runs] * rows,
            }
        ),
        directory / "per_word.parquet",
    )
    write_manifest(directory, "privacy-stats")


def write_risk(directory: Path, top1: list[float], epsilons: list[float] | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    epsilons = epsilons or [float(e) for e in range(1, len(top1) + 1)]
    pq.write_table(
        pa.table({"epsilon": epsilons, "lambda": [1.0] * len(top1), "top1": top1}), directory / "risk.parquet"
    )
    write_manifest(directory, "privacy-risk")


def write_utility(directory: Path, accuracy: list[float]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"mode": BASELINE, "epsilon": None, "lambda": None, "accuracy_mean": 0.9}]
    rows += [
        {"mode": "train-time", "epsilon": float(e), "lambda": 1.0, "accuracy_mean": a}
        for e, a in enumerate(accuracy, 1)
    ]
    pq.write_table(pa.Table.from_pylist(rows), directory / "summary.parquet")
    write_manifest(directory, "evaluate-utility")


# --- beside the statistics ---------------------------------------------------------------------------


@pytest.mark.runtime
def test_the_library_function_is_the_command(spark, tmp_path, capsys):
    """dpspark.calibrate returns what calibration.json holds; the command prints its table."""
    stats = tmp_path / "s"
    write_stats(stats)
    result = dpspark.calibrate(stats=str(stats), max_nw_fraction=0.3, percentile=50)
    assert json.loads((stats / "calibration.json").read_text()) == json.loads(json.dumps(result))
    assert result["bounds"] == "50th percentile: Nw <= 0.3·K" and [r["setting"] for r in result["per_setting"]] == [
        "mahalanobis λ=1"
    ]
    assert (stats / "calibration.md").read_text(encoding="utf-8") == report.calibration_md(result, result["bounds"])
    code = main(["calibrate", "--stats", str(stats), "--max-nw-fraction", "0.3", "--percentile", "50", "--quiet"])
    assert code == (0 if result["best"] else NO_EPSILON_MEETS_BOUNDS)
    assert capsys.readouterr().out.strip() == (stats / "calibration.md").read_text(encoding="utf-8").strip()


def test_calibration_beside_statistics_is_one_calibrations(spark, tmp_path):
    """The statistics stay as they were (manifest included); an earlier calibration's files that this one
    does not write (a joint calibration's frontier) go, so the directory never holds a mix."""
    stats = tmp_path / "s"
    write_stats(stats)
    (stats / "frontier.csv").write_text("stale\n")
    (stats / "calibration.md").write_text("stale\n")
    before = {k: v for k, v in snapshot(stats).items() if k in ("per_word.parquet", MANIFEST)}
    dpspark.calibrate(stats=str(stats))
    after = snapshot(stats)
    assert {k: after[k] for k in before} == before
    assert "frontier.csv" not in after and after["calibration.md"] != b"stale\n"
    assert {n for n in after if not n.startswith(".")} == {"per_word.parquet", MANIFEST, *CALIBRATION}
    assert not [n for n in os.listdir(tmp_path) if n.startswith("_dpspark_")]  # the lock is gone


def test_statistics_without_a_manifest_are_refused(spark, tmp_path, capsys):
    stats = tmp_path / "s"
    write_stats(stats)
    (stats / MANIFEST).unlink()
    before = snapshot(tmp_path)
    code, err = run(capsys, "calibrate", "--stats", str(stats), "--quiet")
    assert_refused(code, err, InputDataError, f"{stats} is not a dpspark output", "--stats must be a privacy-stats")
    assert snapshot(tmp_path) == before
    assert not list(scratch.scratch_dir().glob("report-*"))  # no scratch directory left either


def test_statistics_replaced_meanwhile_are_refused(spark, tmp_path, capsys, monkeypatch):
    """A privacy-stats --mode overwrite that lands while calibrate runs: the calibration would describe
    statistics that are gone, so nothing is written."""
    stats = tmp_path / "s"
    write_stats(stats)
    table = calibrate_module.calibrate_table

    def replaced(*args, **kwargs):
        write_manifest(stats, "privacy-stats")  # another run's commit
        return table(*args, **kwargs)

    monkeypatch.setattr(calibrate_module, "calibrate_table", replaced)
    code, err = run(capsys, "calibrate", "--stats", str(stats), "--quiet")
    assert_refused(code, err, OutputError, "was replaced by another run while this one ran", "nothing was written")
    assert not any((stats / f).exists() for f in CALIBRATION)


def test_a_failed_write_leaves_no_calibration(spark, tmp_path, capsys, monkeypatch):
    """A full disk as calibration.json is written: exit 5 with the disk's sentence, and no calibration
    file left beside the statistics (not the new calibration.md, nor an earlier calibration's json)."""
    stats = tmp_path / "s"
    write_stats(stats)
    dpspark.calibrate(stats=str(stats))
    write = FileSystem.write_bytes

    def full(self, path, data, overwrite=True):
        if path.endswith("/calibration.json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return write(self, path, data, overwrite)

    monkeypatch.setattr(FileSystem, "write_bytes", full)
    code, err = run(capsys, "calibrate", "--stats", str(stats), "--min-sw", "5", "--quiet")
    assert_refused(code, err, OutputError, "the disk", "is full: free space or choose another --output")
    assert not any((stats / f).exists() for f in CALIBRATION)
    assert (stats / "per_word.parquet").is_file() and (stats / MANIFEST).is_file()


# --- --min-sw against the statistics' K ------------------------------------------------------------


def test_an_impossible_min_sw_is_refused_with_a_sentence(spark, capsys, tmp_path):
    stats = tmp_path / "stats"
    write_stats(stats, runs=20)
    before = snapshot(stats)
    code = main(["calibrate", "--stats", str(stats), "--min-sw", "25", "--quiet"])
    captured = capsys.readouterr()
    assert_refused(code, captured.err, ConfigError, "min_sw 25 can never be met", "K = 20", "--min-sw 20 or less")
    assert "--runs 25" in captured.err and "read from" in captured.err
    assert snapshot(stats) == before and captured.out == ""


def test_a_min_sw_of_k_is_a_bound_and_the_table_prints_under_quiet(spark, capsys, tmp_path):
    """Sw = K is possible (every run a different word): no refusal. The calibration table is the
    result: it goes to stdout under --quiet too, with nothing on stderr."""
    stats = tmp_path / "stats"
    write_stats(stats, runs=20)
    code = main(["calibrate", "--stats", str(stats), "--min-sw", "20", "--max-nw-fraction", "1", "--quiet"])
    captured = capsys.readouterr()
    assert code in (0, NO_EPSILON_MEETS_BOUNDS)
    md = (stats / "calibration.md").read_text(encoding="utf-8")
    assert md.strip() and md.strip() in captured.out and "Sw >= 20" in captured.out
    assert captured.err == (
        "" if code == 0 else "dpspark calibrate: no ε in range meets these bounds for any setting\n"
    )


# --- a new output -----------------------------------------------------------------------------------


def test_a_risk_table_named_by_its_setting_column_alone_is_read(spark, tmp_path):
    # Settings without a λ (tem β=…) need no λ column: the setting column names the rows.
    risk, out = tmp_path / "r", tmp_path / "cal"
    risk.mkdir()
    pq.write_table(
        pa.table({"epsilon": [1.0, 2.0], "setting": ["tem β=0.001"] * 2, "mechanism": ["tem"] * 2, "top1": [0.5, 0.1]}),
        risk / "risk.parquet",
    )
    write_manifest(risk, "privacy-risk")
    assert (
        main(["calibrate", "--risk", str(risk), "--max-reidentification", "0.2", "--output", str(out), "--quiet"]) == 0
    )
    best = json.loads((out / "calibration.json").read_text())["best"]
    assert (best["epsilon"], best["setting"], best["mechanism"], best["lambda"]) == (2.0, "tem β=0.001", "tem", None)


def test_a_joint_calibration_is_a_new_output_with_its_manifest(spark, tmp_path, capsys):
    risk, out = tmp_path / "r", tmp_path / "cal"
    write_risk(risk, [0.5, 0.1, 0.6])
    args = ["calibrate", "--risk", str(risk), "--max-reidentification", "0.2", "--output", str(out), "--quiet"]
    assert main(args) == 0
    names = {"calibration.md", "calibration.json", "frontier.csv", "frontier.png", MANIFEST}
    assert {n for n in os.listdir(out) if not n.startswith(".")} == names
    m = json.loads((out / MANIFEST).read_text())
    assert m["command"] == "calibrate" and m["status"] == "succeeded" and m["risk"] == str(risk)
    assert m["best"] == {
        "epsilon": 2.0,
        "lambda": 1.0,
        "setting": "mahalanobis λ=1",
        "mechanism": "mahalanobis",
    } and set(m["files"]) == names - {MANIFEST}
    # An existing output: refused under --mode error, replaced (as a whole) under overwrite.
    code, err = run(capsys, *args)
    assert_refused(code, err, OutputError, "already exists")
    assert main([*args, "--mode", "overwrite"]) == 0
    assert json.loads((out / MANIFEST).read_text())["run_id"] != m["run_id"]
    # Never into, over or around an output it reads.
    code, err = run(capsys, *args[:-2], str(risk / "cal"), "--quiet")
    assert_refused(code, err, ConfigError, "lies inside")
    assert not (risk / "cal").exists()


def test_a_joint_calibration_judges_every_setting(spark, tmp_path):
    """Statistics, risk and utility over several mechanisms: every (setting, ε) that all three
    measured is judged on its own (a vickrey setting of the same λ never stands in for mahalanobis),
    and across mechanisms the lowest measured re-identification meeting the bounds is chosen."""
    stats, risk, utility, out = tmp_path / "s", tmp_path / "r", tmp_path / "u", tmp_path / "cal"
    stats.mkdir()
    risk.mkdir()
    utility.mkdir()
    axes = {a: None for a in report.axis_names()}
    settings = (
        ("mahalanobis", "mahalanobis λ=1", {"lambda": 1.0}, 1, 0.3),
        ("vickrey", "vickrey λ=1 t=0.5", {"lambda": 1.0, "t": 0.5}, 10, 0.2),
        ("tem", "tem β=0.001", {"beta": 0.001}, 1, 0.1),
    )
    rows = [
        {"mechanism": m, "epsilon": e, **axes, **own, "nw": nw, "sw": 5, "runs": 10}
        for m, _, own, nw, _ in settings
        for e in (1.0, 2.0)
    ]
    pq.write_table(pa.Table.from_pylist(rows), stats / "per_word.parquet")
    write_manifest(stats, "privacy-stats")
    risk_rows = [
        {"mechanism": m, "setting": label, "epsilon": e, **axes, **own, "top1": top1}
        for m, label, own, _, top1 in settings
        for e in (1.0, 2.0)
    ]
    pq.write_table(pa.Table.from_pylist(risk_rows), risk / "risk.parquet")
    write_manifest(risk, "privacy-risk")
    summary = [{"mode": BASELINE, "mechanism": None, "setting": None, "epsilon": None, **axes, "accuracy_mean": 0.9}]
    summary += [{**r, "mode": "train-time", "accuracy_mean": 0.89} for r in risk_rows]
    for r in summary:
        r.pop("top1", None)
    pq.write_table(pa.Table.from_pylist(summary), utility / "summary.parquet")
    write_manifest(utility, "evaluate-utility")
    result = dpspark.calibrate(
        stats=str(stats),
        max_nw_fraction=0.5,
        risk=str(risk),
        max_reidentification=0.5,
        utility=str(utility),
        max_utility_loss=0.05,
        output=str(out),
    )
    judged = {(r["setting"], r["epsilon"]): r["met"] for r in result["rows"]}
    assert judged == {
        (label, e): nw <= 5 for _, label, _, nw, _ in settings for e in (1.0, 2.0)
    }  # vickrey fails its own Nw bound
    assert result["best"] == {"epsilon": 1.0, "lambda": None, "setting": "tem β=0.001", "mechanism": "tem"}
    md = (out / "calibration.md").read_text(encoding="utf-8")
    assert "| tem β=0.001 | 1 |" in md and "not one scale" not in md  # one guarantee type here


# --- the file system of the session ----------------------------------------------------------------


@pytest.fixture
def mounted(spark, tmp_path):
    """A default file system that is not the driver's disk: viewfs, whose /data is ``tmp_path/real``.
    A plain path /data/... is there only for the session's file system (no /data on the driver)."""
    real = tmp_path / "real"
    real.mkdir()
    cluster = f"dpspark{uuid.uuid4().hex[:8]}"
    settings = {"fs.defaultFS": f"viewfs://{cluster}/", f"fs.viewfs.mounttable.{cluster}.link./data": real.as_uri()}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield real
    finally:
        for k in settings:
            spark.conf.unset(k)


@pytest.mark.runtime
def test_calibrate_on_a_default_file_system_that_is_not_the_drivers_disk(mounted, capsys):
    assert not Path("/data/s").exists()
    write_stats(mounted / "s")
    assert main(["calibrate", "--stats", "/data/s", "--max-nw-fraction", "0.5", "--quiet"]) in (0, 6)
    assert {n for n in os.listdir(mounted / "s") if not n.startswith(".")} >= set(CALIBRATION)
    write_risk(mounted / "r", [0.5, 0.1, 0.6])
    args = ["--risk", "/data/r", "--max-reidentification", "0.2", "--output", "/data/cal", "--quiet"]
    assert main(["calibrate", *args]) == 0
    assert json.loads((mounted / "cal" / "calibration.json").read_text())["best"] == {
        "epsilon": 2.0,
        "lambda": 1.0,
        "setting": "mahalanobis λ=1",
        "mechanism": "mahalanobis",
    }
    assert (mounted / "cal" / MANIFEST).is_file() and (mounted / "cal" / "frontier.png").is_file()
    capsys.readouterr()


@pytest.mark.runtime
def test_calibrate_takes_file_uris(spark, tmp_path):
    stats = tmp_path / "s"
    write_stats(stats)
    result = dpspark.calibrate(stats=stats.as_uri(), max_nw_fraction=0.5)
    assert json.loads((stats / "calibration.json").read_text())["best"] == json.loads(json.dumps(result["best"]))


# --- malformed report files: exit 3, nothing written -----------------------------------------------

SOURCES = {
    # flag: (file, its writer, the bound the flag needs)
    "--stats": ("per_word.parquet", lambda d: write_stats(d, rows=4), ()),
    "--risk": ("risk.parquet", lambda d: write_risk(d, [0.1, 0.3]), ("--max-reidentification", "0.2")),
    "--utility": ("summary.parquet", lambda d: write_utility(d, [0.88, 0.7]), ("--max-utility-loss", "0.05")),
}


def spoil(path: Path, how: str) -> str:
    """Damage a report table; return what the message must name."""
    table = pq.read_table(path)
    if how == "not parquet":
        path.write_text("epsilon,lambda\n1,1\n")
        return "cannot be read as Parquet"
    if how == "missing column":  # no column names the rows' settings
        pq.write_table(table.drop([c for c in ("setting", "mechanism", "lambda") if c in table.column_names]), path)
        return "or lambda"
    if how == "no rows":
        pq.write_table(table.slice(0, 0), path)
        return "has no rows"
    assert how == "nan epsilon"
    eps = table.column("epsilon").to_pylist()
    eps[-1] = math.nan
    pq.write_table(table.set_column(table.column_names.index("epsilon"), "epsilon", pa.array(eps)), path)
    return "1 row(s) without a finite epsilon"


@pytest.mark.parametrize("how", ["not parquet", "missing column", "no rows", "nan epsilon"])
@pytest.mark.parametrize("flag", list(SOURCES))
def test_calibrate_refuses_malformed_report_files(spark, capsys, tmp_path, flag, how):
    name, write, bound = SOURCES[flag]
    source = tmp_path / "source"
    write(source)
    fragment = spoil(source / name, how)
    before = snapshot(tmp_path)
    out = tmp_path / "calibration"
    argv = ["calibrate", flag, str(source), *bound, "--quiet"] + (["--output", str(out)] if bound else [])
    code, err = run(capsys, *argv)
    assert_refused(code, err, InputDataError, str(source / name), fragment, flag)
    assert not out.exists()
    assert snapshot(tmp_path) == before  # nothing written into the source either (calibration.md)


def test_calibrate_refuses_a_utility_summary_without_its_baseline(spark, capsys, tmp_path):
    source = tmp_path / "u"
    write_utility(source, [0.88])
    table = pq.read_table(source / "summary.parquet")
    pq.write_table(table.slice(1), source / "summary.parquet")
    before = snapshot(tmp_path)
    code, err = run(
        capsys, "calibrate", "--utility", str(source), "--max-utility-loss", "0.05", "--output", str(tmp_path / "o")
    )
    assert_refused(code, err, InputDataError, "needs exactly one baseline row")
    assert snapshot(tmp_path) == before


def test_calibrate_with_a_nan_figure_recommends_nothing(spark, capsys, tmp_path):
    risk = tmp_path / "r"
    write_risk(risk, [0.5, math.nan, 0.6])  # only the NaN row would be under the bound
    before = snapshot(risk)
    out = tmp_path / "cal"
    code, err = run(capsys, "calibrate", "--risk", str(risk), "--max-reidentification", "0.2", "--output", str(out))
    assert code == NO_EPSILON_MEETS_BOUNDS, err
    result = json.loads((out / "calibration.json").read_text())
    assert result["best"] is None and not any(r["met"] for r in result["rows"])
    assert snapshot(risk) == before
    # The same table with the NaN row measured: that row is recommended.
    write_risk(risk, [0.5, 0.1, 0.6])
    assert (
        main(["calibrate", "--risk", str(risk), "--max-reidentification", "0.2", "--output", str(tmp_path / "c2")]) == 0
    )
    assert json.loads((tmp_path / "c2" / "calibration.json").read_text())["best"] == {
        "epsilon": 2.0,
        "lambda": 1.0,
        "setting": "mahalanobis λ=1",
        "mechanism": "mahalanobis",
    }
