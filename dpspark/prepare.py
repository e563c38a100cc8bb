"""Driver-side preparation, once per run: embeddings → vocabulary → Σ, A → index → bundle.

``Prepared.write_bundle`` writes what executors need in the one bundle format
(``dpspark.bundle``); ``dpspark.spark.resources`` ships it and every Python worker
loads it once into its bounded cache, then builds its perturber with
``dpspark.bundle.perturber_from``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpspark import jvm_cache
from dpspark.bundle import save_bundle
from dpspark.config import PerturbConfig
from dpspark.device import DEVICE_SEARCH, exact_index
from dpspark.embeddings import Embeddings, embeddings_of, select_vocabulary
from dpspark.errors import ConfigError, EmbeddingError
from dpspark.mechanisms import MechanismSpec, Space, WordMechanism
from dpspark.mechanisms.base import UNITS
from dpspark.mechanisms.base import corpus_counts as counts_over_vocabulary
from dpspark.neighbours import AnnoyIndex, NeighbourIndex, recall_at_1
from dpspark.rng import secure_generator
from dpspark.scratch import user_cache
from dpspark.text import TextPerturber
from dpspark.wordfiles import read_word_list

log = logging.getLogger("dpspark")

AGREEMENT_BAR = 0.99


@dataclass
class Grid:
    """The driver's preparation of one or more settings (the one preparation of every command): the
    embedding, the output vocabulary, the search index and the Space (with the public arrays the
    settings prepared), with the timings of each step."""

    embeddings: Embeddings
    vocab_rows: np.ndarray
    specs: list[MechanismSpec]
    space: Space
    index: NeighbourIndex
    timings: dict[str, float] = field(default_factory=dict)
    artefact_names: list[str] = field(default_factory=list)  # what the specs prepared (``MechanismSpec.prepare``)
    device: str = "auto"  # where the executors' exact search runs (``--device``; dpspark.device)

    @property
    def annoy(self) -> AnnoyIndex | None:
        return self.index if isinstance(self.index, AnnoyIndex) else None

    def write_bundle(self, directory: str | Path, embeddings_dir: str | None = None, **extra: Any) -> Path:
        """Write the executor bundle (``dpspark.bundle``): the specs (work items and the perturber name
        them by position), the index, the mechanisms' artefacts and ``extra`` settings (a release's text policy)."""
        settings = {
            "settings": [spec.parameters() for spec in self.specs],
            "nn": self.index.method,
            "nn_params": self.index.params(),
            "device": self.device,
            **extra,
        }
        annoy = self.annoy.path if self.annoy else None
        artefacts = self.space.artefacts(self.artefact_names)
        return save_bundle(
            directory,
            self.embeddings,
            settings,
            self.vocab_rows,
            annoy_path=annoy,
            embeddings_dir=embeddings_dir,
            artefacts=artefacts,
        )

    def mechanisms(self) -> list[WordMechanism]:
        return [spec.build(self.space) for spec in self.specs]

    def facts(self) -> list[dict]:
        """Each setting's facts (``MechanismSpec.facts``), for the manifest."""
        return [spec.facts(self.space) for spec in self.specs]


