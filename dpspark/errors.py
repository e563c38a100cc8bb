"""Named exceptions. Every message says what is wrong and what would be valid."""

from __future__ import annotations


class DPSparkError(Exception):
    """Base class of every error dpspark raises on purpose."""

    exit_code = 1


class ConfigError(DPSparkError, ValueError):
    """A setting is missing, out of range or inconsistent."""

    exit_code = 2


class InputDataError(DPSparkError, ValueError):
    """The input dataset is missing, not Parquet, or lacks a usable text column."""

    exit_code = 3


class EmbeddingError(DPSparkError, ValueError):
    """The embeddings cannot be loaded or are unfit for the mechanism."""

    exit_code = 4


class OutputExistsError(DPSparkError):
    """The output path exists and the write mode is ``error``."""

    exit_code = 5


class ReleaseRefusedError(DPSparkError):
    """The partition was already released: releasing it again spends privacy again."""

    exit_code = 7
