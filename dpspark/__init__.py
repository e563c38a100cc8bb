"""dpspark: metric differential privacy (dχ-privacy) for text datasets on Spark.

Public API (pyspark is needed only by the Spark functions, and imported when called):
    release(df, output, columns, epsilon, ...)     write a private release: manifest, ledger, refusals
    perturb_text(df, columns, epsilon, ...)        the lazy DataFrame → DataFrame transform
    release_vectors(input, output, column, ...)    PrivEmb / M1 vectors release
    privacy_stats(output, epsilons, lambdas, ...)  Nw/Sw statistics
    calibrate(stats, max_nw_fraction=..., ...)     the ε (or (ε, λ)) meeting Nw/Sw, utility or risk bounds
    evaluate_utility(output, text_column, label_column, input=...)  downstream utility (train/test-time)
    privacy_risk(output, text_column, input=...)   re-identification risk of a corpus
    compare(output, text_column, label_column, input=..., mechanisms=[...])  mechanisms side by side,
                                                   at equal empirical privacy, with a report to sign
    PerturbConfig, VectorsConfig, StatsConfig      the configuration models
    load_embeddings, prepare, WordMechanism, sample_noise   the pure-numpy core

Importing dpspark has no side effects and loads nothing heavy: names are resolved on
first use (PEP 562).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__version__ = "0.1.0"

_LAZY = {
    "calibrate": "dpspark.spark.calibrate",
    "compare": "dpspark.spark.compare",
    "CompareConfig": "dpspark.config",
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


def _given(values: dict[str, Any]) -> dict[str, Any]:
    """The explicit settings to pass on: None means the model's own default (``lam=None`` then
    leaves room for ``**{"lambda": 0.5}``, the YAML spelling)."""
    return {k: v for k, v in values.items() if v is not None}


def perturb_text(
    df: DataFrame,
    columns: list[str] | str,
    epsilon: float | None = None,
    *,
    mechanism: str = "mahalanobis",
    vocab_size: int = 50_000,
    vocab_file: str | None = None,
    vocab_from_corpus: bool = False,
    embeddings: str = "glove-6b-50d",
    embeddings_format: Literal["auto", "glove", "word2vec", "word2vec-binary", "fasttext", "npy", "parquet"] = "auto",
    embeddings_words: str | None = None,
    embeddings_dir: str | None = None,
    nn: Literal["exact", "annoy"] = "exact",
    annoy_trees: int = 50,
    annoy_search_k: int = -1,
    device: Literal["auto", "cpu", "cuda"] = "auto",
    recall_queries: int = 2000,
    oov: Literal["unk", "random", "drop", "keep"] = "unk",
    oov_token: str = "[UNK]",
    layout: Literal["single", "lines", "keep"] = "single",
    keep_original: bool = False,
    seed: int | None = None,
    privacy_unit: str = "token",
    unit_budget: float | None = None,
    allocation: str = "scale",
    over_cap: Literal["placeholder", "refuse"] = "placeholder",
    **settings: Any,
) -> DataFrame:
    """Privately perturb every token of ``columns`` of a Spark DataFrame (lazy).

    Returns a DataFrame with the same rows and schema, the text columns rewritten by the
    chosen mechanism. It writes nothing: to publish the result use ``release`` (manifest,
    ledger, refusals), not ``df.write``. Evaluating the result twice gives the same text;
    calling ``perturb_text`` again gives new noise. The settings are those of
    ``dpspark.config.PerturbConfig`` and are checked by it.

    Args:
        df: the input DataFrame (bounded: a stream is refused).
        columns: the text column(s) to rewrite (a list, or one comma-separated string).
        epsilon: the privacy parameter ε per token (required with the token unit: no default).
        mechanism: a name of ``dpspark.mechanisms.REGISTRY`` (``dpspark.mechanisms.names()``; default
            ``"mahalanobis"``). Their guarantees differ (``docs/mechanisms.md``); ``"syntf"`` adds
            ``COL_tf``.
        vocab_size: the output vocabulary is the embedding's first ``vocab_size`` words.
        vocab_file: a public word list (one per line) as the output vocabulary instead.
        vocab_from_corpus: derive the vocabulary from the input (publishes its frequent
            words; warns).
        embeddings: ``"glove-6b-50d"`` (default) or the path of an embedding file.
        embeddings_format: the file's format (``"auto"``: from its name).
        embeddings_words: the word list of a ``.npy`` embedding.
        embeddings_dir: a directory every executor reads at the same path (a volume,
            /dbfs, NFS): a user embedding is stored there once instead of shipped per job.
        nn: nearest-neighbour search, ``"exact"`` (default) or ``"annoy"`` (approximate).
        annoy_trees: annoy's number of trees.
        annoy_search_k: annoy's search_k (-1: annoy's default).
        device: where exact search runs: ``"auto"`` (the GPU Spark gave the task, or the
            executor's GPU, else the CPU), ``"cpu"`` or ``"cuda"``; the answers are the same.
        recall_queries: noisy queries that measure annoy's recall.
        oov: out-of-vocabulary policy: ``"unk"``, ``"random"``, ``"drop"`` or ``"keep"``.
        oov_token: the placeholder of the ``unk`` policy.
        layout: ``"single"`` (tokens joined by single spaces); ``"lines"`` and ``"keep"``
            publish the input's line breaks or whitespace (outside the guarantee; warns).
        keep_original: also return the raw text as ``COL_original`` (NOT private; warns).
        seed: a fixed seed, for tests and experiments only (warns).
        privacy_unit: what one guarantee protects: ``"token"`` (default) or ``"document"`` (one row, all of
            ``columns`` together; docs/privacy-units.md).
        unit_budget: E, each unit's budget, in place of ``epsilon`` when the unit is not the token.
        allocation: ``"scale"`` (each token of a unit of n tokens gets E/n) or ``"cap:K"`` (E/K each; a unit's
            tokens after the K-th are released as the placeholder).
        over_cap: under ``cap:K``, ``"placeholder"`` (default) or ``"refuse"`` (refuse when a unit exceeds K).
        **settings: the mechanism's own parameters (``lam=0.5``, ``top_k=20``, ``beta=0.001``, ...:
            ``dpspark.mechanisms.parameters()`` lists each with the mechanisms that take it), checked
            against the chosen mechanism: another mechanism's parameter is a ConfigError that names
            this one's. Any setting may also be spelled as in YAML (``**{"lambda": 0.5}``). The
            settings of a written release (output, output_table, mode, partition, ...) are refused
            with a ConfigError that names ``dpspark.release``.

    Raises:
        ConfigError: a setting is invalid or belongs to a written release.
        InputDataError: a column is missing or not a string column.
    """
    from dpspark.spark.perturb import perturb_text as _perturb_text

    chosen = _given({k: v for k, v in locals().items() if k in _PERTURB_TEXT_SETTINGS})
    return _perturb_text(df, columns=columns, epsilon=epsilon, **chosen, **settings)


_PERTURB_TEXT_SETTINGS = frozenset(perturb_text.__kwdefaults__)


def release(
    df: DataFrame | None,
    output: str | None = None,
    columns: list[str] | str | None = None,
    epsilon: float | None = None,
    *,
    output_table: str | None = None,
    table_format: str | None = None,
    mode: Literal["error", "overwrite"] = "error",
    partition: str | None = None,
    allow_rerelease: bool = False,
    input: str | None = None,  # noqa: A002 - the setting's name everywhere else (--input, YAML)
    input_table: str | None = None,
    partitions: int | None = None,
    mechanism: str = "mahalanobis",
    vocab_size: int = 50_000,
    vocab_file: str | None = None,
    vocab_from_corpus: bool = False,
    embeddings: str = "glove-6b-50d",
    embeddings_format: Literal["auto", "glove", "word2vec", "word2vec-binary", "fasttext", "npy", "parquet"] = "auto",
    embeddings_words: str | None = None,
    embeddings_dir: str | None = None,
    nn: Literal["exact", "annoy"] = "exact",
    annoy_trees: int = 50,
    annoy_search_k: int = -1,
    device: Literal["auto", "cpu", "cuda"] = "auto",
    recall_queries: int = 2000,
    oov: Literal["unk", "random", "drop", "keep"] = "unk",
    oov_token: str = "[UNK]",
    layout: Literal["single", "lines", "keep"] = "single",
    keep_original: bool = False,
    seed: int | None = None,
    privacy_unit: str = "token",
    unit_budget: float | None = None,
    allocation: str = "scale",
    over_cap: Literal["placeholder", "refuse"] = "placeholder",
    **settings: Any,
) -> dict[str, Any]:
    """Write a private release of ``df`` to ``output`` (a path) or ``output_table``, with its
    manifest and ledger entry; return the manifest.

    The same path as ``dpspark perturb``: refuses an output overlapping the input, an existing
    non-dpspark output and records released before (unless ``allow_rerelease=True``), and commits
    atomically. The settings are those of ``dpspark.config.PerturbConfig``, checked by it.

    Args:
        df: the input DataFrame (bounded: a stream is refused), or None where the release reads
            its input itself (``partition`` with ``input``, or ``input_table``).
        output: the output directory (or give ``output_table``).
        columns: the text column(s) to perturb (a list, or one comma-separated string).
        epsilon: the privacy parameter ε per token (required with the token unit: no default).
        output_table: an output table (``catalog.schema.table``) instead of ``output``; its
            ledger is the table ``<name>__dpspark_ledger`` beside it.
        table_format: the format of a new output table (default: the session's).
        mode: ``"error"`` (default) refuses an existing output; ``"overwrite"`` replaces
            an earlier dpspark release, never anything else.
        partition: ETL: release one input partition (``"date=2026-11-21"``) into the same
            partition of the output; the input is then read from ``input``.
        allow_rerelease: release records again on purpose (spends privacy again; in the ledger).
        input: where ``df``'s rows were read from, when its plan cannot tell (the output
            must stay clear of it).
        input_table: an input table (``catalog.schema.table``), read instead of ``df``.
        partitions: tasks to read the input with (smaller read splits).
        mechanism: a name of ``dpspark.mechanisms.REGISTRY`` (``dpspark.mechanisms.names()``; default
            ``"mahalanobis"``). Their guarantees differ (``docs/mechanisms.md``); ``"syntf"`` adds
            ``COL_tf``.
        vocab_size: the output vocabulary is the embedding's first ``vocab_size`` words.
        vocab_file: a public word list (one per line) as the output vocabulary instead.
        vocab_from_corpus: derive the vocabulary from the input (publishes its frequent
            words; warns).
        embeddings: ``"glove-6b-50d"`` (default) or the path of an embedding file.
        embeddings_format: the file's format (``"auto"``: from its name).
        embeddings_words: the word list of a ``.npy`` embedding.
        embeddings_dir: a directory every executor reads at the same path (a volume,
            /dbfs, NFS): a user embedding is stored there once instead of shipped per job.
        nn: nearest-neighbour search, ``"exact"`` (default) or ``"annoy"`` (approximate).
        annoy_trees: annoy's number of trees.
        annoy_search_k: annoy's search_k (-1: annoy's default).
        device: where exact search runs: ``"auto"`` (the GPU Spark gave the task, or the
            executor's GPU, else the CPU), ``"cpu"`` or ``"cuda"``; the answers are the same.
        recall_queries: noisy queries that measure annoy's recall.
        oov: out-of-vocabulary policy: ``"unk"``, ``"random"``, ``"drop"`` or ``"keep"``.
        oov_token: the placeholder of the ``unk`` policy.
        layout: ``"single"`` (tokens joined by single spaces); ``"lines"`` and ``"keep"``
            publish the input's line breaks or whitespace (outside the guarantee; warns).
        keep_original: also write the raw text as ``COL_original`` (NOT private; warns, in the manifest).
        seed: a fixed seed, for tests and experiments only (warns).
        privacy_unit: what one guarantee protects: ``"token"`` (default) or ``"document"`` (one row, all of
            ``columns`` together; docs/privacy-units.md).
        unit_budget: E, each unit's budget, in place of ``epsilon`` when the unit is not the token.
        allocation: ``"scale"`` (each token of a unit of n tokens gets E/n) or ``"cap:K"`` (E/K each; a unit's
            tokens after the K-th are released as the placeholder).
        over_cap: under ``cap:K``, ``"placeholder"`` (default) or ``"refuse"`` (refuse when a unit exceeds K).
        **settings: the mechanism's own parameters (``lam=0.5``, ``top_k=20``, ``beta=0.001``, ...:
            ``dpspark.mechanisms.parameters()`` lists each with the mechanisms that take it), checked
            against the chosen mechanism: another mechanism's parameter is a ConfigError that names
            this one's. Any setting may also be spelled as in YAML (``**{"lambda": 0.5}``).

    Returns:
        The release's manifest (also written to the output as ``_dpspark_manifest.json``).

    Raises:
        ConfigError: a setting is invalid, or the output overlaps the input (exit code 2).
        OutputExistsError: the output exists and is not an earlier dpspark release.
        ReleaseRefusedError: the records were released before (pass ``allow_rerelease``).
    """
    from dpspark.spark.perturb import release as _release

    chosen = _given({k: v for k, v in locals().items() if k in _RELEASE_SETTINGS})
    return _release(df, output=output, columns=columns, epsilon=epsilon, **chosen, **settings)


_RELEASE_SETTINGS = frozenset(release.__kwdefaults__)


def privacy_stats(output, epsilons=None, lambdas=None, runs=100, **settings):  # noqa: ANN001, ANN201
    """Compute Nw/Sw over a grid of settings on Spark (or the local engine: ``engine="local"``, or without
    pyspark or Java); write the tables and plots to ``output``.

    The grid is ``epsilons`` (None: each mechanism's ``default_epsilons``) × the λ grid of laplace/mahalanobis
    (``lambdas``), or
    ``mechanisms=["laplace", "tem", "santext"]`` × ``epsilons`` × each mechanism's own axes
    (``grid={"lambda": [0, 1], "t": [0.5]}``). Per document: ``privacy_unit="document", unit_budgets=[60, 200],
    corpus=PATH, columns=[...]`` (each E measured at the per-token ε it gives the corpus's median row). Returns the
    run manifest (with the per-setting summary). See ``dpspark.config.StatsConfig`` for the other settings (words,
    word_list, corpus, vocab_size, nn, seed, mode, ...).
    """
    from dpspark import local
    from dpspark.config import StatsConfig

    given = {"output": output, "epsilons": epsilons, "lambdas": lambdas, "runs": runs, **settings}
    return local.privacy_stats(StatsConfig.parse({k: v for k, v in given.items() if v is not None}))


def evaluate_utility(output, text_column, label_column, input=None, df=None, **settings):  # noqa: A002, ANN001, ANN201
    """Downstream utility of perturbed text (train-time and test-time) over a grid of settings,
    against the non-private baseline, on a labelled Parquet dataset (``input``) or DataFrame
    (``df``). Writes results, summary.md, plots and a manifest to ``output``; returns the
    manifest. Settings: ``dpspark.config.EvaluateUtilityConfig`` fields."""
    from dpspark import local
    from dpspark.config import EvaluateUtilityConfig

    given = {"output": output, "text_column": text_column, "label_column": label_column, "input": input}
    config = EvaluateUtilityConfig.parse({**given, **settings})
    if df is None:
        return local.evaluate_utility(config)
    from dpspark.spark.utility import run_evaluate_utility  # a DataFrame is Spark's

    return run_evaluate_utility(config, df=df)


def privacy_risk(output, text_column, input=None, df=None, **settings):  # noqa: A002, ANN001, ANN201
    """Re-identification risk of a corpus per (ε, λ): the share of tokens an informed attacker
    recovers (top-1, top-5), over sensitive words, and released unchanged. Returns the manifest
    (``results``). Settings: ``dpspark.config.RiskConfig`` fields; ``engine="local"`` (or no pyspark or Java)
    runs it without Spark on a local ``input``."""
    from dpspark import local
    from dpspark.config import RiskConfig

    config = RiskConfig.parse({"output": output, "text_column": text_column, "input": input, **settings})
    return local.privacy_risk(config, df)


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


def __dir__() -> list[str]:
    """The public API only (PEP 562): not the helpers this module imports for itself."""
    return sorted(__all__)