def prepare_grid(
    config: Any,
    specs: list[MechanismSpec],
    workdir: str | Path | None = None,
    embeddings: Embeddings | None = None,
    vocab_words: list[str] | None = None,
    corpus_counts: dict[str, int] | None = None,
) -> Grid:
    """Load the embedding, choose the vocabulary, build the index and prepare each of ``specs``
    (``MechanismSpec.prepare``): what every command needs, prepared one way.

    Args:
        config: settings with the embedding, vocabulary and index fields (any command's).
        specs: the settings to prepare.
        workdir: where an annoy index file is written (required for ``nn="annoy"``).
        embeddings: already loaded embeddings (else loaded from the config).
        vocab_words: an explicit output vocabulary (e.g. corpus-derived), overriding the config.
        corpus_counts: the input corpus's count of each vocabulary word it holds, put in the Space for the
            specs that request it (``MechanismSpec.corpus_counts_artefact``: SanText+'s ``sensitive_from_corpus``;
            kept on the driver: never shipped).
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    emb = embeddings or embeddings_of(config)
    timings["load_embeddings_s"] = time.perf_counter() - t0
    rows = vocabulary_rows(config, emb, vocab_words)
    check_placeholder(config, emb, rows)
    t0 = time.perf_counter()
    device = getattr(config, "device", "auto")
    # The driver searches on its own GPU where it has one; "cuda" is the executors' requirement.
    index: NeighbourIndex = exact_index(emb.vectors[rows], "auto" if device == "cuda" else device)
    if config.nn == "annoy":
        if workdir is None:
            raise ValueError("an annoy index needs a working directory for its file")
        Path(workdir).mkdir(parents=True, exist_ok=True)
        index = AnnoyIndex.build(
            emb.vectors[rows], str(Path(workdir) / "index.ann"), config.annoy_trees, config.annoy_search_k
        )
    timings["index_build_s"] = time.perf_counter() - t0
    space = Space(emb.vectors, rows, index, cache_dir=cache_dir(config), words=emb.word_rows, embedding_id=emb.sha256)
    if corpus_counts is not None:
        for name in dict.fromkeys(n for spec in specs if (n := spec.corpus_counts_artefact()) is not None):
            space.artefact(name, lambda: counts_over_vocabulary(space, corpus_counts))
    t0 = time.perf_counter()
    # The mechanisms' public arrays (Σ and A of the noise family, a grouping, a neighbour table), and their
    # checks against this vocabulary, before any Spark work.
    names = list(dict.fromkeys(name for spec in specs for name in spec.prepare(space)))
    if names:
        timings["mechanism_prepare_s"] = time.perf_counter() - t0
    return Grid(emb, rows, list(specs), space, index, timings, names, device)


def vocabulary_rows(config: Any, emb: Embeddings, vocab_words: list[str] | None = None) -> np.ndarray:
    """The output vocabulary's rows of ``emb``: ``vocab_words`` when given, else the config's word list
    (``vocab_file``), else its first ``vocab_size`` words (``select_vocabulary``)."""
    if vocab_words is None and config.vocab_file:
        vocab_words = read_word_list(config.vocab_file)
    return select_vocabulary(emb, config.vocab_size, vocab_words)


def check_placeholder(config: Any, emb: Embeddings, rows: np.ndarray) -> None:
    """Refuse an output vocabulary that holds the ``unk`` policy's placeholder (``oov_token``, "[UNK]"): the
    mechanism could release it for a vocabulary word, and a released "[UNK]" would then read as an
    out-of-vocabulary token that was not one (and the output's placeholder count would count it). Refused,
    not dropped: the vocabulary stays the one the settings name, and choosing another placeholder is one flag."""
    token = getattr(config, "oov_token", None)
    if getattr(config, "oov", None) != "unk" or token is None:
        return
    row = emb.index_of(token)
    if row >= 0 and np.isin(row, rows):
        raise EmbeddingError(
            f"embeddings {emb.name} hold the word {token!r}, which is also the placeholder of out-of-vocabulary "
            f"tokens, so a released {token!r} could be either: choose another placeholder (--oov-token <oov>) or "
            "remove the word from the embeddings"
        )


def cache_dir(config: Any) -> Path:
    """Where costly public arrays (``Space.artefact(..., store=True)``) are kept between runs: the shared
    embeddings directory when the run names one, else $DPSPARK_CACHE_DIR, else dpspark's directory in the
    user's cache ($XDG_CACHE_HOME/dpspark, else ~/.cache/dpspark: ``scratch.user_cache``)."""
    shared = getattr(config, "embeddings_dir", None)
    path = Path(shared or os.environ.get("DPSPARK_CACHE_DIR") or user_cache())
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{cache_name(config)} {path} is a file, not a directory: remove it or name a directory "
            + ("(--embeddings-dir)" if shared else "($DPSPARK_CACHE_DIR)")
        )
    return path


def cache_name(config: Any) -> str:
    """What ``cache_dir(config)`` is, for messages."""
    return "the embeddings directory" if getattr(config, "embeddings_dir", None) else "the artefact cache"


def local_writes(config: Any) -> dict[str, Path]:
    """The directories besides the output that a run may write (the embedding store and the artefact
    cache, one directory; the local JVM's class cache): the overlap checks keep them out of the inputs."""
    writes = {cache_name(config): cache_dir(config)}
    if jvm_cache.enabled():
        writes["the JVM's class cache ($DPSPARK_JVM_CACHE_DIR)"] = jvm_cache.folder()
    return writes


