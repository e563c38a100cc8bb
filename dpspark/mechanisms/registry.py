"""The registered word mechanisms, one line each: name → ``module:Spec`` of ``dpspark.mechanisms``.

Adding a mechanism is one module (a spec with ``build``/``guarantee`` and a ``WordMechanism``
sampler, with ``distribution`` where a closed form exists), one line here, and one entry in the
conformance suite (``tests/statistical/test_conformance.py``). Nothing else lists them: the CLI's
choices and flags, YAML, the notebooks' dropdowns, the Python API and the docs' flag table read
``dpspark.mechanisms.REGISTRY``, which this order fixes.
"""

from __future__ import annotations

import importlib

ENTRIES = {
    "mahalanobis": "noise:Mahalanobis",
    "laplace": "noise:Laplace",
    "vickrey": "vickrey:Vickrey",
    "tem": "tem:TEM",
    "santext": "santext:SanText",
    "santext-plus": "santext_plus:SanTextPlus",
    "custext": "custext:CusText",
    "custext-plus": "custext:CusTextPlus",
    "syntf-words": "syntf:SynTFWords",
    "syntf": "syntf:SynTF",
    "1-diffractor": "diffractor:Diffractor",
    "truncated-gumbel": "truncated_gumbel:TruncatedGumbel",
}


def load() -> dict[str, type]:
    """name → spec class, in ``ENTRIES`` order; each spec's ``name`` must be its key."""
    out = {}
    for name, where in ENTRIES.items():
        module, attr = where.split(":")
        spec = getattr(importlib.import_module(f"dpspark.mechanisms.{module}"), attr)
        if spec.__fields__["name"].default != name:
            raise ImportError(f"dpspark.mechanisms.registry: {where} is named {spec.__fields__['name'].default!r}")
        out[name] = spec
    return out
