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
from dpspark.mechanisms.base import GUARANTEE_TYPES, MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.noise import CHUNK, NoiseMechanism, sample_noise, sample_radial
from dpspark.mechanisms.registry import load

REGISTRY: dict[str, type[MechanismSpec]] = load()  # dpspark.mechanisms.registry: one line per mechanism

__all__ = [
    "CHUNK",
    "GUARANTEE_TYPES",
    "REGISTRY",
    "MechanismSpec",
    "NoiseMechanism",
    "Space",
    "WordMechanism",
    "names",
    "parameters",
    "parse",
    "sample_noise",
    "sample_radial",
]


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
