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
    "sample_noise",
]