def write_inside_input(what: str, path: Any, given_input: str) -> ConfigError:
    """The refusal of a directory of ``local_writes`` that lies inside an input."""
    return ConfigError(
        f"{what} {path} lies inside the input {given_input}: dpspark would write into the raw data; choose a "
        "directory outside it"
    )


@dataclass
class Prepared:
    """A release's preparation: its one setting's Grid, the run's settings and the measured recall."""

    config: PerturbConfig
    grid: Grid
    recall: float | None
    recall_queries: int

    embeddings = property(lambda self: self.grid.embeddings)
    vocab_rows = property(lambda self: self.grid.vocab_rows)
    space = property(lambda self: self.grid.space)
    index = property(lambda self: self.grid.index)
    timings = property(lambda self: self.grid.timings)

    @property
    def spec(self) -> MechanismSpec:
        return self.grid.specs[0]

    @property
    def mechanism(self) -> WordMechanism:
        return self.spec.build(self.space)

    def perturber(self) -> TextPerturber:
        c = self.config
        unit = {} if c.unit_budget is None else {"unit_budget": c.unit_budget, "allocation": c.allocation_of}
        return TextPerturber(self.mechanism, self.embeddings.word_rows, c.oov, c.oov_token, layout=c.layout, **unit)

    def write_bundle(self, directory: str | Path) -> Path:
        """Write the executor bundle (``dpspark.bundle``) of this run into ``directory``: the text policy, and a
        privacy unit's budget and allocation (``unit_budget`` null for the token unit)."""
        c = self.config
        return self.grid.write_bundle(
            directory,
            c.embeddings_dir,
            oov=c.oov,
            oov_token=c.oov_token,
            layout=c.layout,
            unit_budget=c.unit_budget,
            allocation=c.allocation,
            over_cap=c.over_cap,
        )

    def manifest_fields(self) -> dict:
        """Mechanism, embedding, vocabulary and index facts for the run manifest (no text, no key)."""
        c, facts = self.config, self.spec.facts(self.space)
        return {
            "mechanism": c.mechanism,
            "epsilon": c.epsilon,
            **self.spec.axes(),
            **self.spec.run_facts(self.space),
            "mechanism_parameters": facts["parameters"],
            "guarantee_type": facts["guarantee_type"],
            "guarantee_type_meaning": facts["guarantee_type_meaning"],
            "guarantee_unit": facts["unit"],
            "paper": facts["paper"],
            "guarantee": guarantee_text(c, facts["guarantee"]),
            "outside_guarantee": [*facts["outside_guarantee"], *outside_guarantee(c)],
            "embeddings": {
                "name": self.embeddings.name,
                "sha256": self.embeddings.sha256,
                "words": len(self.embeddings),
            },
            "dimension": self.embeddings.dim,
            "vocabulary": {
                "size": int(len(self.vocab_rows)),
                "source": vocabulary_source(c),
            },
            "nearest_neighbour": {
                "method": self.index.method,
                "params": self.index.params(),
                "device": c.device,
                "device_search": DEVICE_SEARCH,
                "recall_at_1": self.recall,
                "recall_queries": self.recall_queries,
                "recall_reference": "exact search" if self.index.method != "exact" else "is the reference",
                "meets_agreement_bar": None if self.recall is None else self.recall >= AGREEMENT_BAR,
            },
            "oov_policy": c.oov,
            "layout": c.layout,
            "keep_original": c.keep_original,
            "seeded": c.seed is not None,
        }

    def ledger_terms(self) -> dict[str, Any]:
        """What the release's ledger entry records of its mechanism (``ledger_terms``)."""
        return ledger_terms(self.spec, self.space)


def ledger_terms(spec: MechanismSpec, space: Space) -> dict[str, Any]:
    """What a release's ledger entry records of its setting (``dpspark.ledger.entry``): the guarantee type,
    the exact unit of its bound and its conversion, the terms of its cost, the parameters in force."""
    conv = spec.bound_conversion(space)  # into its type's own unit (UNITS: the embedding's Euclidean distance)
    return {
        "guarantee_type": spec.guarantee_type,
        **spec.ledger_cost_terms(),  # the terms of its cost beside ε (SanText+'s p, SynTF's draws)
        "unit": spec.bound_unit(space),
        "unit_text": spec.unit(space),
        "conversion": None if conv is None else (conv[0], UNITS[spec.guarantee_type], conv[1]),
        "parameters": {**spec.parameters(), **spec.axes()},
    }


