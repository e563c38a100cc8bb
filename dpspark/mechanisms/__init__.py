"""The word mechanisms: one module each, one registry.

``REGISTRY`` maps each mechanism's name to its spec (``dpspark.mechanisms.base.MechanismSpec``);
the CLI's ``--mechanism`` choices, YAML, the notebooks' dropdowns and the Python API read it.

Adding a mechanism is one module (a spec with ``build``/``guarantee`` and a ``WordMechanism``
sampler, with ``distribution`` where a closed form exists), one line in
``dpspark/mechanisms/registry.py``, and one entry in the conformance suite
(``tests/statistical/test_conformance.py``): no edit here.
"""

from __future__ import annotations

from typing import Any

from dpspark.errors import ConfigError, RenamedParameterWarning
from dpspark.mechanisms import labels
from dpspark.mechanisms.base import GUARANTEE_TYPES, MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.labels import LEGACY_COLUMN, LEGACY_GRID_FIELDS, SETTING_COLUMNS, SYMBOLS, axis_order
from dpspark.mechanisms.noise import CHUNK, NoiseMechanism, lambda_of_series, series_of_lambda, series_of_row
from dpspark.mechanisms.registry import load
from dpspark.mechanisms.sampling import sample_noise, sample_radial

REGISTRY: dict[str, type[MechanismSpec]] = load()  # dpspark.mechanisms.registry: one line per mechanism

__all__ = [
    "CHUNK",
    "GUARANTEE_TYPES",
    "LEGACY_COLUMN",
    "LEGACY_GRID_FIELDS",
    "REGISTRY",
    "SETTING_COLUMNS",
    "SYMBOLS",
    "MechanismSpec",
    "NoiseMechanism",
    "Space",
    "WordMechanism",
    "axis_names",
    "grid_facts",
    "lambda_of_series",
    "names",
    "parameters",
    "parse",
    "sample_noise",
    "sample_radial",
    "series_label",
    "series_of_lambda",
    "series_of_row",
]


def axis_names() -> list[str]:
    """The grid axes of every registered mechanism besides ε (lambda, beta, gamma, t first): one column each,
    in ``labels.axis_order``."""
    return axis_order(p for spec in REGISTRY.values() for p in spec.axis_names())


def series_label(mechanism: str, axes: dict[str, float | None]) -> str:
    """A setting without its ε, as tables and legends name it (``MechanismSpec.label_of`` of a registered
    mechanism): ``laplace``, ``mahalanobis λ=0.5``."""
    spec = REGISTRY.get(mechanism)
    return spec.label_of(axes) if spec is not None else labels.series_label(mechanism, axes)


def grid_facts(specs: list[MechanismSpec], space: Space) -> dict[str, Any]:
    """What the grid commands' manifests state of a grid beyond its settings: each registered family's
    ``MechanismSpec.grid_facts`` (asked once per family, in registry order; the noise family's λ grid)."""
    out: dict[str, Any] = {}
    asked = set()
    for spec in REGISTRY.values():
        if spec.grid_facts.__func__ not in asked:  # a family's specs share their hook: asked once
            asked.add(spec.grid_facts.__func__)
            out.update(spec.grid_facts(specs, space))
    return out


def names() -> list[str]:
    """The registered mechanisms, in registry order."""
    return list(REGISTRY)


def parameters() -> dict[str, list[str]]:
    """Every mechanism parameter (by alias, as flags and YAML name it) → the mechanisms that take it."""
    out: dict[str, list[str]] = {}
    for name, spec in REGISTRY.items():
        for alias in spec.parameter_names():
            if name != "laplace":  # Laplace's λ is fixed at 0
                out.setdefault(alias, []).append(name)
    return out


def _renamed(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the spec's old parameter spellings under today's names (``MechanismSpec.renamed``),
    each said once in a RenamedParameterWarning; an old and a new spelling together are refused."""
    import warnings

    values = dict(values)
    for old, new in REGISTRY[name].renamed.items():
        if old not in values:
            continue
        if new in values:
            raise ConfigError(f"mechanism {name}: give {new} only ({old} is its old name)")
        values[new] = values.pop(old)
        warnings.warn(
            f"{name}'s {old} is now called {new} (--{new.replace('_', '-')}); {old} is accepted until the next release",
            RenamedParameterWarning,
            stacklevel=3,
        )
    return values


def parse(values: dict[str, Any]) -> MechanismSpec:
    """The spec of ``values["name"]`` built from ``values`` (ε and the mechanism's parameters).

    Errors (an unknown name, a bad or foreign parameter) are one ConfigError naming the field.
    """
    from dpspark._pydantic import ValidationError

    name = values.get("name")
    if name not in REGISTRY:
        raise ConfigError(f"mechanism must be one of {', '.join(REGISTRY)}, got {name!r}")
    values = _renamed(name, values)
    try:
        return REGISTRY[name].parse_obj(values)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            field = ".".join(str(x) for x in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "value_error.extra":
                msg = f"is not a parameter of {name} (its parameters: {', '.join(REGISTRY[name].parameter_names())})"
            parts.append(f"{field}: {msg}")
        raise ConfigError(f"mechanism {name}: " + "; ".join(parts)) from None
