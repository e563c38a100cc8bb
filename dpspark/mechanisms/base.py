"""What every word mechanism shares: the public space it draws on, its interface, its spec.

A mechanism maps embedding rows (any word with a vector) to positions in the output
vocabulary W, independently per token. Three pieces, one module per mechanism:

- a **spec** (``MechanismSpec``, a pydantic model): the mechanism's name and parameters, ε
  included, validated once; it builds the sampler over a ``Space`` and states the guarantee
  (``facts``). The registry (``dpspark.mechanisms.REGISTRY``) maps names to specs; the CLI
  flags, YAML, notebooks and the Python API all read it.
- a **sampler** (``WordMechanism``): ``sample`` (one output per token), ``sample_copies``
  (K independent outputs per word, the privacy statistics' runs) and ``distribution`` (the
  exact P(u | w) where a closed form exists, else None).
- a **space** (``Space``): the public inputs prepared once on the driver and rebuilt once
  per executor process: the embedding, the output vocabulary, the nearest-neighbour index,
  the matrices A of the Mahalanobis noise, exact float64 distance rows.

Nothing here sees raw text: inputs are embedding rows, outputs vocabulary positions.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpspark import cachekey, params
from dpspark._pydantic import BaseModel, Field, validator
from dpspark.mechanisms.geometry import diameter
from dpspark.mechanisms.labels import axis_order, series_label, show
from dpspark.mechanisms.sampling import sample_noise, token_epsilons
from dpspark.npy import load_npy

log = logging.getLogger("dpspark")

# The guarantee types of the field (mechanisms.md): ε of different types is not one scale.
GUARANTEE_TYPES = {
    "metric": "metric DP (ε·d): Pr[M(x)=y] ≤ exp(ε·d(x,x'))·Pr[M(x')=y], adding over the tokens of a text",
    "umldp": "utility-optimized metric DP: the metric bound plus ln(1/p), for outputs in the protected set only",
    "group": "ε-DP between words of the same output group; words of different groups are distinguishable",
    "pure": "pure ε-DP per token: exp(ε) for every pair of words",
    "document": "ε-DP per released word against replacing the whole document; n released words compose to n·ε",
    "none": "no guarantee dpspark can state: the published claim is unverified and the exact output law contradicts it",
    "rank": "metric DP in list positions: exp(ε·|i(x) − i(x')|), i a word's position in a public 1-D list of W "
    "(with several lists, the largest such distance over them)",
}

# The unit of ε of each guarantee type (``MechanismSpec.unit``; a mechanism whose metric is not the
# Euclidean distance of the embedding says its own).
UNITS = {
    "metric": "ε per unit of Euclidean distance between the words' vectors",
    "umldp": "ε per unit of Euclidean distance between the words' vectors, plus ln(1/p) per token",
    "group": "ε between two words of one output group (no bound across groups)",
    "pure": "ε between any two words",
    "document": "ε per released word; a document of n released words spends n·ε",
    "none": "none: no bound dpspark can state",
    "rank": "ε per list position between the words",
}

# Distance rows (words × V float64) are computed in blocks of at most this many entries (128 MB).
DISTANCE_ENTRIES = 2**24
# ... and, inside a block, tile by tile of columns: a tile of about this many bytes stays in the
# core's cache through the GEMM, the elementwise steps and a caller's own (``distance_rows(each=)``).
DISTANCE_TILE_BYTES = 2**20
# Tiles start at multiples of this many words (the exponential sampler's chunks, summed per tile).
TILE_ALIGN = 256
# ``WordMechanism.at`` keeps the samplers of at most this many other ε (a batch of documents under the
# ``scale`` allocation has one ε per distinct document length).
AT_KEPT = 256


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _load_verified(path: Path, source: str, key: bytes) -> tuple[np.ndarray | None, str | None]:
    """The cached artefact at ``path`` when the keyed digest beside it matches its bytes: (array, None);
    else (None, why it is not used, one line; None when there is no file at all) and the caller computes it
    again. A digest without the key (``cachekey.SCHEME``) is never trusted: anyone could have written it."""
    if not path.exists():
        return None, None
    try:
        stored = _digest_path(path).read_text(encoding="ascii").strip()
        if not stored.startswith(cachekey.SCHEME):
            return None, "carries no keyed digest (an older dpspark's, or forged): not trusted"
        if not hmac.compare_digest(stored, cachekey.keyed_digest(key, source, path)):
            return None, "does not match its digest (changed, damaged or forged)"
        return load_npy(path, mmap_mode="r", allow_pickle=False), None
    except (OSError, ValueError, UnicodeDecodeError):
        return None, "does not match its digest (changed, damaged or forged)"


def _failed_check(check: Callable[[np.ndarray], str | None] | None, value: np.ndarray) -> str | None:
    """What is wrong with a loaded artefact by its mechanism's own invariants (``check``), or None."""
    if check is None:
        return None
    try:
        return check(value)
    except (ValueError, IndexError, TypeError) as exc:  # a malformed array can break the check itself
        return f"not a well-formed array ({exc})"


