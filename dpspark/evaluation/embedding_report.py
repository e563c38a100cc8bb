"""``dpspark embedding-report``: the geometry that makes ε mean what it means.

dχ-privacy bounds the ratio of output probabilities by exp(ε · d(w, w')), so the
same ε protects a word very differently depending on how far its neighbours are.
This module measures that geometry on the public embedding and vocabulary alone
(no private data, no noise):

* the distribution of the distance from a word to its k-th nearest other word, as
  the 5th/20th/50th/80th/95th percentiles for k = 1, 5, 10, 20, 50, 100
  (Feyisetan et al. 2020, "Privacy- and Utility-Preserving Textual Analysis via
  Calibrated Multivariate Perturbations", §4 and Fig. 1);
* the density heterogeneity statistics of Xu et al. 2020, "A Differentially Private
  Text Perturbation Method Using a Regularized Mahalanobis Metric", Table 5:
  d_max/d_min of the nearest-neighbour distance over the whole vocabulary and the
  mean nearest-neighbour distance of the 50 sparsest words over that of the 50
  densest (Table 5's p̄:50 needs a corpus and is not computed here);
* the eigenvalue spectrum of the scaled covariance Σ (trace d) that the regularized
  Mahalanobis mechanism uses, with the Euclidean-equivalent ε factor of Xu et al.
  Lemmas 2–3 (``dpspark.mechanisms.geometry.spectrum``: the metric's own module).

Pure numpy + matplotlib (Agg, through ``matplotlib.figure.Figure``: no pyplot state);
no pyspark.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpspark.embeddings import Embeddings, embeddings_of, select_vocabulary
from dpspark.errors import ConfigError, EmbeddingError
from dpspark.mechanisms.geometry import spectrum, spectrum_markdown, spectrum_summary
from dpspark.outputs import check_output_dir, to_json, writing_into

if TYPE_CHECKING:
    from dpspark.config import EmbeddingReportConfig

KS = (1, 5, 10, 20, 50, 100)
PERCENTILES = (5, 20, 50, 80, 95)
TOP_N = 50  # Xu et al. Table 5: the 50 sparsest / densest words
LIST_N = 10  # words listed by name at each end
FILES = ("embedding_report.json", "embedding_report.md", "embedding_report.png")

# Working memory of one block of the exact search: float32 scores plus the int64
# indices of np.argpartition (12 bytes per query × word), and the float64
# candidate differences (8 bytes per query × candidate × dimension).
_BLOCK_BYTES = 128 << 20
_MAX_QUERY_BLOCK = 1024


def _knn(vectors: np.ndarray, ks: Sequence[int], rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Distances and rows of the k-th nearest other word, for each query row and each k.

    Ranking is a blocked float32 GEMM on centred vectors with the −‖x‖²/2 column
    folded in (as dpspark.neighbours.ExactIndex does): score = q·x − ‖x‖²/2, larger is
    closer. The K = max(ks) best candidates of each query are then re-measured in
    float64 from the coordinate differences and sorted, so the distances returned are
    exact Euclidean distances (never negative: no cancellation of ‖q‖² + ‖x‖² − 2q·x)
    and non-decreasing in k. Only a near-tie at rank K within float32 rounding can
    swap the K-th candidate for an equally distant word.
    """
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise EmbeddingError(f"need a V×d matrix with at least 2 words, got shape {x.shape}")
    v, d = x.shape
    ks_arr = np.asarray(list(ks), dtype=np.int64)
    if ks_arr.ndim != 1 or len(ks_arr) == 0 or (ks_arr < 1).any():
        raise ConfigError(f"k values must be positive integers, got {list(ks)}")
    big_k = int(ks_arr.max())
    if big_k > v - 1:
        raise ConfigError(f"k = {big_k} needs at least {big_k + 1} vocabulary words, the vocabulary has {v}")
    rows = np.arange(v, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64).ravel()
    if len(rows) and (rows.min() < 0 or rows.max() >= v):
        raise ConfigError(f"query rows must lie in [0, {v}), got range [{rows.min()}, {rows.max()}]")

    centred = x - x.mean(axis=0)  # distances are translation invariant; smaller norms, smaller float32 error
    xt = np.empty((d + 1, v), dtype=np.float32)
    xt[:d] = centred.T
    xt[d] = -0.5 * (centred * centred).sum(axis=1)
    block = min(_MAX_QUERY_BLOCK, _BLOCK_BYTES // (12 * v), _BLOCK_BYTES // (8 * big_k * d))
    block = max(1, block)

    n = len(rows)
    dist = np.empty((n, len(ks_arr)), dtype=np.float64)
    idx = np.empty((n, len(ks_arr)), dtype=np.int64)
    scores = np.empty((min(block, max(n, 1)), v), dtype=np.float32)
    q = np.empty((min(block, max(n, 1)), d + 1), dtype=np.float32)
    for s in range(0, n, block):
        rb = rows[s : s + block]
        nb = len(rb)
        qb, out = q[:nb], scores[:nb]
        qb[:, :d] = centred[rb]
        qb[:, d] = 1.0
        np.matmul(qb, xt, out=out)
        out[np.arange(nb), rb] = -np.inf  # never the word itself (a duplicate vector still counts)
        if big_k == 1:
            cand = out.argmax(axis=1)[:, None]
        else:
            cand = np.argpartition(out, v - big_k, axis=1)[:, v - big_k :]
        diff = centred[rb][:, None, :] - centred[cand]
        cd = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        order = np.argsort(cd, axis=1, kind="stable")
        cd = np.take_along_axis(cd, order, axis=1)
        cand = np.take_along_axis(cand, order, axis=1)
        dist[s : s + nb] = cd[:, ks_arr - 1]
        idx[s : s + nb] = cand[:, ks_arr - 1]
    return dist, idx


def knn_distances(vectors: np.ndarray, ks: Sequence[int] = KS, rows: np.ndarray | None = None) -> np.ndarray:
    """Euclidean distance from each queried word to its k-th nearest *other* word.

    The statistic behind Feyisetan et al. (2020), Fig. 1. Exact: a blocked float32
    GEMM ranks the whole vocabulary for a block of queries at a time (memory bounded
    by a fixed budget, never V×V), and the max(ks) best candidates are re-measured in
    float64 (see ``_knn``).

    Args:
        vectors: V×d vocabulary embeddings.
        ks: neighbour ranks, each in [1, V − 1]; the word itself is excluded (rank 1
            is the nearest other word; another word with an identical vector is at 0).
        rows: rows of ``vectors`` to query (default all).

    Returns:
        float64 array of shape (len(rows), len(ks)); column j holds the k = ks[j] distances.

    Raises:
        ConfigError: a k outside [1, V − 1] or a row outside the vocabulary.
        EmbeddingError: fewer than two words.
    """
    return _knn(vectors, ks, rows)[0]


def embedding_report(
    embeddings: Embeddings,
    vocab_rows: np.ndarray,
    sample: int | None = 5000,
    seed: int = 0,
    *,
    vocab_source: str | None = None,
    **metric: Any,
) -> dict[str, Any]:
    """Compute the report: k-NN distance percentiles, Table-5 density statistics, spectrum of Σ.

    All statistics are of the public embedding restricted to the output vocabulary;
    no private data and no privacy noise are involved, so the fixed default seed only
    makes the word sample reproducible.

    Args:
        embeddings: the loaded embeddings.
        vocab_rows: rows of ``embeddings`` forming the output vocabulary (as from
            dpspark.embeddings.select_vocabulary); neighbours are searched among them only.
        sample: number of vocabulary words whose k-NN percentiles are computed (against
            the whole vocabulary), drawn uniformly without replacement by
            ``np.random.default_rng(seed).choice(V, sample, replace=False)``; None or
            ≥ V means every word. The Table-5 statistics always use every word.
        seed: seed of that draw.
        vocab_source: a phrase describing how the vocabulary was chosen, for the report.
        **metric: the regularized Mahalanobis metric's parameters for the spectrum section, as
            ``dpspark.mechanisms.geometry.spectrum`` takes them (its default when none).

    Returns:
        A JSON-ready dict with sections "embeddings", "vocabulary", "knn_percentiles"
        (Feyisetan et al. 2020, Fig. 1), "density" (Xu et al. 2020, Table 5),
        "spectrum", "noise_scale" and "timings_s".

    Raises:
        ConfigError: a metric parameter out of its range, or a sample size below 1.
        EmbeddingError: a vocabulary too small for a positive-definite Σ.
    """
    vocab_rows = np.asarray(vocab_rows, dtype=np.int64)
    vocab = embeddings.vectors[vocab_rows]
    n_words, dim = vocab.shape
    if n_words <= dim:
        raise EmbeddingError(
            f"a vocabulary of {n_words} words cannot give a positive-definite covariance in {dim} "
            f"dimensions: use at least {dim + 1} words (--vocab-size)"
        )
    if sample is not None and sample < 1:
        raise ConfigError(f"sample must be a positive number of words or None (all), got {sample}")
    words = [embeddings.words[i] for i in vocab_rows]
    ks = [k for k in KS if k <= n_words - 1]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    spectrum_section = spectrum(vocab, **metric)  # first: a metric parameter out of range fails before the search
    timings["spectrum"] = time.perf_counter() - t0
    knn_section, pct, nn_dist, nn_idx = _knn_percentiles(vocab, ks, sample, seed, timings)
    medians = pct[PERCENTILES.index(50)]
    noise = {
        "meaning": (
            "ε at which the mean noise radius of the multivariate Laplace mechanism, "
            "E‖Z‖ = d/ε, equals the median distance to the k-th nearest neighbour: much smaller ε "
            "moves a typical word past its k nearest neighbours, much larger ε rarely moves it"
        ),
        "ks": ks,
        "epsilon": [float(dim / m) if m > 0 else None for m in medians],
    }
    return {
        "title": "dpspark embedding report: the geometry that makes ε mean what it means",
        "embeddings": {
            "name": embeddings.name,
            "sha256": embeddings.sha256,
            "dim": int(dim),
            "words": len(embeddings),
        },
        "vocabulary": {"size": int(n_words), "source": vocab_source or "given rows of the embedding"},
        "knn_percentiles": knn_section,
        "density": _density(words, nn_dist, nn_idx),
        "spectrum": spectrum_section,
        "noise_scale": noise,
        "timings_s": timings,
    }


def _knn_percentiles(
    vocab: np.ndarray, ks: list[int], sample: int | None, seed: int, timings: dict[str, float]
) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray]:
    """Feyisetan et al. Fig. 1's section (the k-th neighbour's distance percentiles over the sample), its
    percentiles (len(PERCENTILES) × len(ks)), and every word's nearest-neighbour distance and row."""
    n_words = len(vocab)
    t0 = time.perf_counter()
    all_words = sample is None or sample >= n_words
    if all_words:
        sample_rows = np.arange(n_words, dtype=np.int64)
        sample_dist, sample_idx = _knn(vocab, ks, None)
        nn_dist, nn_idx = sample_dist[:, 0], sample_idx[:, 0]
        timings["knn_all_words"] = time.perf_counter() - t0
    else:
        nn_d, nn_i = _knn(vocab, (1,), None)
        nn_dist, nn_idx = nn_d[:, 0], nn_i[:, 0]
        timings["nearest_neighbour_all_words"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        sample_rows = np.sort(np.random.default_rng(seed).choice(n_words, size=int(sample), replace=False))
        sample_dist, _ = _knn(vocab, ks, sample_rows)
        timings["knn_sample"] = time.perf_counter() - t0

    pct = np.percentile(sample_dist, PERCENTILES, axis=0)  # (len(PERCENTILES), len(ks))
    rule = (
        f"all {n_words} vocabulary words"
        if all_words
        else f"{len(sample_rows)} of {n_words} vocabulary words drawn uniformly without replacement: "
        f"numpy.random.default_rng({seed}).choice({n_words}, size={len(sample_rows)}, replace=False)"
    )
    section = {
        "reference": "Feyisetan et al. 2020, Fig. 1 (distance to the k-th nearest neighbour, percentiles)",
        "ks": ks,
        "percentiles": list(PERCENTILES),
        "distances": [[float(pct[p, j]) for p in range(len(PERCENTILES))] for j in range(len(ks))],
        "sample_size": int(len(sample_rows)),
        "sample_rule": rule,
        "seed": int(seed),
        "against": f"the whole {n_words}-word vocabulary, the queried word itself excluded",
        "percentile_method": "numpy.percentile, linear interpolation",
    }
    return section, pct, nn_dist, nn_idx


def _density(words: list[str], nn_dist: np.ndarray, nn_idx: np.ndarray) -> dict[str, Any]:
    """Xu et al. Table 5: the nearest-neighbour distance of every vocabulary word, its sparsest and
    densest words."""
    n_words = len(words)
    top_n = min(TOP_N, n_words // 2)
    order = np.argsort(nn_dist, kind="stable")
    dense, sparse = order[:top_n], order[::-1][:top_n]
    d_max, d_min = float(nn_dist.max()), float(nn_dist.min())
    sparse_mean, dense_mean = float(nn_dist[sparse].mean()), float(nn_dist[dense].mean())

    def listing(ids: np.ndarray) -> list[dict[str, Any]]:
        return [{"word": words[i], "distance": float(nn_dist[i]), "nearest": words[nn_idx[i]]} for i in ids]

    return {
        "reference": "Xu et al. 2020, Table 5 (density heterogeneity of the embedding space)",
        "words": int(n_words),
        "d_max": d_max,
        "d_min": d_min,
        "d_max_over_d_min": d_max / d_min if d_min > 0 else None,
        "zero_distance_words": int((nn_dist == 0).sum()),
        "top_n": int(top_n),
        "sparse_mean": sparse_mean,
        "dense_mean": dense_mean,
        "sparse_over_dense": sparse_mean / dense_mean if dense_mean > 0 else None,
        "sparsest": listing(sparse[:LIST_N]),
        "densest": listing(dense[:LIST_N]),
        "not_computed": "p̄:50 (share of records containing the sparse words) needs a corpus",
    }


def _md_word(w: str) -> str:
    return "`" + w.replace("`", "'").replace("|", "\\|") + "`"


def _g(x: float | None, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def _markdown(r: dict[str, Any]) -> str:
    e, voc, knn, den, sp, ns = (
        r["embeddings"],
        r["vocabulary"],
        r["knn_percentiles"],
        r["density"],
        r["spectrum"],
        r["noise_scale"],
    )
    lines = [
        f"# {r['title']}",
        "",
        f"Embeddings: **{e['name']}** ({e['words']} words, d = {e['dim']}, sha256 `{e['sha256'][:16]}…`).  ",
        f"Vocabulary (the mechanism's output space): **{voc['size']} words**, {voc['source']}.",
        "",
        "No private data and no privacy noise are involved: every number below is a property of the public "
        "embedding and vocabulary.",
        "",
        "## Distance to the k-th nearest neighbour",
        "",
        f"{knn['reference']}. Queried words: {knn['sample_rule']}; distances against {knn['against']} "
        f"({knn['percentile_method']}).",
        "",
        "| k | " + " | ".join(f"p{p}" for p in knn["percentiles"]) + " |",
        "|---:|" + "---:|" * len(knn["percentiles"]),
    ]
    for k, row in zip(knn["ks"], knn["distances"]):
        lines.append(f"| {k} | " + " | ".join(f"{v:.4f}" for v in row) + " |")
    lines += [
        "",
        f"ε at which the mean noise radius d/ε of the Laplace mechanism equals the median k-NN distance "
        f"({ns['meaning'].split(': ', 1)[1]}):",
        "",
        "| k | " + " | ".join(str(k) for k in ns["ks"]) + " |",
        "|---|" + "---:|" * len(ns["ks"]),
        "| ε | " + " | ".join(_g(x, 3) for x in ns["epsilon"]) + " |",
        "",
        "## Density heterogeneity (Xu et al. 2020, Table 5)",
        "",
        f"Nearest-neighbour distance of every one of the {den['words']} vocabulary words. "
        f"d̄:{den['top_n']} is the mean over the {den['top_n']} sparsest words (largest nearest-neighbour "
        f"distance), d̄−{den['top_n']} over the {den['top_n']} densest.",
        "",
        f"| words | d_max | d_min | d_max/d_min | d̄:{den['top_n']} | d̄−{den['top_n']} "
        f"| d̄:{den['top_n']}/d̄−{den['top_n']} |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {den['words']} | {den['d_max']:.4f} | {den['d_min']:.4f} | {_g(den['d_max_over_d_min'])} "
        f"| {den['sparse_mean']:.4f} | {den['dense_mean']:.4f} | {_g(den['sparse_over_dense'])} |",
        "",
    ]
    if den["zero_distance_words"]:
        lines += [f"{den['zero_distance_words']} words share their vector with another word (distance 0).", ""]
    lines += [
        "Xu et al. report d_max/d_min = 35.28 and 8.92, d̄:50/d̄−50 = 4.47 and 5.67 (300-d GloVe, Twitter and "
        "SMSSpam vocabularies). " + den["not_computed"] + ".",
        "",
        "| sparsest word | NN distance | nearest | densest word | NN distance | nearest |",
        "|---|---:|---|---|---:|---|",
    ]
    for s, dn in zip(den["sparsest"], den["densest"]):
        lines.append(
            f"| {_md_word(s['word'])} | {s['distance']:.4f} | {_md_word(s['nearest'])} "
            f"| {_md_word(dn['word'])} | {dn['distance']:.4f} | {_md_word(dn['nearest'])} |"
        )
    lines += [
        "",
        *spectrum_markdown(sp),
        "",
        "![k-NN distance percentiles and spectrum](embedding_report.png)",
        "",
    ]
    return "\n".join(lines)


def _figure(r: dict[str, Any]):  # noqa: ANN202
    """The Figure of embedding_report.png: k-NN distance percentiles and the spectrum of Σ."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    knn, sp = r["knn_percentiles"], r["spectrum"]
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    dist = np.asarray(knn["distances"])
    for j, p in enumerate(knn["percentiles"]):
        ax1.plot(knn["ks"], dist[:, j], marker="o", label=f"{p}th percentile")
    ax1.set_xscale("log")
    ax1.set_xticks(knn["ks"], [str(k) for k in knn["ks"]])
    ax1.set_xlabel("k (log scale)")
    ax1.set_ylabel("Euclidean distance to k-th nearest neighbour")
    ax1.set_title(f"{r['embeddings']['name']}, {r['vocabulary']['size']} words ({knn['sample_size']} queried)")
    ax1.grid(True, alpha=0.3)
    ax1.legend()

    ev = np.asarray(sp["eigenvalues"])
    ax2.plot(np.arange(1, len(ev) + 1), ev, marker=".", color="C0")
    ax2.set_yscale("log")
    ax2.axhline(1.0, color="grey", linestyle=":", label="isotropic (ξ = 1)")
    ax2.axhline(sp["xi_min"], color="C3", linestyle="--", label=f"ξ_min = {sp['xi_min']:.3g}")
    ax2.set_xlabel("eigenvalue rank")
    ax2.set_ylabel("eigenvalue of Σ (trace d)")
    ax2.set_title(f"Spectrum of Σ: condition number {sp['condition_number']:.3g}")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend()
    emb, vocab = r["embeddings"], r["vocabulary"]
    fig.suptitle(f"Embedding geometry: {emb['name']} (d = {emb['dim']}), output vocabulary {vocab['size']} words")
    return fig


def _plot(r: dict[str, Any], path: Path) -> None:
    _figure(r).savefig(path, dpi=110)


def write_report(report: dict[str, Any], out_dir: str | Path, overwrite: bool = False) -> list[Path]:
    """Write ``embedding_report.json``, ``.md`` and ``.png`` into ``out_dir``.

    Args:
        report: the dict from ``embedding_report``.
        out_dir: directory to create (its parents are created as needed).
        overwrite: write into an existing directory, replacing the three report files
            (other files in it are left alone).

    Returns:
        The paths written.

    Raises:
        OutputExistsError: ``out_dir`` exists and ``overwrite`` is False, or it is a file.
        Any error of writing, after removing what this call created (the directory,
        or the files when the directory already existed).
    """
    out_dir = Path(out_dir)
    paths = [out_dir / f for f in FILES]
    with writing_into(out_dir, overwrite, "report") as written:
        written.append(paths[0])
        paths[0].write_text(to_json(report), encoding="utf-8")
        written.append(paths[1])
        paths[1].write_text(_markdown(report), encoding="utf-8")
        written.append(paths[2])
        _plot(report, paths[2])
    return paths


def run(config: EmbeddingReportConfig) -> int:
    """Execute ``dpspark embedding-report`` with its validated settings.

    ``config.sample`` 0 means every vocabulary word; ``config.quiet`` prints nothing.
    Returns 0; errors are dpspark.errors exceptions carrying their exit codes.
    """
    if not config.output:
        raise ConfigError("embedding-report needs --output DIR")
    overwrite = config.mode == "overwrite"
    sample = config.sample or None  # 0 = all words
    seed = 0 if config.seed is None else config.seed  # a statistic of public data: always reproducible
    out_dir = Path(config.output)
    check_output_dir(out_dir, overwrite, "report")  # fail before the work, not after

    emb = embeddings_of(config)
    if config.vocab_file:
        from dpspark.wordfiles import read_word_list

        rows = select_vocabulary(emb, None, read_word_list(config.vocab_file))
        source = f"word list {config.vocab_file}"
    else:
        rows = select_vocabulary(emb, config.vocab_size)
        source = f"first {len(rows)} words of the embedding's own (frequency-ordered) vocabulary"
    report = embedding_report(emb, rows, sample, seed, vocab_source=source, **config.metric)
    write_report(report, out_dir, overwrite=overwrite)
    if config.quiet:
        return 0

    den, sp = report["density"], report["spectrum"]
    print(f"embedding report: {emb.name}, {den['words']} words, d = {emb.dim}")
    print(
        f"  nearest-neighbour distance d_max/d_min = {_g(den['d_max_over_d_min'])}; "
        f"sparsest/densest {den['top_n']} = {_g(den['sparse_over_dense'])} (Xu et al. Table 5)"
    )
    print(f"  {spectrum_summary(sp)}")
    print(f"  written to {out_dir}/ ({', '.join(FILES)})")
    return 0
