"""Scheduled ETL: one input partition per run, dynamic partition overwrite, no silent re-release."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark.cli import main
from dpspark.spark import fs as fs_module

pytestmark = pytest.mark.spark


@pytest.fixture()
def partitioned(tmp_path):
    src = tmp_path / "in"
    for day, texts in (("2026-11-20", ["the cat sat", "a dog ran"]), ("2026-11-21", ["hello world", None, ""])):
        d = src / f"date={day}"
        d.mkdir(parents=True)
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}), d / "part-0.parquet")
    return src


def run(src, out, day, *extra):
    return main(
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
            "5000",
            "--partition",
            f"date={day}",
            "--quiet",
            *extra,
        ]
    )


def ledger_entries(out):
    """The ledger's entries, oldest first (file names start with the finishing time)."""
    return [json.loads(p.read_text()) for p in sorted((out / "_dpspark_ledger").glob("*.json"))]


def snapshot(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.runtime
def test_two_partitions_then_refused_rerelease_then_allowed(spark, partitioned, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(partitioned, out, "2026-11-20") == 0
    first = {k: v for k, v in snapshot(out).items() if k.startswith("date=2026-11-20/")}
    assert any(k.endswith(".parquet") for k in first)
    assert run(partitioned, out, "2026-11-21") == 0
    after_second = snapshot(out)
    # The first partition is untouched by the second run.
    assert {k: v for k, v in after_second.items() if k.startswith("date=2026-11-20/")} == first
    rows = pq.read_table(out / "date=2026-11-21").to_pylist()
    assert sorted(r["id"] for r in rows) == [0, 1, 2]
    assert [r["text"] for r in sorted(rows, key=lambda r: r["id"])][1:] == [None, ""]

    # A re-run of the second partition is refused with exit 7 and changes nothing.
    assert run(partitioned, out, "2026-11-21") == 7
    err = capsys.readouterr().err
    assert "overlaps 1 earlier release" in err and "--allow-rerelease" in err
    assert snapshot(out) == after_second

    assert run(partitioned, out, "2026-11-21", "--allow-rerelease") == 0
    m = json.loads((out / "_dpspark_manifest.json").read_text())
    releases = ledger_entries(out)
    second = [r for r in releases if r["partition"] == {"date": "2026-11-21"}]
    assert len(second) == 2 and [r["rerelease"] for r in second] == [False, True] and len(releases) == 3
    spent = {s["partition"]: s["epsilon_at_most"] for s in m["ledger"]["epsilon_spent"]}
    assert spent == {"date=2026-11-20": 10.0, "date=2026-11-21": 20.0}
    assert list(m)[-1] == "status" and m["status"] == "succeeded"
    assert {k: v for k, v in snapshot(out).items() if k.startswith("date=2026-11-20/")} == first


def test_failed_run_marks_nothing_and_can_be_rerun(spark, partitioned, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run(partitioned, out, "2026-11-20") == 0
    real = fs_module.FileSystem.write_text

    def broken(self, path, text, overwrite=True):
        raise OSError("disk full")

    monkeypatch.setattr(fs_module.FileSystem, "write_text", broken)
    with pytest.raises(OSError):
        run(partitioned, out, "2026-11-21")
    monkeypatch.setattr(fs_module.FileSystem, "write_text", real)
    assert [r["partition"] for r in ledger_entries(out)] == [{"date": "2026-11-20"}]
    assert not (out / "date=2026-11-21").exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith("_dpspark")] == []
    assert run(partitioned, out, "2026-11-21") == 0
    assert [r["partition"] for r in ledger_entries(out)] == [{"date": "2026-11-20"}, {"date": "2026-11-21"}]


def test_missing_partition(spark, partitioned, tmp_path, capsys):
    assert run(partitioned, tmp_path / "out", "2030-01-01") == 3
    assert "does not exist" in capsys.readouterr().err
