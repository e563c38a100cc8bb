"""dpspark: metric differential privacy (dχ-privacy) for text datasets on Spark.

Public API:
    perturb_text(df, columns, epsilon, ...)  Spark DataFrame → DataFrame (needs pyspark)
    PerturbConfig                            the one configuration model
    load_embeddings, prepare                 the pure-numpy core
"""

from __future__ import annotations

from dpspark import _blas

_blas.prefer_fast_kernels()  # before the first numpy import (see dpspark/_blas.py)

from dpspark.config import PerturbConfig  # noqa: E402
from dpspark.embeddings import Embeddings, load_embeddings  # noqa: E402
from dpspark.errors import ConfigError, DPSparkError, EmbeddingError, InputDataError, OutputExistsError  # noqa: E402
from dpspark.mechanisms import WordMechanism, sample_noise  # noqa: E402
from dpspark.prepare import prepare  # noqa: E402

__version__ = "0.1.0"


def perturb_text(df, columns, epsilon, **settings):  # noqa: ANN001, ANN201 - pyspark types stay optional
    """Privately perturb every token of ``columns`` of a Spark DataFrame.

    Returns a DataFrame with the same rows and schema, the text columns rewritten by
    the chosen mechanism. See dpspark.spark.perturb.perturb_text for the arguments.
    """
    from dpspark.spark.perturb import perturb_text as _perturb_text

    return _perturb_text(df, columns=columns, epsilon=epsilon, **settings)


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


def release_vectors(input, output, column, epsilon, **settings):  # noqa: A002, ANN001, ANN201
    """Release private vectors (PrivEmb by default, or ``mechanism="m1"``) of one column of a
    Parquet dataset; returns the manifest. Settings: delta, beta, dim, mechanism, seed, mode."""
    from dpspark.spark.vectors import run_release_vectors

    return run_release_vectors({"input": input, "output": output, "column": column, "epsilon": epsilon, **settings})


__all__ = [
    "ConfigError",
    "DPSparkError",
    "EmbeddingError",
    "Embeddings",
    "InputDataError",
    "OutputExistsError",
    "PerturbConfig",
    "WordMechanism",
    "__version__",
    "load_embeddings",
    "perturb_text",
    "prepare",
    "privacy_stats",
    "release_vectors",
    "sample_noise",
]
