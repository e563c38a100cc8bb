"""dpspark: metric differential privacy (dχ-privacy) for text datasets on Spark.

Public API (pyspark is needed only by the Spark functions, and imported when called):
    release(df, output, columns, epsilon, ...)     write a private release: manifest, ledger, refusals
    perturb_text(df, columns, epsilon, ...)        the lazy DataFrame → DataFrame transform
    release_vectors(input, output, column, ...)    PrivEmb / M1 vectors release
    privacy_stats(output, epsilons, lambdas, ...)  Nw/Sw statistics
    evaluate_utility(output, text_column, label_column, input=...)  downstream utility (train/test-time)
    privacy_risk(output, text_column, input=...)   re-identification risk of a corpus
    PerturbConfig, VectorsConfig, StatsConfig      the configuration models
    load_embeddings, prepare, WordMechanism, sample_noise   the pure-numpy core

Importing dpspark has no side effects and loads nothing heavy: names are resolved on
first use (PEP 562).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "EvaluateUtilityConfig": "dpspark.config",
    "PerturbConfig": "dpspark.config",
    "RiskConfig": "dpspark.config",
    "StatsConfig": "dpspark.config",
    "VectorsConfig": "dpspark.config",
    "Embeddings": "dpspark.embeddings",
    "load_embeddings": "dpspark.embeddings",
    "ConfigError": "dpspark.errors",
    "DPSparkError": "dpspark.errors",
    "EmbeddingError": "dpspark.errors",
    "InputDataError": "dpspark.errors",
    "LedgerError": "dpspark.errors",
    "OutputError": "dpspark.errors",
    "OutputExistsError": "dpspark.errors",
    "PrivacyWarning": "dpspark.errors",
    "ReleaseRefusedError": "dpspark.errors",
    "WordMechanism": "dpspark.mechanisms",
    "sample_noise": "dpspark.mechanisms",
    "prepare": "dpspark.prepare",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dpspark' has no attribute {name!r}")


class _Package(types.ModuleType):
    """The import system sets each loaded submodule as an attribute of its package, and a set
    attribute hides ``__getattr__``: once ``dpspark.prepare`` (the module) is imported, the
    public ``dpspark.prepare`` would be that module instead of the function. Binding a lazy
    name to a submodule binds the submodule's function of that name instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and value.__name__ == _LAZY.get(name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def perturb_text(df, columns, epsilon, **settings):  # noqa: ANN001, ANN201 - pyspark types stay optional
    """Privately perturb every token of ``columns`` of a Spark DataFrame (lazy).

    Returns a DataFrame with the same rows and schema, the text columns rewritten by
    the chosen mechanism. To publish it, use ``release``. See
    dpspark.spark.perturb.perturb_text for the arguments.
    """
    from dpspark.spark.perturb import perturb_text as _perturb_text

    return _perturb_text(df, columns=columns, epsilon=epsilon, **settings)


def release(df, output=None, columns=None, epsilon=None, **settings):  # noqa: ANN001, ANN201
    """Write a private release of ``df`` to ``output`` (a path) or ``output_table="catalog.schema.table"``
    with its manifest and ledger entry.

    The same path as ``dpspark perturb``: refuses an output overlapping the input or an
    existing non-dpspark output, refuses re-releases unless ``allow_rerelease=True``,
    commits atomically. Settings are PerturbConfig fields. Returns the manifest.
    """
    from dpspark.spark.perturb import release as _release

    return _release(df, output=output, columns=columns, epsilon=epsilon, **settings)


def privacy_stats(output, epsilons, lambdas, runs=100, **settings):  # noqa: ANN001, ANN201
    """Compute Nw/Sw over a grid of ε and λ on Spark; write the tables and plots to ``output``.

    Returns the run manifest (with the per-(ε, λ) summary). See ``dpspark.config.StatsConfig``
    for the other settings (words, word_list, corpus, vocab_size, nn, seed, mode, ...).
    """
    from dpspark.config import StatsConfig
    from dpspark.spark.stats import run_privacy_stats

    return run_privacy_stats(
        StatsConfig.parse({"output": output, "epsilons": epsilons, "lambdas": lambdas, "runs": runs, **settings})
    )


def evaluate_utility(output, text_column, label_column, input=None, df=None, **settings):  # noqa: A002, ANN001, ANN201
    """Downstream utility of perturbed text (train-time and test-time) over a grid of ε and λ,
    against the non-private baseline, on a labelled Parquet dataset (``input``) or DataFrame
    (``df``). Writes results, summary.md, plots and a manifest to ``output``; returns the
    manifest. Settings: ``dpspark.config.EvaluateUtilityConfig`` fields."""
    from dpspark.spark.utility import evaluate_utility as _evaluate_utility

    return _evaluate_utility(output, text_column, label_column, input=input, df=df, **settings)


def privacy_risk(output, text_column, input=None, df=None, **settings):  # noqa: A002, ANN001, ANN201
    """Re-identification risk of a corpus per (ε, λ): the share of tokens an informed attacker
    recovers (top-1, top-5), over sensitive words, and released unchanged. Returns the manifest
    (``results``). Settings: ``dpspark.config.RiskConfig`` fields."""
    from dpspark.spark.risk import privacy_risk as _privacy_risk

    return _privacy_risk(output, text_column, input=input, df=df, **settings)


def release_vectors(input=None, output=None, column=None, epsilon=None, df=None, **settings):  # noqa: A002, ANN001, ANN201
    """Release private vectors (PrivEmb by default, or ``mechanism="m1"``) of one column of a
    Parquet dataset (or of ``df``, or ``input_table=``) into ``output`` (or ``output_table=``);
    returns the manifest. Settings: VectorsConfig fields."""
    from dpspark.spark.vectors import run_release_vectors

    given = {"input": input, "output": output, "column": column, "epsilon": epsilon}
    return run_release_vectors({**{k: v for k, v in given.items() if v is not None}, **settings}, df=df)


__all__ = [
    "__version__",
    "evaluate_utility",
    "perturb_text",
    "privacy_risk",
    "privacy_stats",
    "release",
    "release_vectors",
    *_LAZY,
]
