"""Hostile and careless use, round 4 (issue 30): the defects that are refused or fixed before any
Spark session starts. Each refusal: its exit code, its one sentence, and nothing changed or left behind."""

from __future__ import annotations

import math

import pytest

from dpspark import ledger


def _entry(run_id, mechanism, kind, epsilon, **terms):
    return ledger.entry(run_id, None, epsilon, mechanism, f"2026-11-26T10:0{run_id[-1]}:00", True, kind, **terms)


def test_ledger_sums_per_guarantee_type_never_across():
    entries = [
        _entry("r1", "custext", "group", 3.0),
        _entry("r2", "tem", "metric", 5.0),
        _entry("r3", "santext-plus", "umldp", 2.0, p=0.2),
        _entry("r4", "laplace", "metric", 10.0),
        _entry("r5", "syntf", "document", 0.5, draws=40),
        _entry("r6", "truncated-gumbel", "none", 100.0),
    ]
    assert [e["guarantee_type"] for e in entries] == ["group", "metric", "umldp", "metric", "document", "none"]
    assert entries[2]["spent"] == pytest.approx(2.0 + math.log(5.0)) and entries[2]["p"] == 0.2
    assert entries[4]["spent"] == 20.0 and entries[4]["draws"] == 40
    assert entries[5]["spent"] is None
    (row,) = ledger.summary(entries)["epsilon_spent"]
    sums = {k["guarantee_type"]: (k["spent"], k["unbounded"], k["releases"]) for k in row["by_guarantee_type"]}
    assert sums == {
        "group": (3.0, False, 1),
        "metric": (15.0, False, 2),
        "umldp": (pytest.approx(2.0 + math.log(5.0)), False, 1),
        "document": (20.0, False, 1),
        "none": (None, True, 1),
    }
    # The old field is never a sum across types: null where the types are mixed.
    assert row["epsilon_at_most"] is None and row["releases"] == 6
    assert ledger.summary(entries)["unbounded"] is True
    assert ledger.summary(entries[:4])["unbounded"] is False


def test_ledger_old_entries_keep_their_sum_and_type():
    # Entries written before guarantee types were recorded: their mechanism's type, ε as spent.
    old = [
        {
            "run_id": f"r{i}",
            "partition": None,
            "epsilon": 10.0,
            "mechanism": "mahalanobis",
            "finished_at": str(i),
            "rerelease": bool(i),
        }
        for i in range(2)
    ]
    (row,) = ledger.epsilon_spent(old)
    assert row["epsilon_at_most"] == 20.0
    assert row["by_guarantee_type"] == [
        {"guarantee_type": "metric", "unit": ledger.UNITS["metric"], "spent": 20.0, "unbounded": False, "releases": 2}
    ]