def vocabulary_source(c: PerturbConfig) -> str:
    if c.vocab_file:
        return f"word list {c.vocab_file}"
    if c.vocab_from_corpus:
        return f"{c.vocab_size} most frequent embedded tokens of the input corpus (data-dependent, published)"
    return f"first {c.vocab_size} words of the embedding's own (frequency-ordered) vocabulary"


def outside_guarantee(c: PerturbConfig) -> list[str]:
    """The opt-ins of this run that publish something the mechanism does not protect."""
    notes = []
    if c.keep_original:
        notes.append("keep_original: the raw text of every perturbed column is written beside it as <column>_original")
    if c.oov == "keep":
        notes.append("oov keep: out-of-vocabulary tokens are published verbatim")
    if c.layout == "lines":
        notes.append("layout lines: the number of lines of every text is published")
    if c.layout == "keep":
        notes.append("layout keep: the input's whitespace (spaces, tabs, line breaks) is published verbatim")
    if c.vocab_from_corpus:
        notes.append("vocab_from_corpus: the output vocabulary is the corpus's most frequent words")
    return notes


def guarantee_text(c: PerturbConfig, mechanism: str) -> str:
    """The guarantee in words (``mechanism``: the spec's sentence for one token, with its numbers);
    it says plainly when an opt-in makes the output not private."""
    if c.keep_original:
        return (
            "NONE: THIS OUTPUT IS NOT PRIVATE. keep_original wrote the raw text beside the perturbed text "
            "(<column>_original), so the output discloses the input verbatim."
        )
    text = f"{mechanism} The token count is public. Out-of-vocabulary tokens are not covered: see the OOV policy."
    if c.layout != "single":
        text += f" Layout {c.layout!r} publishes whitespace the guarantee does not cover (see outside_guarantee)."
    if c.oov == "keep":
        text += " Policy oov=keep publishes out-of-vocabulary tokens verbatim: those tokens are NOT private."
    return text


def prepare(
    config: PerturbConfig,
    embeddings: Embeddings | None = None,
    workdir: str | Path | None = None,
    vocab_words: list[str] | None = None,
    corpus_counts: dict[str, int] | None = None,
) -> Prepared:
    """Load embeddings, choose the vocabulary, compute Σ and A, build and measure the index.

    Args:
        config: validated settings.
        embeddings: already loaded embeddings (else loaded from the config).
        workdir: where an annoy index file is written (required for ``nn="annoy"``).
        vocab_words: an explicit output vocabulary (e.g. corpus-derived), overriding the config.
        corpus_counts: the input corpus's vocabulary word counts (SanText+'s ``sensitive_from_corpus``).
    """
    grid = prepare_grid(config, [config.spec], workdir, embeddings, vocab_words, corpus_counts)
    spec, space, rows = config.spec, grid.space, grid.vocab_rows
    recall, n_q = None, 0
    if config.nn == "exact":
        recall = 1.0
    elif config.recall_queries > 0:
        # Measured on the driver with its own secure generator: noisy points of uniformly
        # chosen vocabulary words at the run's setting, compared with exact search.
        t0 = time.perf_counter()
        rng = secure_generator()
        sample = rows[rng.integers(0, len(rows), config.recall_queries)]
        noisy = spec.build(space).noisy_points(sample, rng)
        recall, n_q = recall_at_1(grid.index, space.exact, noisy), config.recall_queries
        grid.timings["recall_s"] = time.perf_counter() - t0
        if recall < AGREEMENT_BAR:
            log.warning(
                "annoy agrees with exact search on %.1f%% of noisy queries at epsilon=%g (bar: %.0f%%); "
                "outputs stay private but utility and Nw/Sw statistics are distorted: use --nn exact or raise "
                "--annoy-search-k",
                100 * recall,
                config.epsilon,
                100 * AGREEMENT_BAR,
            )
    return Prepared(config, grid, recall, n_q)
