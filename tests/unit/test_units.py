"""dpspark.units: the privacy unit and the allocation of its budget over its tokens (pure numpy, no JVM)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpspark import units
from dpspark.errors import ConfigError
from dpspark.units import Allocation, PrivacyUnit

pytestmark = pytest.mark.runtime


@pytest.mark.parametrize(
    "text,kind,column,space",
    [
        ("token", "token", None, None),
        (None, "token", None, None),
        ("document", "document", None, None),
        ("column:user_id", "column", "user_id", "user_id"),
        ("column:user_id@customers", "column", "user_id", "customers"),
    ],
)
def test_units_parse_and_read_back(text, kind, column, space):
    unit = PrivacyUnit.parse(text)
    assert (unit.kind, unit.column, unit.id_space) == (kind, column, space)
    assert PrivacyUnit.parse(unit.label()) == unit
    assert unit.fields() == {"kind": kind, "column": column, "id_space": space}


@pytest.mark.parametrize(
    "text,says",
    [
        ("person", "unknown privacy unit 'person'"),
        ("column:", "names no column"),
        ("column:user@", "no id space"),
        ("document:x", "unknown privacy unit"),
    ],
)
def test_a_bad_unit_is_refused_with_the_forms_it_takes(text, says):
    with pytest.raises(ConfigError, match=says) as e:
        PrivacyUnit.parse(text)
    assert "column:NAME" in str(e.value)


@pytest.mark.parametrize("text", ["cap:0", "cap:-3", "cap:x", "cap:2.5", "cap:", "split"])
def test_a_bad_allocation_is_refused(text):
    with pytest.raises(ConfigError, match="cap:50|cap:K"):
        Allocation.parse(text)


@pytest.mark.parametrize("budget", [0, -1, math.nan, math.inf, "x", True])
def test_a_unit_budget_must_be_positive_and_finite(budget):
    with pytest.raises(ConfigError, match="unit budget must be a positive finite number"):
        units.allocate(np.array([3]), budget, Allocation())


def test_scale_gives_each_token_its_units_share():
    lengths = np.array([4, 0, 1, 10])
    a = units.allocate(lengths, 20.0, Allocation())
    np.testing.assert_array_equal(a.epsilons, [5.0] * 4 + [20.0] + [2.0] * 10)
    assert a.drawn.all()
    starts = np.cumsum(lengths) - lengths
    sums = [a.epsilons[s : s + n].sum() for s, n in zip(starts, lengths) if n]
    np.testing.assert_allclose(sums, 20.0)  # each unit spends exactly E


def test_cap_draws_k_tokens_per_unit_at_e_over_k():
    a = units.allocate(np.array([3, 12]), 10.0, Allocation.parse("cap:5"))
    assert a.drawn.tolist() == [True] * 3 + [True] * 5 + [False] * 7
    np.testing.assert_array_equal(a.epsilons[a.drawn], 2.0)
    assert np.isnan(a.epsilons[~a.drawn]).all()
    # the manifest's unit_counts of those two units (as Spark observes them: 2 with a token, lower median 3)
    c = units.shape_counts(
        2, {"units": 2, "min": 3, "median": 3, "max": 12, "over_cap": 7}, 10.0, Allocation.parse("cap:5")
    )
    assert c == {
        "units": 2,
        "units_with_tokens": 2,
        "tokens_per_unit": {"min": 3, "median": 3, "max": 12},
        "tokens_over_cap": 7,
        "token_epsilon": {"min": 2.0, "median_unit": 2.0, "max": 2.0},
    }
    scale = units.shape_counts(3, {"units": 2, "min": 4, "median": 4, "max": 20}, 10.0, Allocation())
    assert scale["token_epsilon"] == {"min": 0.5, "median_unit": 2.5, "max": 2.5} and scale["tokens_over_cap"] == 0
    assert units.shape_counts(1, {"units": 0}, 10.0, Allocation())["token_epsilon"] is None  # a row without tokens


def test_over_cap_refuse_names_how_many_units_exceed_the_cap():
    refuse = Allocation.parse("cap:5", over_cap="refuse")
    with pytest.raises(ConfigError, match=r"2 unit\(s\) hold more than the cap of 5 tokens \(the longest 9\)"):
        units.allocate(np.array([3, 6, 9, 5]), 10.0, refuse)
    assert units.allocate(np.array([3, 5]), 10.0, refuse).drawn.all()
    with pytest.raises(ConfigError, match="over-cap 'drop'"):
        Allocation.parse("cap:5", over_cap="drop")


def test_a_per_token_epsilon_below_the_smallest_is_refused_naming_the_unit():
    with pytest.raises(ConfigError, match="a unit of 2,000,000 tokens .* raise --unit-budget, or cap"):
        units.allocate(np.array([3, 2_000_000]), 1.0, Allocation())


def test_the_allocation_reads_only_the_shape():
    """Two batches of the same shape get the same ε token for token, whatever their words: ``allocate`` sees
    lengths only (its signature), and equal lengths give equal arrays."""
    lengths = np.array([7, 2, 30])
    a, b = units.allocate(lengths, 9.0, Allocation()), units.allocate(lengths.copy(), 9.0, Allocation())
    np.testing.assert_array_equal(a.epsilons, b.epsilons)


def test_document_units_over_two_columns_follow_row_then_column_order():
    first, second = units.allocate_rows([np.array([3, 0, 12]), np.array([2, 5, 1])], 10.0, Allocation.parse("cap:10"))
    # row 2 holds 13 tokens: its first column's 10 first are drawn, its 11th and 12th and the second column's one not
    assert first.drawn.tolist() == [True] * 3 + [True] * 10 + [False] * 2
    assert second.drawn.tolist() == [True] * 2 + [True] * 5 + [False]
    scale = units.allocate_rows([np.array([3, 0]), np.array([1, 4])], 8.0, Allocation())
    np.testing.assert_array_equal(scale[0].epsilons, [2.0] * 3)
    np.testing.assert_array_equal(scale[1].epsilons, [2.0] + [2.0] * 4)


def test_unit_bounds_per_guarantee_type():
    assert units.unit_bound("metric", 60.0, 3.5)["bound"] == pytest.approx(210.0)
    assert units.unit_bound("pure", 6.0, None)["bound"] == 6.0
    assert units.unit_bound("group", 6.0, None)["bound"] == 6.0
    umldp = units.unit_bound("umldp", 6.0, 2.0, p=0.5, tokens=10)
    assert umldp["bound"] == pytest.approx(12.0 + 10 * math.log(2.0))
    with pytest.raises(ConfigError, match="use the token unit"):
        units.unit_bound("none", 6.0, None)


def test_diameter_is_the_farthest_pair():
    from scipy.spatial.distance import pdist

    from dpspark.mechanisms.geometry import diameter

    x = np.random.default_rng(0).standard_normal((700, 5)) * [1, 2, 3, 4, 5]
    assert diameter(x, block=64) == pytest.approx(pdist(x).max(), rel=1e-12)
    assert diameter(x[:1]) == 0.0


def test_each_guarantee_types_unit_diameter_in_its_own_metric(glove):
    """D per guarantee type over a 300-word W: Euclidean (metric, umldp), ‖·‖_RM for Mahalanobis at λ = 1 (every
    pair, brute force, by a linear solve), V − 1 list positions (rank), none for the types without a metric."""
    from scipy.spatial.distance import pdist

    from dpspark.embeddings import select_vocabulary
    from dpspark.mechanisms import Space, parse
    from dpspark.mechanisms.noise import geometry_of

    space = Space(glove.vectors, select_vocabulary(glove, 300), words=glove.word_rows)
    euclidean = pdist(space.vocab64).max()
    g = geometry_of(space, 1.0)
    i, j = np.triu_indices(space.size, 1)
    diff = space.vocab64[i] - space.vocab64[j]  # sqrt(dᵀ(λΣ+(1−λ)I)⁻¹d) by a solve, not through Q
    rm = np.sqrt(np.einsum("ij,ji->i", diff, np.linalg.solve(g.regularized(), diff.T))).max()
    expected = {"laplace": euclidean, "tem": euclidean, "santext-plus": euclidean, "1-diffractor": 299.0}
    expected |= {"mahalanobis": rm, "custext": None, "syntf": None, "syntf-words": None, "truncated-gumbel": None}
    for name, d in expected.items():
        params = {"name": name, "epsilon": 1.0, **({"lambda": 1.0} if name == "mahalanobis" else {})}
        got = parse(params).unit_diameter(space)
        assert got == (None if d is None else pytest.approx(d, rel=1e-9)), name
    assert abs(rm - euclidean) > 0.1  # another metric, another D
