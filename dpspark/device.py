"""Exact word search on a PyTorch device: a CUDA GPU on an executor that has one, or the CPU.

``DeviceIndex`` is ``CertifiedIndex`` (dpspark.neighbours) with its scores on a torch device:
the same augmented rows, the same proven bound and the same float64 re-rank, so it answers
exactly the float64 argmin (``query``, ``query_among``) and the float64 best two
(``query_two``), ties to the lowest row. What differs is the shape of the search, made for a
device with memory to spare: one GEMM per batch of queries against every word (fp32 with TF32
off, or bf16 with float32 accumulation), then one pass over the batch's score matrix for
each word block's largest score: the top ``TOPK`` scores lie in the TOPK blocks with the largest
maxima, which are gathered and ranked (no top-k over the whole row). The certificate's limit
(``CertifiedIndex._least``, taken with the largest norm of the words) certifies the answer when
the next score stays below it (best two: the third below the second's limit, the second below
the best's): no other word can be the float64 answer, no re-rank. Otherwise the top scores that
reach the limit are re-ranked in float64, and when the TOPK-th reaches it too (an "open" query,
rare in fp32) every word of the row that reaches it. The host prepares the queries (float32
rows, through pinned memory) while the device searches the previous ones, and waits once per
call: it reads back the TOPK words per query and which of them reach the limit.

``task_device`` says where a process searches (``--device``): the GPU Spark assigned to the task
(``TaskContext.resources()["gpu"]``), else torch's current CUDA device, else None (the numpy path,
unchanged). It is cached per process: one CUDA context per Python worker. ``exact_index`` builds the
fastest exact index of a process from it: ``DeviceIndex`` where it names a device, else one of
``dpspark.neighbours``' CPU indexes.

Imports neither torch nor pyspark at import time.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os

import numpy as np

from dpspark.neighbours import (
    LOWP_WORD_BLOCK,
    AdaptiveIndex,
    CertifiedIndex,
    ExactIndex,
    _bf16_cpu,
    _follow_blas_threads,
    _keep_nearest,
    _keep_two,
)

DEVICES = ("auto", "cpu", "cuda")
# What the manifest says of the executors' search under --device auto or cuda.
DEVICE_SEARCH = (
    "on an executor with a CUDA GPU (the one Spark assigned to the task, else torch's current device): "
    "fp32 scores with TF32 off, a proven rounding bound, and every word the bound cannot rule out re-ranked "
    "in float64, so the answer is exactly the float64 nearest word; elsewhere the CPU search"
)
TOPK = 4  # words ranked per query: the answer (or the best two) and the margin that certifies it
SCORE_BUFFER_BYTES = 2**32  # at most this much of a GPU's free memory per batch's scores (4 GiB)
DEVICE_QUERY_BLOCK = 1 << 20  # queries per search call (the host waits for the device once per call)
PREP_ROWS = 16_384  # queries made on the host and copied at a time (H100, 50,000 words: 2.42 M tokens/s; 65,536: 2.0 M)
CPU_BATCH = 64  # queries per GEMM on the CPU: 64 × 50,000 float32 scores (13 MB; measured 4x faster than 512)


class _TorchScores:
    """CertifiedIndex's low-precision backend on one torch device: fp32 GEMMs (TF32 off) or bf16
    GEMMs with float32 accumulation (reduced-precision reductions off)."""

    def __init__(self, device: str, scores: str = "fp32") -> None:
        import torch

        if scores not in ("fp32", "bf16"):
            raise ValueError(f"scores must be fp32 or bf16, not {scores!r}")
        self.torch = torch
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        else:
            _follow_blas_threads(torch)
        self.dtype = torch.float32 if scores == "fp32" else torch.bfloat16
        self.bits = 24 if scores == "fp32" else 8
        self.k_multiple = 4 if scores == "fp32" else 8  # aligned rows for the device's GEMM
        self.name = f"{scores} ({self.device.type}), certified, float64 re-rank"

    def round(self, a: np.ndarray) -> np.ndarray:
        if self.dtype == self.torch.float32:  # round to nearest, as torch's conversion, without a copy back
            return np.asarray(a, dtype=np.float64).astype(np.float32)
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(self.dtype).double().numpy()

    def matrix(self, a: np.ndarray):
        return self.put(a, self.dtype)

    def put(self, a: np.ndarray, dtype):
        """``a`` on the device as ``dtype``; on CUDA through pinned memory, without waiting for the device."""
        t = self.torch.from_numpy(np.ascontiguousarray(a)).to(dtype)
        return t.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else t

    def cat(self, parts: list):
        return self.torch.cat(parts)

    def take(self, m, rows: np.ndarray):
        return m[self.torch.from_numpy(np.asarray(rows, dtype=np.int64)).to(self.device)]

    def scores(self, qt, words) -> np.ndarray:
        return self.torch.mm(qt, words.T).double().cpu().numpy()


class DeviceIndex(CertifiedIndex):
    """Exactly the float64 nearest word (and best two) of each query, scored on a torch device.

    Args:
        vectors: the output vocabulary's vectors (V×d), kept on the host for the float64 re-rank.
        device: a torch device ("cpu", "cuda", "cuda:1").
        scores: "fp32" (default: few candidates, almost never a re-rank) or "bf16".
    """

    def __init__(self, vectors: np.ndarray, device: str = "cpu", scores: str = "fp32") -> None:
        super().__init__(vectors, _TorchScores(device, scores))
        self.device = str(self._lowp.device)
        self.open_queries = 0  # queries the certificate left open (every word reaching the limit re-ranked)

    def params(self) -> dict:
        return {"device": self.device, "scores": self._lowp.name, "top_k": TOPK, "batch": self._batch(len(self._words))}

    def _batch(self, words: int) -> int:
        """Queries per GEMM: a score matrix of at most SCORE_BUFFER_BYTES and an eighth of the free
        GPU memory (the count's boolean matrix beside it; CPU_BATCH on the CPU)."""
        if self._lowp.device.type != "cuda":
            return CPU_BATCH
        free, _ = self._lowp.torch.cuda.mem_get_info(self._lowp.device)
        return int(np.clip(min(SCORE_BUFFER_BYTES, free // 8) // (4 * words), 64, 65_536))

    def _query_block(self) -> int:
        return DEVICE_QUERY_BLOCK

    def _certified(self, q, words, rblock, norm, source, two: bool) -> np.ndarray:
        torch, lowp = self._lowp.torch, self._lowp
        rmax, nq, step = float(rblock.max()), len(q), self._batch(len(words))
        normp = np.zeros(len(words))
        normp[: len(norm)] = norm  # padding rows (never candidates) have norm 0
        normp = lowp.put(normp, torch.float64)
        top = torch.empty((nq, TOPK), dtype=torch.int64, device=lowp.device)
        passes = torch.empty((nq, TOPK), dtype=torch.bool, device=lowp.device)
        alone = torch.empty(nq, dtype=torch.bool, device=lowp.device)
        limit = torch.empty(nq, dtype=torch.float32, device=lowp.device)
        qts = []
        # No synchronisation until every batch is queued: the host prepares the next queries while
        # the device searches.
        for p in range(0, nq, PREP_ROWS):
            qt, qn, c_abs, eta = self._queries(q[p : p + PREP_ROWS], rmax)
            qn, c_abs, eta = lowp.put(np.stack([qn, c_abs, eta]), torch.float64)
            qts.append(qt)
            for s in range(0, len(qt), step):
                b = slice(s, s + step)
                rows = slice(p + s, p + s + len(qt[b]))
                top[rows], passes[rows], alone[rows], limit[rows] = self._batch_search(
                    torch.mm(qt[b], words.T), normp, qn[b], c_abs[b], eta[b], rmax, two
                )
        idx, passes, alone = top.cpu().numpy(), passes.cpu().numpy(), alone.cpu().numpy()
        where = idx[:, :2].copy() if two else idx[:, 0].copy()
        # Open rows: the last of the top scores reaches the limit, so words beyond them may too.
        opened = np.flatnonzero(passes[:, -1])
        self.open_queries += len(opened)
        best, near = np.full((nq, 2), np.inf), np.full((nq, 2), -1, dtype=np.int64)
        keep = _keep_two if two else _keep_nearest
        if not two:
            best, near = best[:, 0], near[:, 0]
        # Neither certified nor open: the top scores that reach the limit, re-ranked in float64.
        rest = ~alone & ~passes[:, -1]
        qi, j = np.nonzero(passes & rest[:, None])
        if len(qi):
            keep(q, source, qi, idx[qi, j], best, near)
            self.reranked += len(qi)
        if len(opened):  # every word of the row that reaches the limit (scores computed again)
            qt = torch.cat(qts)
            for o in range(0, len(opened), step):
                part = opened[o : o + step]
                pt = torch.from_numpy(part).to(lowp.device)
                sc = torch.mm(qt[pt], words.T)
                qi, pos = (t.cpu().numpy() for t in torch.nonzero(sc >= limit[pt, None], as_tuple=True))
                keep(q, source, part[qi], pos, best, near)
                self.reranked += len(qi)
        rest[opened] = True
        if (near[rest] < 0).any():  # never, by the certificate: the best (two) words pass
            raise RuntimeError("certified device search lost a candidate")
        where[rest] = near[rest]
        return where

    def _batch_search(self, sc, normp, qn, c_abs, eta, rmax: float, two: bool):
        """One batch's top TOPK words by score from its scores ``sc`` (B × whole word blocks), which of
        them reach the certificate's limit, whether that certifies the answer, and the limit.

        One pass over ``sc``: each block's largest score; the top TOPK scores lie in the TOPK blocks
        with the largest maxima, whose scores are gathered and ranked (no top-k over the whole row).
        Certified: the second score stays below the best's limit (the answer is the only word reaching
        it); for the best two, the third stays below the second's limit and the second below the
        best's: no other word can be the float64 answer. Ties are never certified."""
        torch, wb = self._lowp.torch, LOWP_WORD_BLOCK
        blocks = sc.view(len(sc), -1, wb)
        top_blocks = blocks.amax(dim=2).topk(min(TOPK, blocks.shape[1]), dim=1).indices
        gathered = blocks.gather(1, top_blocks[:, :, None].expand(-1, -1, wb)).flatten(1)
        vals, pos = gathered.topk(TOPK, dim=1)
        words = top_blocks.gather(1, pos // wb) * wb + pos % wb
        first = self._limit(vals[:, 0], normp[words[:, 0]], qn, c_abs, eta, rmax)
        if not two:
            passes = vals >= first[:, None]
            return words, passes, ~passes[:, 1], first
        # The second largest score of two different words, reached by words of norm at most r_top.
        r_top = torch.maximum(normp[words[:, 0]], normp[words[:, 1]])
        lim = self._limit(vals[:, 1], r_top, qn, c_abs, eta, rmax)
        passes = vals >= lim[:, None]
        return words, passes, ~passes[:, 2] & (vals[:, 1] < first), lim

    def _limit(self, g, r_top, qn, c_abs, eta, rmax: float):
        """The float32 score that every word which may be the answer reaches (CertifiedIndex._least with
        the largest norm of the words), rounded down to float32."""
        torch = self._lowp.torch
        a, k, alpha = self._least(g.double(), r_top, qn, c_abs, eta, rmax)
        v = a - k * (alpha * rmax + self._c2 * rmax * rmax / 2)
        v32 = v.float()
        return torch.where(v32.double() > v, torch.nextafter(v32, torch.full_like(v32, -torch.inf)), v32)


def _spark_gpu() -> int | None:
    """The first GPU address Spark assigned to the running task, or None (no task, no GPU, no pyspark)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    ctx = TaskContext.get()
    gpu = ctx.resources().get("gpu") if ctx is not None else None
    return int(gpu.addresses[0]) if gpu is not None and gpu.addresses else None


@functools.cache
def task_device(choice: str = "auto") -> str | None:
    """The torch device this process's exact search runs on for ``--device choice``, or None for
    the numpy path: "cpu" always None; "auto" the GPU Spark assigned to the task, else torch's
    current CUDA device where a GPU and torch are present, else None; "cuda" the same, and a
    RuntimeError where there is no GPU. Cached: one device (one CUDA context) per process. On a
    machine without NVIDIA devices, "auto" never imports torch."""
    if choice not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {choice!r}")
    if choice == "cpu":
        return None
    has_torch = importlib.util.find_spec("torch") is not None
    gpu = _spark_gpu()
    if gpu is None and has_torch and (choice == "cuda" or glob.glob("/dev/nvidia[0-9]*")):
        import torch

        gpu = torch.cuda.current_device() if torch.cuda.is_available() else None
    if gpu is not None and has_torch:
        return f"cuda:{gpu}"
    if choice == "cuda":
        raise RuntimeError("--device cuda: this process has no CUDA GPU with PyTorch; use --device auto or cpu")
    return None


def exact_index(vectors: np.ndarray, device: str = "auto") -> ExactIndex | CertifiedIndex | AdaptiveIndex:
    """The fastest exact index here: ``DeviceIndex`` (certified fp32 on a GPU) where
    ``device`` ("auto", "cpu" or "cuda", ``--device``) gives this process one
    (``task_device``); else AdaptiveIndex (float32, then certified bf16 where it is
    measured faster once a process has done enough work) on CPUs with bf16 GEMMs and PyTorch
    installed, else ExactIndex.

    DPSPARK_EXACT=fp32 forces ExactIndex (float32 GEMM), DPSPARK_EXACT=bf16 forces
    CertifiedIndex from the first query (an error where it cannot run); the default is "auto".
    """
    where = task_device(device)
    if where is not None:
        return DeviceIndex(vectors, where)
    choice = os.environ.get("DPSPARK_EXACT", "auto").lower()
    if choice not in ("auto", "fp32", "bf16"):
        raise ValueError(f"DPSPARK_EXACT must be auto, fp32 or bf16, not {choice!r}")
    if choice == "bf16":
        return CertifiedIndex(vectors)
    if choice == "auto" and _bf16_cpu():
        return AdaptiveIndex(vectors)
    return ExactIndex(vectors)
