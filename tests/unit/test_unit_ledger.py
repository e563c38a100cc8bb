"""The ledger under privacy units (issue 41, step 4): sums per (guarantee type, unit of the bound, privacy unit
and id space). A ``column:`` unit's releases of different partitions add up (one person can be in both)
unless the partition key is the unit's column; document units of different partitions stay disjoint; a
token release and a unit release of the same records are two rows, never one number."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpspark import ledger, mechanisms
from dpspark.mechanisms import Space
from dpspark.prepare import ledger_terms
from dpspark.units import PrivacyUnit

pytestmark = pytest.mark.runtime


@pytest.fixture(scope="module")
def space(glove):
    return Space(glove.vectors, np.arange(2000), words=glove.word_rows, embedding_id=glove.sha256)


def release(space, i, partition, budget, unit="token", name="laplace", **extra):
    spec = mechanisms.parse({"name": name, "epsilon": budget, **extra})
    spec.prepare(space)
    fields = {} if unit == "token" else {"privacy_unit": PrivacyUnit.parse(unit).fields(), "unit_budget": budget}
    return ledger.entry(
        f"r{i}", partition, budget, name, f"2026-11-28T10:{i:02d}", i > 0, **ledger_terms(spec, space), **fields
    )


def rows_of(entries, partition):
    (row,) = [r for r in ledger.epsilon_spent(entries) if r["partition"] == partition]
    return row["by_guarantee_type"]


def test_a_person_released_on_two_dates_spends_both_budgets(space):
    entries = [
        release(space, 0, {"date": "1"}, 5.0, "column:user_id"),
        release(space, 1, {"date": "2"}, 3.0, "column:user_id"),
    ]
    for partition in ("date=1", "date=2"):
        (row,) = rows_of(entries, partition)
        assert row["spent"] == 8.0 and row["releases"] == 2, partition
        assert row["privacy_unit"] == {"kind": "column", "column": "user_id", "id_space": "user_id"}
    assert all(not ledger.disagreement(e) for e in entries)


def test_partitions_by_the_unit_column_are_disjoint_people(space):
    entries = [
        release(space, 0, {"user_id": "a"}, 5.0, "column:user_id"),
        release(space, 1, {"user_id": "b"}, 3.0, "column:user_id"),
        release(space, 2, {"user_id": "a", "date": "2"}, 2.0, "column:user_id"),
    ]
    assert [r["spent"] for r in rows_of(entries, "user_id=a")] == [7.0]
    assert [r["spent"] for r in rows_of(entries, "user_id=b")] == [3.0]


def test_document_units_on_two_dates_do_not_add(space):
    entries = [
        release(space, 0, {"date": "1"}, 5.0, "document"),
        release(space, 1, {"date": "2"}, 3.0, "document"),
    ]
    assert [r["spent"] for r in rows_of(entries, "date=1")] == [5.0]
    assert [r["spent"] for r in rows_of(entries, "date=2")] == [3.0]
    again = [*entries, release(space, 2, {"date": "1"}, 2.0, "document")]  # the same documents again: they add
    assert [r["spent"] for r in rows_of(again, "date=1")] == [7.0]


def test_other_id_spaces_and_the_token_unit_are_rows_of_their_own(space):
    entries = [
        release(space, 0, None, 10.0),  # per token
        release(space, 1, None, 60.0, "document"),
        release(space, 2, None, 40.0, "column:user_id@customers"),
        release(space, 3, None, 20.0, "column:account@customers"),  # the same people: one id space
        release(space, 4, None, 30.0, "column:user_id@staff"),
    ]
    rows = rows_of(entries, "(whole dataset)")
    got = sorted(
        (r.get("privacy_unit", {}).get("kind", "token"), r.get("privacy_unit", {}).get("id_space"), r["spent"])
        for r in rows
    )
    assert got == [
        ("column", "customers", 60.0),
        ("column", "staff", 30.0),
        ("document", None, 60.0),
        ("token", None, 10.0),
    ]
    assert ledger.epsilon_spent(entries)[0]["epsilon_at_most"] is None  # never one number across units


def test_a_units_conversion_is_summed_with_its_own_unit_only(space):
    """Mahalanobis under a document unit converts to the Euclidean unit *of documents*: never added to a token
    release's Euclidean sum."""
    entries = [
        release(space, 0, None, 10.0),  # laplace per token, Euclidean
        release(space, 1, None, 60.0, "document", name="mahalanobis", **{"lambda": 1}),
        release(space, 2, None, 6.0, "document"),  # laplace per document, Euclidean
    ]
    (row,) = ledger.epsilon_spent(entries)
    (conv,) = row["converted"]
    factor = entries[1]["converted"]["factor"]
    assert conv["spent_at_most"] == pytest.approx(6.0 + 60.0 * factor) and conv["releases"] == 2


def test_umldp_under_a_unit_spends_its_budget_and_ln_1_over_p_per_token(space):
    spec = mechanisms.parse({"name": "santext-plus", "epsilon": 6.0, "p": 0.5})
    spec.prepare(space)
    unit = {"privacy_unit": PrivacyUnit.parse("document").fields(), "unit_budget": 6.0}
    e = ledger.entry(
        "r0", None, 6.0, "santext-plus", "2026-11-28T10:00", False, **ledger_terms(spec, space), **unit, unit_tokens=10
    )
    assert e["spent"] == pytest.approx(6.0 + 10 * math.log(2.0))
    assert ledger.disagreement(e) is None
    forged = {**e, "spent": 6.0}
    assert "costs" in ledger.disagreement(forged)
