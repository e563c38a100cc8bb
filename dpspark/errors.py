"""Named exceptions. Every message says what is wrong and what would be valid.

Each class carries the process exit code of the ``dpspark`` command (docs/output.md, "Exit codes").
"""

from __future__ import annotations


class DPSparkError(Exception):
    """Base class of every error dpspark raises on purpose."""

    exit_code = 1


class ConfigError(DPSparkError, ValueError):
    """A setting is missing, out of range or inconsistent (paths that overlap the input included)."""

    exit_code = 2


class InputDataError(DPSparkError, ValueError):
    """The input dataset is missing, not Parquet, or lacks a usable text column."""

    exit_code = 3


class EmbeddingError(DPSparkError, ValueError):
    """The embeddings cannot be loaded or are unfit for the mechanism."""

    exit_code = 4


class VocabularyTooSmallError(EmbeddingError):
    """The output vocabulary has fewer words than the mechanism needs (``needed``): a command that chose the
    vocabulary from its input says that the input is what is short."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


class OutputError(DPSparkError):
    """The output cannot be used: it exists (mode ``error``), is not an earlier dpspark
    output (mode ``overwrite``), or cannot be written."""

    exit_code = 5


class OutputExistsError(OutputError):
    """The output path exists and the write mode is ``error``."""


class ReleaseRefusedError(DPSparkError):
    """The records were already released: releasing them again spends privacy again."""

    exit_code = 7


class LedgerError(DPSparkError):
    """The release ledger of an output cannot be read: it must be repaired, never guessed."""

    exit_code = 8


class SparkMemoryError(DPSparkError):
    """Spark ran out of memory (a Java heap): give the driver or the executors more, or ask for less at once
    (dpspark.spark.memory says which)."""

    exit_code = 9


class DPSparkWarning(UserWarning):
    """A warning of dpspark's own (the test suite turns these, and only these, into errors)."""


class PrivacyWarning(DPSparkWarning):
    """An opt-in publishes something the guarantee does not cover (raw text, layout, corpus words)."""


class RenamedParameterWarning(DPSparkWarning, FutureWarning):
    """A parameter given by its old spelling: it still works for one release (CHANGELOG), then is refused."""
