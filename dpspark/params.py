"""The one place that validates the privacy parameters ε, δ, β and a seed, and reads a number for the
checks of each mechanism's own parameters, which live in its module (``number``).

Every entry point (configuration models, the pure-numpy mechanisms, the evaluation
experiments) calls these functions, so a value is accepted or refused the same way
everywhere, with one message naming the parameter, the value and the valid range.
Each raises ``ConfigError`` (a ``ValueError``, so pydantic validators report it as a
field error).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dpspark.errors import ConfigError


def number(name: str, value: Any, expected: str, ok: Callable[[float], bool] = lambda x: not math.isnan(x)) -> float:
    """``value`` as a float that satisfies ``ok``, else a ConfigError "NAME must be EXPECTED, got VALUE". A bool
    or anything ``float`` cannot read is NaN here, which every range check refuses."""
    try:
        converted = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        converted = math.nan
    if not ok(converted):
        raise ConfigError(f"{name} must be {expected}, got {value!r}")
    return converted


def check_epsilon(epsilon: Any) -> float:
    """ε > 0 and finite: the privacy level (smaller is more private)."""
    return number("epsilon", epsilon, "a positive finite number", lambda x: math.isfinite(x) and x > 0)


# The smallest ε accepted. The noise radius is Gamma(d, 1/ε) (mean d/ε) and the nearest-neighbour
# search squares it: below about 1e-150 those figures overflow float64 (numpy warns on every
# executor, --quiet or not) and PrivEmb's noise does the same. Far above that the output has
# already stopped depending on the input: at ε = 1e-6 the noise is millions of times the length
# of an embedding vector, so every output word is equally likely. 1e-6 keeps every figure
# finite with a wide margin and refuses no ε that could give a useful release.
MIN_EPSILON = 1e-6


def epsilon_value(v: Any) -> float:
    """ε as every model and mechanism takes it: ``check_epsilon`` and at least ``MIN_EPSILON``."""
    value = check_epsilon(v)
    if value < MIN_EPSILON:
        raise ConfigError(
            f"epsilon must be at least {MIN_EPSILON:g} (below it the noise, of scale 1/ε, no longer depends on the "
            f"text and overflows float64), got {v!r}"
        )
    return value


def _open_unit(name: str, value: Any, expected: str) -> float:
    return number(name, value, expected, lambda x: math.isfinite(x) and 0.0 < x < 1.0)


def check_delta(delta: Any) -> float:
    """δ ∈ (0, 1): PrivEmb's failure probability (e.g. 1e-6)."""
    return _open_unit("delta", delta, "in (0, 1) (e.g. 1e-6)")


def check_beta(beta: Any) -> float:
    """β ∈ (0, 1): the distortion that PrivEmb's random projection may add to distances."""
    return _open_unit("beta", beta, "in (0, 1) (the projection's distortion)")


def check_seed(seed: Any) -> int | None:
    """A seed is None (noise from the operating system) or an integer in [0, 2**63)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ConfigError(
            f"seed must be an integer in [0, 2**63) (or omitted: noise from the operating system), got {seed!r}"
        )
    return seed