class Space:
    """The public inputs of every mechanism of one run (no text, no key).

    Args:
        vectors: every embedded word (V_in×d); mechanism inputs are rows of it.
        vocab_rows: rows of ``vectors`` forming the output vocabulary W (outputs are positions in it).
        index: the configured nearest-neighbour index over ``vectors[vocab_rows]`` (None: exact).
        artefacts: the public arrays the mechanisms prepared on the driver (``artefact``), shipped in a
            bundle by name.
        cache_dir: where ``artefact(..., store=True)`` keeps costly arrays between runs, content-addressed
            (None: not kept).
        words: the embedding's words (``dpspark.embeddings.WordRows``), for mechanisms whose public
            inputs name words (a word list of SanText+, CusText+'s stop words); None where unknown.
        embedding_id: the embedding's identity (its sha256, ``dpspark.embeddings.Embeddings.sha256``),
            which the ledger's units name (``MechanismSpec.bound_unit``); None: the digest of ``vectors``.
    """

    def __init__(
        self,
        vectors: np.ndarray,
        vocab_rows: np.ndarray,
        index: Any = None,
        artefacts: dict[str, np.ndarray] | None = None,
        cache_dir: str | Path | None = None,
        words: Any = None,
        embedding_id: str | None = None,
    ) -> None:
        self.vectors = vectors
        self.vocab_rows = np.asarray(vocab_rows, dtype=np.int64)
        self._index = index
        self._memo: dict[str, Any] = {}
        self._artefacts = dict(artefacts or {})
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.words = words
        self._embedding_id = embedding_id

    @cached_property
    def embedding_digest(self) -> str:
        """The embedding's identity, 16 hex digits (public: the manifest names its sha256): the Euclidean
        metric of a mechanism's bound is the embedding's own, so a ledger unit names it."""
        if self._embedding_id is None:
            self._embedding_id = hashlib.sha256(np.ascontiguousarray(self.vectors).tobytes()).hexdigest()
        return self._embedding_id[:16]

    @cached_property
    def vocabulary_digest(self) -> str:
        """φ(W)'s identity, 16 hex digits: what a metric or a grouping computed from the vocabulary's vectors
        (Σ of the regularized Mahalanobis norm, CusText's groups, 1-Diffractor's lists) is a function of."""
        return hashlib.sha256(np.ascontiguousarray(self.vectors[self.vocab_rows]).tobytes()).hexdigest()[:16]

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def size(self) -> int:
        """V = |W|."""
        return len(self.vocab_rows)

    @property
    def index(self) -> Any:
        """The configured nearest-neighbour index (exact unless the run chose annoy)."""
        return self._index if self._index is not None else self.exact

    @cached_property
    def exact(self) -> Any:
        """An exact index over W (the configured one when it is exact)."""
        if self._index is not None and self._index.method == "exact":
            return self._index
        from dpspark.device import exact_index

        return exact_index(self.vectors[self.vocab_rows])

    @cached_property
    def vocab64(self) -> np.ndarray:
        """φ(W) in float64 (V×d), for exact distances."""
        return np.ascontiguousarray(self.vectors[self.vocab_rows], dtype=np.float64)

    @cached_property
    def _norms2(self) -> np.ndarray:
        return np.einsum("ij,ij->i", self.vocab64, self.vocab64)

    def word_positions(self, words: list[str]) -> np.ndarray:
        """The positions in W of the given words that are in W (sorted, distinct)."""
        if self.words is None:
            raise ValueError("this space was built without the embedding's words")
        rows = self.words.rows(list(words))
        pos, found = self.positions(rows[rows >= 0])
        return np.unique(pos[found])

    @cached_property
    def _sorted_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """W's embedding rows in ascending order, and where each stands in W (sorted once)."""
        order = np.argsort(self.vocab_rows, kind="stable")
        return order, self.vocab_rows[order]

    def positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in W, whether the row is in W) of each embedding row."""
        rows = np.asarray(rows, dtype=np.int64)
        order, sorted_rows = self._sorted_rows
        at = np.minimum(np.searchsorted(sorted_rows, rows), len(sorted_rows) - 1)
        found = sorted_rows[at] == rows
        return np.where(found, order[at], -1), found

    @property
    def block(self) -> int:
        """Rows of ``distance_rows`` per call: DISTANCE_ENTRIES float64 entries at most."""
        return max(1, min(1024, DISTANCE_ENTRIES // max(1, self.size)))

    def distance_rows(self, rows: np.ndarray, each: Callable[[np.ndarray, int], None] | None = None) -> np.ndarray:
        """d(w, u) for every row w and every u in W: an (n × V) float64 array.

        Float64 GEMMs, ‖x‖² + ‖u‖² − 2x·u clamped at 0 (absolute error ≈ 1e-13 on GloVe's
        scale); a word's distance to itself is exactly 0. Callers pass at most ``block`` rows
        at a time. The columns go tile by tile (``DISTANCE_TILE_BYTES``, starting at multiples
        of ``TILE_ALIGN``) so that each tile is finished while it is in cache; ``each(tile,
        start)``, if given, is then called on it (the result's columns from ``start``, before
        they are stored) and may transform it in place: the result holds what it leaves.
        """
        rows = np.asarray(rows, dtype=np.int64)
        x = np.asarray(self.vectors[rows], dtype=np.float64)
        xx = np.einsum("ij,ij->i", x, x)[:, None]
        x = -2.0 * x  # (−2x)·u is exactly −2(x·u): scaling by a power of two rounds nothing
        pos, found = self.positions(rows)
        out = np.empty((len(rows), self.size), dtype=np.float64)
        width = max(TILE_ALIGN, DISTANCE_TILE_BYTES // (8 * max(1, len(rows))) // TILE_ALIGN * TILE_ALIGN)
        scratch = np.empty((len(rows), min(width, self.size)), dtype=np.float64)
        for start in range(0, self.size, width):
            cols = slice(start, min(start + width, self.size))
            # A contiguous tile: every step below is one flat loop over it, in cache.
            tile = scratch if cols.stop - start == scratch.shape[1] else np.empty((len(rows), cols.stop - start))
            np.matmul(x, self.vocab64[cols].T, out=tile)
            tile += xx
            tile += self._norms2[None, cols]
            np.maximum(tile, 0.0, out=tile)
            np.sqrt(tile, out=tile)
            own = np.flatnonzero(found & (pos >= start) & (pos < cols.stop))
            tile[own, pos[own] - start] = 0.0
            if each is not None:
                each(tile, start)
            out[:, cols] = tile
        return out

    def distances(self, row: int, positions: np.ndarray) -> np.ndarray:
        """d(w, u) for one embedding row w and the words at ``positions`` of W, computed directly in float64."""
        diff = self.vocab64[positions] - np.asarray(self.vectors[row], dtype=np.float64)
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    def artefact(
        self,
        name: str,
        compute: Callable[[], np.ndarray],
        store: bool = False,
        check: Callable[[np.ndarray], str | None] | None = None,
    ) -> np.ndarray:
        """A public array a mechanism needs besides the embedding (a word grouping, a neighbour table),
        by a name that its parameters determine: computed on the driver on first use (``compute``) and
        shipped in the bundle, where executors find it.

        ``store``: also keep it in ``cache_dir`` between runs, under the sha256 of the name and of
        φ(W) (content-addressed: another vocabulary or embedding never finds it) and the id of this
        user's cache key (``dpspark.cachekey``), written to a temporary name and renamed, as the shared
        embedding store is. A stored array's name carries its algorithm's version (``.../v1``): a changed
        algorithm takes a new name, never an old array. Beside it, an HMAC-SHA256 under the user's key of
        what it was computed from and of its own bytes (``.sha256``) is checked on load, and then
        ``check`` (the mechanism's own invariants: a reason the array cannot be what its name says, or
        None): a changed, damaged, forged or unreadable file is computed again (and said, in one line).
        The cache dir may be a volume others write; the key is not on it.
        """
        if name in self._artefacts:
            return self._artefacts[name]
        key = path = source = None
        if store and self.cache_dir is not None:
            key = cachekey.cache_key(self.cache_dir)
        if key is not None:
            digest = hashlib.sha256(name.encode())
            digest.update(np.ascontiguousarray(self.vectors[self.vocab_rows]).tobytes())
            source = digest.hexdigest()  # what the array is computed from
            path = self.cache_dir / f"dpspark-artefact-{source}-{cachekey.key_id(key)}.npy"
            kept, why = _load_verified(path, source, key)
            if kept is not None:
                why = _failed_check(check, kept)
                if why is None:
                    self._artefacts[name] = kept
                    return kept
                why = f"fails its check: {why}"
            legacy = self.cache_dir / f"dpspark-artefact-{source}.npy"  # the name before the cache key
            if why is None and legacy.exists():
                log.warning(
                    "the cached %s in %s has an older dpspark's unkeyed digest, not trusted: computed again",
                    name,
                    legacy,
                )
            elif why is not None:
                log.warning("the cached %s in %s %s: computed again", name, path, why)
        value = np.asarray(compute())
        if path is not None:
            self._keep(name, value, path, source, key)
        self._artefacts[name] = value
        return value

    def _keep(self, name: str, value: np.ndarray, path: Path, source: str, key: bytes) -> None:
        """Write ``value`` and its keyed digest to the cache (the digest first: a reader never finds the new
        array beside an old digest that it would then trust)."""
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                np.save(f, value)
            _write_atomic(_digest_path(path), cachekey.keyed_digest(key, source, tmp).encode())
            os.replace(tmp, path)
        except OSError as exc:  # a read-only cache only costs the next run the same work
            log.warning("cannot keep %s in %s (%s): it will be computed again next run", name, self.cache_dir, exc)
            tmp.unlink(missing_ok=True)

    def artefacts(self, names: list[str]) -> dict[str, np.ndarray]:
        """The named arrays (already computed by ``artefact``), to ship in a bundle."""
        return {n: self._artefacts[n] for n in names}

    def memo(self, name: str, compute: Callable[[], Any]) -> Any:
        """A driver-only object a mechanism derives from W (a covariance and its factors), by a name its
        parameters determine: computed on first use and kept for this Space; never shipped (a mechanism
        ships what executors need as an ``artefact``)."""
        if name not in self._memo:
            self._memo[name] = compute()
        return self._memo[name]


def corpus_counts(space: Space, counts: dict[str, int]) -> np.ndarray:
    """Each word of W's count in a corpus (V int64; 0 for a word the corpus lacks), from token → count: the
    driver-only artefact a spec requests with ``MechanismSpec.corpus_counts_artefact``."""
    out = np.zeros(space.size, dtype=np.int64)
    words = list(counts)
    rows = space.words.rows(words)
    pos, found = space.positions(rows[rows >= 0])
    values = np.array([counts[w] for w in words], dtype=np.int64)[rows >= 0]
    np.add.at(out, pos[found], values[found])
    return out


class WordMechanism(ABC):
    """A word mechanism over a Space: embedding rows in, vocabulary positions out.

    Subclasses implement ``sample``; ``sample_copies`` defaults to sampling each word K
    times, and ``distribution`` to None (no closed form).
    """

    a: np.ndarray | None = None  # the noise matrix A of a mechanism that adds noise to vectors (None: A = I)

    def __init__(self, space: Space, spec: MechanismSpec) -> None:
        self.space = space
        self.spec = spec

    @property
    def epsilon(self) -> float:
        return self.spec.epsilon

    @property
    def vectors(self) -> np.ndarray:
        return self.space.vectors

    @property
    def vocab_rows(self) -> np.ndarray:
        return self.space.vocab_rows

    @property
    def dim(self) -> int:
        return self.space.dim

    @abstractmethod
    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One independent output per token: positions in W (int64, same length as ``rows``)."""

    def perturb_rows(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``sample`` under the name the text layer calls."""
        return self.sample(rows, rng)

    def at(self, epsilon: float) -> WordMechanism:
        """This mechanism at another ε, over the same space and with the spec's other parameters: the sampler
        ``sample_at`` draws a token of that ε with. Built once per ε and kept (at most AT_KEPT of them)."""
        epsilon = float(epsilon)
        if epsilon == self.epsilon:
            return self
        kept: dict[float, WordMechanism] = self.__dict__.setdefault("_at", {})
        if epsilon not in kept:
            if len(kept) >= AT_KEPT:
                kept.clear()
            kept[epsilon] = self.spec.copy(update={"epsilon": params.epsilon_value(epsilon)}).build(self.space)
        return kept[epsilon]

    def sample_at(self, rows: np.ndarray, epsilons: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One output per token, token i drawn at its own εᵢ (a privacy unit's allocation, ``dpspark.units``)
        with the law ``sample`` has at εᵢ: positions in W, as ``sample``.

        By default the tokens of each distinct ε go to ``at(ε).sample`` together (the distinct ε in
        ascending order); with one ε for all, that is ``sample`` at it. A mechanism that draws its noise at
        an ε per token in one pass (the noise family) overrides it.
        """
        rows = np.asarray(rows, dtype=np.int64)
        values, which = np.unique(token_epsilons(rows, epsilons), return_inverse=True)
        if len(values) == 1:
            return self.at(values[0]).sample(rows, rng)
        out = np.empty(rows.size, dtype=np.int64)
        for k, epsilon in enumerate(values):
            chosen = which == k
            out[chosen] = self.at(epsilon).sample(rows[chosen], rng)
        return out

    def sample_copies(self, rows: np.ndarray, copies: int, rng: np.random.Generator) -> np.ndarray:
        """``copies`` independent outputs per row: an (n × copies) array of positions in W."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.sample(np.repeat(rows, copies), rng).reshape(len(rows), copies)

    def noisy_points(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Points near the vocabulary words ``rows`` that an approximate index must answer as exact search
        does (the recall probe; driver only, never released): noisy vectors at this ε, with the mechanism's
        own noise matrix where it has one (``a``: the regularized Mahalanobis noise), else the Laplace
        mechanism's noise."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.vectors[rows] + sample_noise(len(rows), self.dim, self.epsilon, rng, self.a)

    def distribution(self, rows: np.ndarray) -> np.ndarray | None:
        """The exact P(u | w) for each row (n × V float64, rows sum to 1), or None without a closed form."""
        return None

    def verbatim_share(self, rows: np.ndarray) -> float:
        """The share of tokens of ``rows`` (each alike) that this mechanism releases as themselves by design,
        whatever ε (SanText+'s non-sensitive words, with probability 1 − p): 0 by default."""
        return 0.0

    def verbatim_advice(self) -> tuple[str, str]:
        """Why ``verbatim_share`` is what it is, and what to change: two clauses of perturb's warning when the
        share is high (for the mechanisms whose share is not 0)."""
        return "", ""

    @property
    def closed_form(self) -> bool:
        """Whether ``distribution`` gives exact likelihoods (the mechanism overrides it): the exact
        attacker and the exact E[Nw], E[Sw] apply; otherwise they are fitted or sampled."""
        return type(self).distribution is not WordMechanism.distribution

    def log_distribution(self, rows: np.ndarray) -> np.ndarray | None:
        """ln P(u | w) (n × V float64; −inf where impossible), or None without a closed form. A mechanism
        whose probabilities underflow float64 while positive (1-Diffractor's far list positions)
        computes it directly."""
        p = self.distribution(rows)
        if p is None:
            return None
        with np.errstate(divide="ignore"):
            return np.log(p)


class MechanismSpec(BaseModel):
    """A mechanism's name and parameters, validated once (ε included).

    Subclasses set ``name`` (a Literal default), ``paper``, ``guarantee_type`` and implement
    ``build`` and ``guarantee``; ``axes`` lists the parameters a grid varies besides ε.
    """

    name: str
    epsilon: float = Field(description="ε")

    paper: ClassVar[str] = ""
    guarantee_type: ClassVar[str] = "metric"
    summary: ClassVar[str] = ""
    # A text-level mechanism releases each text as a whole (SynTF's synthetic document: its drawn words),
    # not one output token per input token, and may add columns beside each perturbed column COL, as
    # COL_<suffix> (suffix → type, ``dpspark.text.COLUMN_TYPES``). ``dpspark.text.TextPerturber.perturb``
    # runs either level; the Spark jobs only add the columns named here.
    text_level: ClassVar[bool] = False
    extra_columns: ClassVar[dict[str, str]] = {}
    # The ε grid a grid command (compare, evaluate-utility, privacy-risk, privacy-stats) measures without
    # --epsilons: the first grid of README.md's "Choosing a mechanism and ε", which brackets the mechanism's
    # window on the shipped sample from word salad to a near copy (docs/choosing-epsilon.md has the figures;
    # tests/unit/test_default_grids.py checks both tables against it). ε is not one scale across mechanisms.
    default_epsilons: ClassVar[tuple[float, ...]] = ()

    class Config:
        extra = "forbid"
        allow_population_by_field_name = True
        frozen = True

    @validator("epsilon", pre=True, allow_reuse=True)
    def _epsilon(cls, v: Any) -> float:
        return params.epsilon_value(v)

    # Old spellings of parameters → today's name: accepted for one release with a RenamedParameterWarning.
    renamed: ClassVar[dict[str, str]] = {}

    @classmethod
    def parameter_names(cls) -> list[str]:
        """The mechanism's own parameters (by alias), besides name and ε."""
        return [f.alias for n, f in cls.__fields__.items() if n not in ("name", "epsilon")]

    def build(self, space: Space) -> WordMechanism:
        raise NotImplementedError

    def axes(self) -> dict[str, Any]:
        """The mechanism's own grid axes besides ε (column name → value, a number or a word), e.g.
        {"lambda": 1.0}: one column each in every table (``axis_names``)."""
        return {}

    @classmethod
    def axis_names(cls) -> list[str]:
        """The columns ``axes`` may fill: the parameters by default."""
        return cls.parameter_names()

    def prepare(self, space: Space) -> list[str]:
        """Driver-side: compute what executors need (``Space.artefact``) and check the setting
        against the space (a ConfigError for a setting this vocabulary cannot take); returns the names of
        the artefacts to ship."""
        return []

    @classmethod
    def grid_facts(cls, specs: list[MechanismSpec], space: Space) -> dict[str, Any]:
        """What the grid commands' manifests state of a whole grid (``specs``, any mechanisms) that only this
        family knows (the noise family: the λ grid, each λ's Euclidean factor and ξ_min); asked once per family
        (``dpspark.mechanisms.grid_facts``), whether or not the grid holds one of its settings. None by default."""
        return {}

    def ledger_cost_terms(self) -> dict[str, Any]:
        """The terms of a release's cost beside ε that the ledger records (``dpspark.ledger.cost``): SanText+'s
        p (UMLDP), SynTF's draws (a document's bound); None for a term a mechanism does not have."""
        return {"p": None, "draws": None}

    def corpus_counts_artefact(self) -> str | None:
        """The name under which this setting wants the input corpus's count of each word of W in the driver's
        Space (``corpus_counts``; never shipped), which perturb and release then count before ``prepare``;
        None (the default): it needs no count of the private corpus."""
        return None

    def guarantee(self, space: Space) -> str:
        """The guarantee of one token in words, with this setting's numbers."""
        raise NotImplementedError

    def unit(self, space: Space) -> str:
        """What one unit of this setting's ε bounds (``UNITS`` by guarantee type), with its numbers where
        the metric is not the Euclidean distance of the embedding."""
        return UNITS[self.guarantee_type]

    def unit_diameter(self, space: Space) -> float | None:
        """D: the largest distance between two words of W in the metric of this setting's guarantee, by which a
        privacy unit's bound multiplies the unit's budget (``dpspark.units.unit_bound``); None for a guarantee
        type without a metric (pure, group, document, none). By default the Euclidean diameter of φ(W)
        (``metric`` and ``umldp``); a mechanism whose metric is another says its own."""
        if self.guarantee_type not in ("metric", "umldp"):
            return None
        return space.memo("diameter/euclidean", lambda: diameter(space.vocab64))

    def bound_unit(self, space: Space) -> dict[str, Any]:
        """The exact unit of this setting's ε, as the ledger keys it (``dpspark.ledger``): the ε of two
        releases add up only when their units are equal, since ε per unit of one metric is not ε per unit
        of another. Public values only: the metric, its parameters, and the digests of what defines it.

        By guarantee type: the embedding's Euclidean distance (``metric``); any two tokens (``pure``) or
        documents (``document``); no bound (``none``). A mechanism whose metric or grouping has parameters
        says its own; any other falls back on the setting itself (never summed with another setting)."""
        if self.guarantee_type == "metric":
            return {"distance": "euclidean", "embedding": space.embedding_digest}
        if self.guarantee_type in ("pure", "document"):
            return {"neighbours": "any two tokens" if self.guarantee_type == "pure" else "any two documents"}
        if self.guarantee_type == "none":
            return {"bound": "none"}
        return {"setting": self.name, **self.axes(), "vocabulary": space.vocabulary_digest}

    def bound_conversion(self, space: Space) -> tuple[dict[str, Any], float] | None:
        """Another unit this setting's ε converts to, and the factor: ε per unit of ``bound_unit`` bounds
        factor·ε per unit of the other (the regularized Mahalanobis norm's Euclidean bound); None: none."""
        return None

    def check_vocabulary(self, size: int) -> None:
        """Refuse (ConfigError) a setting that a vocabulary of ``size`` words cannot take; called on the
        settings before Spark starts (``vocab_size``) and again on the vocabulary itself (``prepare``)."""

    def outside(self) -> list[str]:
        """What this mechanism releases outside its guarantee by design (beside the run's opt-ins)."""
        return []

    @classmethod
    def label_of(cls, axes: dict[str, Any]) -> str:
        """The label of this mechanism's setting with ``axes`` (ε left out; None: an axis it does not have), as
        tables and legends name it (``dpspark.mechanisms.labels.series_label``): ``mahalanobis λ=0.5``,
        ``tem β=0.001``. Also the label of a result row read back (``dpspark.mechanisms.series_label``)."""
        return series_label(cls.__fields__["name"].default, axes)

    def series_label(self) -> str:
        """The setting without its ε (``label_of`` its axes, in the axis columns' order ``axis_order``):
        ``laplace``, ``mahalanobis λ=0.5``, ``tem β=0.001``; one line of a frontier."""
        own = self.axes()
        return self.label_of({a: own.get(a) for a in axis_order(self.axis_names())})

    def label(self) -> str:
        """A short name of the setting for tables and plots, e.g. ``tem ε=5 beta=0.001``."""
        extra = " ".join(f"{k}={show(v)}" for k, v in self.axes().items())
        return f"{self.name} ε={self.epsilon:g}" + (f" {extra}" if extra else "")

    def parameters(self) -> dict[str, Any]:
        """The settings as given (by alias, e.g. ``lambda``; defaults left out): what a bundle ships and
        ``dpspark.mechanisms.parse`` rebuilds the same spec from."""
        return {"name": self.name, "epsilon": self.epsilon, **self.dict(by_alias=True, exclude_unset=True)}

    def run_facts(self, space: Space) -> dict[str, Any]:
        """Figures a release manifest states beside ε that only this family has (the noise family: the
        Euclidean bound of Xu et al.'s Lemma 2 and ξ_min); none by default."""
        return {}

    def facts(self, space: Space) -> dict[str, Any]:
        """What a manifest, a report and a notebook say about this setting."""
        return {
            "mechanism": self.name,
            "parameters": {**self.parameters(), **self.axes()},  # the values in force, defaults included
            "guarantee_type": self.guarantee_type,
            "guarantee_type_meaning": GUARANTEE_TYPES[self.guarantee_type],
            "unit": self.unit(space),
            "guarantee": self.guarantee(space),
            "outside_guarantee": self.outside(),
            "paper": self.paper,
        }
