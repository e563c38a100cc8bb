"""Driver-side preparation, once per run: embeddings → vocabulary → Σ, A → index → bundle.

``Prepared.write_bundle`` writes what executors need in the one bundle format
(``dpspark.bundle``); ``dpspark.spark.resources`` ships it and every Python worker
loads it once into its bounded cache, then builds its perturber with
``dpspark.bundle.perturber_from``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpspark.bundle import save_bundle
from dpspark.config import PerturbConfig
from dpspark.embeddings import Embeddings, select_vocabulary
from dpspark.errors import ConfigError, EmbeddingError
from dpspark.mechanisms import MechanismSpec, Space, WordMechanism, sample_noise
from dpspark.neighbours import AnnoyIndex, NeighbourIndex, exact_index, recall_at_1
from dpspark.rng import secure_generator
from dpspark.text import TextPerturber

log = logging.getLogger("dpspark")

AGREEMENT_BAR = 0.99


@dataclass
class Prepared:
    """Everything the driver computed, plus the figures the manifest reports."""

    config: PerturbConfig
    embeddings: Embeddings
    vocab_rows: np.ndarray
    spec: MechanismSpec
    space: Space
    index: NeighbourIndex
    recall: float | None
    recall_queries: int
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def mechanism(self) -> WordMechanism:
        return self.spec.build(self.space)

    def perturber(self) -> TextPerturber:
        c = self.config
        return TextPerturber(self.mechanism, self.embeddings.word_rows, c.oov, c.oov_token, layout=c.layout)

    def write_bundle(self, directory: str | Path) -> Path:
        """Write the executor bundle (``dpspark.bundle``) of this run into ``directory``."""
        settings = {
            "mechanism": self.spec.parameters(),
            "oov": self.config.oov,
            "oov_token": self.config.oov_token,
            "layout": self.config.layout,
            "nn": self.index.method,
            "nn_params": self.index.params(),
        }
        annoy = self.index.path if isinstance(self.index, AnnoyIndex) else None
        return save_bundle(
            directory,
            self.embeddings,
            settings,
            self.vocab_rows,
            {lam: self.space.a(lam) for lam in self.spec.lambdas()},
            annoy,
            self.config.embeddings_dir,
        )

    def manifest_fields(self) -> dict:
        """Mechanism, embedding, vocabulary and index facts for the run manifest (no text, no key)."""
        c, facts = self.config, self.spec.facts(self.space)
        noise = {}
        if "lambda" in self.spec.axes():  # the noise family: Lemma 2's Euclidean bound
            g = self.space.geometry(self.spec.axes()["lambda"])
            noise = {"euclidean_epsilon_bound": g.euclidean_epsilon(c.epsilon), "xi_min": g.xi_min}
        return {
            "mechanism": c.mechanism,
            "epsilon": c.epsilon,
            **self.spec.axes(),
            **noise,
            "mechanism_parameters": facts["parameters"],
            "guarantee_type": facts["guarantee_type"],
            "guarantee_type_meaning": facts["guarantee_type_meaning"],
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


def read_word_list(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"vocabulary file {path} not found (one word per line)")
    words = [w.strip() for w in p.read_text(encoding="utf-8").splitlines() if w.strip()]
    if not words:
        raise ConfigError(f"vocabulary file {path} is empty")
    return list(dict.fromkeys(words))


def prepare(
    config: PerturbConfig,
    embeddings: Embeddings | None = None,
    workdir: str | Path | None = None,
    vocab_words: list[str] | None = None,
) -> Prepared:
    """Load embeddings, choose the vocabulary, compute Σ and A, build and measure the index.

    Args:
        config: validated settings.
        embeddings: already loaded embeddings (else loaded from the config).
        workdir: where an annoy index file is written (required for ``nn="annoy"``).
        vocab_words: an explicit output vocabulary (e.g. corpus-derived), overriding the config.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    emb = embeddings or config.load_embeddings()
    timings["load_embeddings_s"] = time.perf_counter() - t0

    if vocab_words is None and config.vocab_file:
        vocab_words = read_word_list(config.vocab_file)
    rows = select_vocabulary(emb, config.vocab_size, vocab_words)
    if len(rows) <= emb.dim:
        raise EmbeddingError(
            f"a vocabulary of {len(rows)} words cannot give a positive-definite covariance in {emb.dim} "
            f"dimensions: use at least {emb.dim + 1} words (--vocab-size)"
        )
    spec = config.spec
    t0 = time.perf_counter()
    exact = exact_index(emb.vectors[rows])
    index: NeighbourIndex = exact
    if config.nn == "annoy":
        if workdir is None:
            raise ValueError("an annoy index needs a working directory for its file")
        Path(workdir).mkdir(parents=True, exist_ok=True)
        index = AnnoyIndex.build(
            emb.vectors[rows], str(Path(workdir) / "index.ann"), config.annoy_trees, config.annoy_search_k
        )
    timings["index_build_s"] = time.perf_counter() - t0
    space = Space(emb.vectors, rows, index)
    t0 = time.perf_counter()
    noise_lambda = {spec.axes()["lambda"]} if "lambda" in spec.axes() else set()
    for lam in sorted(spec.lambdas() | noise_lambda):
        space.geometry(lam)  # Σ and A once, on the driver (also refuses a degenerate Σ early)
    timings["covariance_s"] = time.perf_counter() - t0

    recall, n_q = None, 0
    if config.nn == "exact":
        recall = 1.0
    elif config.recall_queries > 0:
        # Measured on the driver with its own secure generator: noisy points of uniformly
        # chosen vocabulary words at the run's ε and λ, compared with exact search.
        t0 = time.perf_counter()
        rng = secure_generator()
        sample = rows[rng.integers(0, len(rows), config.recall_queries)]
        noisy = emb.vectors[sample] + sample_noise(
            len(sample), emb.dim, config.epsilon, rng, space.a(spec.axes().get("lambda", 0.0))
        )
        recall, n_q = recall_at_1(index, exact, noisy), config.recall_queries
        timings["recall_s"] = time.perf_counter() - t0
        if recall < AGREEMENT_BAR:
            log.warning(
                "annoy agrees with exact search on %.1f%% of noisy queries at epsilon=%g (bar: %.0f%%); "
                "outputs stay private but utility and Nw/Sw statistics are distorted: use --nn exact or raise "
                "--annoy-search-k",
                100 * recall,
                config.epsilon,
                100 * AGREEMENT_BAR,
            )
    return Prepared(config, emb, rows, spec, space, index, recall, n_q, timings)


