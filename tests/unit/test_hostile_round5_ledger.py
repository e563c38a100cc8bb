"""Hostile use, round 5 (issue 39): a ledger that knows its metric. Sums are per guarantee type *and*
exact unit (the metric and its parameters, the grouping), never one number across units without a
stated conversion; an entry that contradicts its own fields is damaged (exit 8)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpspark import ledger, mechanisms
from dpspark.errors import LedgerError
from dpspark.mechanisms import Space
from dpspark.prepare import ledger_terms

pytestmark = pytest.mark.runtime

SETTINGS = [
    {"name": "laplace", "epsilon": 10},
    {"name": "mahalanobis", "epsilon": 10, "lambda": 1},
    {"name": "mahalanobis", "epsilon": 4, "lambda": 0.5},
    {"name": "vickrey", "epsilon": 6, "lambda": 1},
    {"name": "custext", "epsilon": 3, "top_k": 20},
    {"name": "custext", "epsilon": 2, "top_k": 5},
    {"name": "mahalanobis", "epsilon": 2, "lambda": 1},
]


@pytest.fixture(scope="module")
def space(glove):
    return Space(glove.vectors, np.arange(2000), words=glove.word_rows, embedding_id=glove.sha256)


def releases(space, settings=SETTINGS):
    out = []
    for i, values in enumerate(settings):
        spec = mechanisms.parse(values)
        spec.prepare(space)
        out.append(
            ledger.entry(
                f"r{i}", None, spec.epsilon, spec.name, f"2026-11-27T10:{i:02d}", i > 0, **ledger_terms(spec, space)
            )
        )
    return out


def factor(glove, lam):
    """ε per unit of ||·||_RM bounds ε / sqrt(λ·ξ_min + 1 − λ) per unit of Euclidean distance (Lemma 2),
    ξ_min from numpy's own covariance of the 2,000 words, scaled to trace d."""
    x = np.asarray(glove.vectors[:2000], dtype=np.float64)
    cov = np.cov(x, rowvar=False)
    cov *= x.shape[1] / np.trace(cov)
    xi_min = np.linalg.eigvalsh(cov)[0]
    return 1.0 / math.sqrt(lam * xi_min + 1.0 - lam)


def test_sums_are_per_type_and_unit_with_the_converted_euclidean_total(space, glove):
    entries = releases(space)
    (row,) = ledger.summary(entries)["epsilon_spent"]
    rows = {(k["guarantee_type"], json.dumps(k["exact_unit"], sort_keys=True)): k for k in row["by_guarantee_type"]}
    by_unit = sorted((k["guarantee_type"], k["spent"], k["releases"]) for k in rows.values())
    # laplace alone in Euclidean; mahalanobis λ = 1 twice and vickrey λ = 1 in one RM unit; λ = 0.5 in
    # another; custext K = 20 and K = 5 in two groupings: five rows, never one sum across them
    assert by_unit == [
        ("group", 2.0, 1),
        ("group", 3.0, 1),
        ("metric", 4.0, 1),
        ("metric", 10.0, 1),
        ("metric", 18.0, 3),
    ]
    assert row["epsilon_at_most"] is None
    units = [k["exact_unit"] for k in row["by_guarantee_type"]]
    assert {"distance": "euclidean", "embedding": glove.sha256[:16]} in units
    assert {u.get("lambda") for u in units if u.get("distance") == "regularized-mahalanobis"} == {1.0, 0.5}
    assert {u["groups"] for u in units if "groups" in u} == {
        "custext/groups/v1/k=20/cosine",
        "custext/groups/v1/k=5/cosine",
    }
    # the one converted total: laplace's 10 as spent, plus every RM release times its own factor
    (conv,) = row["converted"]
    assert conv["exact_unit"] == {"distance": "euclidean", "embedding": glove.sha256[:16]}
    expected = 10.0 + (10 + 6 + 2) * factor(glove, 1.0) + 4 * factor(glove, 0.5)
    assert conv["spent_at_most"] == pytest.approx(expected, rel=1e-6)
    assert conv["releases"] == 5 and "Lemma 2" in conv["how"]
    assert factor(glove, 1.0) > 5  # the RM ε is worth several times more per unit of Euclidean distance


