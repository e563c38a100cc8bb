"""Each setting states the unit of its ε (``MechanismSpec.unit``): Mahalanobis' is its own metric's."""

from __future__ import annotations

import numpy as np
import pytest

from dpspark.mechanisms import REGISTRY, noise, parse
from dpspark.mechanisms.base import GUARANTEE_TYPES, UNITS, Space


@pytest.fixture(scope="module")
def space(glove):
    return Space(glove.vectors, np.arange(2000))


def test_every_guarantee_type_has_a_unit():
    assert UNITS.keys() == GUARANTEE_TYPES.keys()
    assert {spec.guarantee_type for spec in REGISTRY.values()} <= UNITS.keys()


@pytest.mark.parametrize("name", ["mahalanobis", "vickrey"])
def test_the_regularized_mahalanobis_norm_states_its_euclidean_factor(space, name):
    spec = parse({"name": name, "epsilon": 6.0, "lambda": 1.0})
    factor = noise.geometry_of(space, 1.0).euclidean_epsilon(1.0)
    assert factor > 2  # the norm stretches the directions in which the vocabulary varies least
    unit = spec.unit(space)
    assert "||·||_RM (λ = 1)" in unit and f"up to {factor:.3g}·ε" in unit
    assert spec.facts(space)["unit"] == unit


def test_laplace_and_lambda_zero_are_euclidean(space):
    for values in ({"name": "laplace"}, {"name": "mahalanobis", "lambda": 0.0}, {"name": "tem"}):
        assert parse({**values, "epsilon": 3.0}).unit(space) == UNITS["metric"], values
    assert parse({"name": "custext", "epsilon": 3.0}).unit(space) == UNITS["group"]