@dataclass
class Grid:
    """The driver's preparation for a grid of settings (privacy-stats, privacy-risk): the embedding,
    the vocabulary, the Space (Σ and A for every λ the grid needs) and the search index, once."""

    embeddings: Embeddings
    vocab_rows: np.ndarray
    specs: list[MechanismSpec]
    space: Space
    annoy: AnnoyIndex | None

    def settings(self) -> dict:
        """The bundle's settings: the list of specs (the items name them by position) and the index."""
        return {
            "settings": [spec.parameters() for spec in self.specs],
            "nn": "annoy" if self.annoy else "exact",
            "nn_params": self.annoy.params() if self.annoy else {},
        }

    def write_bundle(self, directory: str | Path, embeddings_dir: str | None = None) -> Path:
        lams = sorted({lam for spec in self.specs for lam in spec.lambdas()})
        annoy = self.annoy.path if self.annoy else None
        a_by = {lam: self.space.a(lam) for lam in lams}
        return save_bundle(directory, self.embeddings, self.settings(), self.vocab_rows, a_by, annoy, embeddings_dir)

    def mechanisms(self) -> list[WordMechanism]:
        return [spec.build(self.space) for spec in self.specs]

    def facts(self) -> list[dict]:
        """Each setting's facts (``MechanismSpec.facts``), for the manifest."""
        return [spec.facts(self.space) for spec in self.specs]


def prepare_grid(config: Any, specs: list[MechanismSpec], workdir: str | Path) -> Grid:
    """Load the embedding, choose the vocabulary, compute Σ and A for every λ of ``specs`` and build
    the index: what every grid command needs, prepared one way."""
    emb = config.load_embeddings()
    vocab_words = read_word_list(config.vocab_file) if config.vocab_file else None
    rows = select_vocabulary(emb, config.vocab_size, vocab_words)
    annoy = None
    if config.nn == "annoy":
        Path(workdir).mkdir(parents=True, exist_ok=True)
        annoy = AnnoyIndex.build(
            emb.vectors[rows], str(Path(workdir) / "index.ann"), config.annoy_trees, config.annoy_search_k
        )
    space = Space(emb.vectors, rows, annoy)
    for lam in sorted({spec.axes()["lambda"] for spec in specs if "lambda" in spec.axes()}):
        space.geometry(lam)  # refuses a degenerate Σ before any Spark work
    return Grid(emb, rows, list(specs), space, annoy)