def test_one_unit_sums_and_keeps_the_old_field(space):
    entries = releases(space, [{"name": "mahalanobis", "epsilon": 3, "lambda": 0.5}] * 2)
    (row,) = ledger.epsilon_spent(entries)
    assert row["epsilon_at_most"] == 6.0 and len(row["by_guarantee_type"]) == 1


def test_another_vocabulary_is_another_rm_norm_and_another_grouping(glove):
    small, large = Space(glove.vectors, np.arange(1000)), Space(glove.vectors, np.arange(2000))
    settings = [{"name": "mahalanobis", "epsilon": 3, "lambda": 1}, {"name": "custext", "epsilon": 1, "top_k": 5}]
    entries = releases(small, settings) + releases(large, settings)
    (row,) = ledger.epsilon_spent(entries)
    assert len(row["by_guarantee_type"]) == 4
    # laplace is the embedding's Euclidean distance, whatever the vocabulary: one unit
    entries = releases(small, [{"name": "laplace", "epsilon": 3}]) + releases(
        large, [{"name": "laplace", "epsilon": 2}]
    )
    (row,) = ledger.epsilon_spent(entries)
    assert row["epsilon_at_most"] == 5.0


def test_a_protected_set_of_a_word_file_is_the_release_own_unit(space, tmp_path):
    words = tmp_path / "names.txt"
    words.write_text("paris\nlondon\n")
    settings = [{"name": "santext-plus", "epsilon": 2, "p": 0.3, "sensitive_words": str(words)}] * 2
    entries = releases(space, settings)
    assert [e["unit"]["protected"] for e in entries] == ["release r0", "release r1"]
    assert "paris" not in json.dumps(entries)  # the set itself is never written, nor a digest of it
    (row,) = ledger.epsilon_spent(entries)
    assert len(row["by_guarantee_type"]) == 2


def _written(e):
    return json.dumps(e)


@pytest.mark.parametrize(
    "edit, says",
    [
        ({"guarantee_type": "bogus", "spent": 0}, "unknown guarantee_type 'bogus'"),
        ({"guarantee_type": "group"}, "but laplace releases are 'metric'"),
        ({"spent": 0}, "says spent 0, but epsilon 10 costs 10.0"),
        ({"spent": None}, "says spent None"),
        ({"epsilon": -1.0, "spent": -1.0}, "not a positive number"),
        ({"epsilon": True}, "malformed partition or epsilon"),
    ],
)
def test_an_entry_that_disagrees_with_its_own_fields_is_damaged(space, edit, says):
    (e,) = releases(space, SETTINGS[:1])
    ledger.parse_entry("x.json", _written(e))  # as written: read
    with pytest.raises(LedgerError, match=f"ledger entry x.json .*{says}.*restore it from a backup") as err:
        ledger.parse_entry("x.json", _written({**e, **edit}))
    assert err.value.exit_code == 8


def test_a_unit_or_conversion_that_disagrees_is_damaged(space):
    e = releases(space, SETTINGS[1:2])[0]
    assert e["converted"]["factor"] > 1
    ledger.parse_entry("x.json", _written(e))
    lowered = {**e, "converted": {**e["converted"], "factor": 0.5, "spent": e["spent"] * 0.5}}
    with pytest.raises(LedgerError, match="converted figure"):
        ledger.parse_entry("x.json", _written(lowered))
    other = {**e, "unit": {**e["unit"], "lambda": 0.5}}
    with pytest.raises(LedgerError, match="names lambda = 0.5 in its unit, but 1.0 in its parameters"):
        ledger.parse_entry("x.json", _written(other))
    umldp = ledger.entry("r", None, 2.0, "santext-plus", "t", False, "umldp", p=0.2)
    with pytest.raises(LedgerError, match="says spent"):
        ledger.parse_entry("x.json", _written({**umldp, "p": 0.5}))


def test_the_ledger_is_unbounded_once_any_release_is():
    def e(run, mech, kind):
        return ledger.entry(run, None, 100.0, mech, run, False, kind, unit={"bound": kind})

    after = ledger.summary([e("a", "truncated-gumbel", "none"), e("b", "laplace", "metric")])
    assert after["unbounded"] is True and after["this_release_unbounded"] is False
    last = ledger.summary([e("b", "laplace", "metric"), e("a", "truncated-gumbel", "none")])
    assert last["unbounded"] is True and last["this_release_unbounded"] is True
    assert ledger.summary([e("b", "laplace", "metric")])["unbounded"] is False
