"""A run's settings: each setting of a grid as the perturb settings a release would use, its exact key for
``derive_key``, and its preparation (``Prepared``). Shared by evaluate-utility and compare."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from dpspark.config import EvaluateUtilityConfig, PerturbConfig
from dpspark.device import DEVICE_SEARCH
from dpspark.embeddings import Embeddings
from dpspark.mechanisms import MechanismSpec
from dpspark.neighbours import AnnoyIndex
from dpspark.prepare import Prepared, prepare, prepare_grid

TEXT, LABEL = "text", "label"  # the labelled commands' internal columns
ORIGINAL = f"{TEXT}_original"  # the perturb transform's keep_original column


def perturb_config(config: EvaluateUtilityConfig, spec: MechanismSpec) -> PerturbConfig:
    """The perturb settings of one setting of the grid (what a release with ``spec`` would use)."""
    shared = ("embeddings", "embeddings_format", "embeddings_words", "embeddings_dir", "vocab_size", "vocab_file")
    shared += ("nn", "annoy_trees", "annoy_search_k")
    values = {k: getattr(config, k) for k in shared}
    own = {k: v for k, v in spec.parameters().items() if k not in ("name", "epsilon") and v is not None}
    values.update(own, columns=[TEXT], epsilon=spec.epsilon, mechanism=spec.name)
    return PerturbConfig.parse(values)


def setting_key(spec: MechanismSpec) -> str:
    """The setting as one exact label for ``derive_key``: its parameters (name and ε included) as JSON
    (floats written exactly), so that a setting's noise does not depend on the rest of the grid."""
    return json.dumps(spec.parameters(), sort_keys=True)


def prepare_settings(
    config: EvaluateUtilityConfig, specs: list[MechanismSpec], embeddings: Embeddings, workdir: Path
) -> list[Prepared]:
    """One ``Prepared`` (a release's preparation, its own bundle) per setting. With exact search the
    vocabulary, the index and the Space (with every setting's artefacts) are prepared once (``prepare_grid``) and
    shared; an annoy index is built and its recall measured per setting (the recall depends on the
    setting's noise)."""
    if config.nn != "exact":
        return [
            prepare(perturb_config(config, spec), embeddings=embeddings, workdir=workdir / str(i))
            for i, spec in enumerate(specs)
        ]
    grid = prepare_grid(config, specs, workdir, embeddings)
    return [
        Prepared(perturb_config(config, spec), dataclasses.replace(grid, specs=[spec]), recall=1.0, recall_queries=0)
        for spec in specs
    ]


def mechanism_fields(config: Any, emb: Embeddings, vocab_rows: np.ndarray, annoy: AnnoyIndex | None) -> dict:
    """The manifest's account of the mechanism's public parts (statistics and risk outputs)."""
    return {
        "embeddings": {"name": emb.name, "sha256": emb.sha256, "words": len(emb)},
        "dimension": emb.dim,
        "vocabulary": {"size": int(len(vocab_rows)), "source": config.vocab_file or f"first {config.vocab_size}"},
        "nearest_neighbour": {
            "method": config.nn,
            "params": annoy.params() if annoy else {},
            "device": config.device,
            "device_search": DEVICE_SEARCH,
        },
        "seeded": config.seed is not None,
    }
