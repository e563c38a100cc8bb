"""Exact word search on a PyTorch device: a CUDA GPU on an executor that has one, or the CPU.

``DeviceIndex`` is ``CertifiedIndex`` (dpspark.neighbours) with its scores on a torch device:
the same augmented rows, the same proven bound and the same float64 re-rank, so it answers
exactly the float64 argmin (``query``, ``query_among``) and the float64 best two
(``query_two``), ties to the lowest row. What differs is the shape of the search, made for a
device with memory to spare: one GEMM per batch of queries against every word (fp32 with TF32
off, or bf16 with float32 accumulation), then the top ``TOPK`` scores per query. The
certificate's threshold (``CertifiedIndex._least``), taken with the largest norm of the words,
rules out every word below it; when the TOPK-th score is below it, the answer is among the top
scores (one candidate: no re-rank at all), else every word of that query reaching it is re-ranked.
Only the query rows, the top scores and their rows cross between host and device, once per call:
every batch's GEMM and top-k are queued before the host reads any.

``task_device`` says where a process searches (``--device``): the GPU Spark assigned to the task
(``TaskContext.resources()["gpu"]``), else torch's current CUDA device, else None (the numpy path,
unchanged). It is cached per process: one CUDA context per Python worker.

Imports neither torch nor pyspark at import time.
"""

from __future__ import annotations

import functools
import glob
import importlib.util

import numpy as np

from dpspark.neighbours import CertifiedIndex, _down32, _follow_blas_threads, _keep_nearest, _keep_two

DEVICES = ("auto", "cpu", "cuda")
# What the manifest says of the executors' search under --device auto or cuda.
DEVICE_SEARCH = (
    "on an executor with a CUDA GPU (the one Spark assigned to the task, else torch's current device): "
    "fp32 scores with TF32 off, a proven rounding bound, and every word the bound cannot rule out re-ranked "
    "in float64, so the answer is exactly the float64 nearest word; elsewhere the CPU search"
)
TOPK = 4  # scores kept per query: the answer (or the best two) and the margin that certifies it
SCORE_BUFFER_BYTES = 2**30  # at most this much of a GPU's free memory per batch's scores (1 GiB)
CPU_BATCH = 64  # queries per GEMM on the CPU: 64 × 50,000 float32 scores (13 MB; measured 4x faster than 512)
OPEN_ROWS = 64  # uncertified queries scanned per pass (their candidates go to the float64 re-rank)


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
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(self.dtype).double().numpy()

    def matrix(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(self.dtype).to(self.device)

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
        self.open_queries = 0  # queries whose TOPK scores could not certify the answer (a full scan)

    def params(self) -> dict:
        return {"device": self.device, "scores": self._lowp.name, "top_k": TOPK, "batch": self._batch(len(self._words))}

    def _batch(self, words: int) -> int:
        """Queries per GEMM: a score matrix of at most SCORE_BUFFER_BYTES and a quarter of the free
        GPU memory (CPU_BATCH on the CPU)."""
        if self._lowp.device.type != "cuda":
            return CPU_BATCH
        free, _ = self._lowp.torch.cuda.mem_get_info(self._lowp.device)
        return int(np.clip(min(SCORE_BUFFER_BYTES, free // 4) // (4 * words), 64, 65_536))

    def _certified(self, q, words, rblock, norm, source, two: bool) -> np.ndarray:
        torch, n = self._lowp.torch, len(norm)
        rmax = float(rblock.max())
        qt, qn, c_abs, eta = self._queries(q, rmax)
        top = min(TOPK, len(words))
        # Every batch's GEMM and top scores are queued before the host reads any (one synchronisation).
        step = self._batch(len(words))
        tops = [torch.topk(torch.mm(qt[s : s + step], words.T), top, dim=1) for s in range(0, len(q), step)]
        vals = torch.cat([v for v, _ in tops]).double().cpu().numpy()
        idx = torch.cat([i for _, i in tops]).cpu().numpy()
        del tops
        normp = np.zeros(len(words))
        normp[:n] = norm  # padding rows (never candidates) have norm 0
        g = vals[:, 1] if two else vals[:, 0]  # two different words reach the second score
        r_top = normp[idx[:, :2]].max(axis=1) if two else normp[idx[:, 0]]
        a, k, alpha = self._least(g, r_top, qn, c_abs, eta, rmax)
        limit = _down32(a - k * (alpha * rmax + self._c2 * rmax * rmax / 2))
        passes = vals >= limit[:, None]
        # Open rows: the last of the top scores reaches the limit, so words beyond them may too.
        opened = np.flatnonzero(passes[:, -1] & (top < len(words)))
        shut = np.ones(len(q), dtype=bool)
        shut[opened] = False
        best, where = np.full((len(q), 2), np.inf), np.full((len(q), 2), -1, dtype=np.int64)
        keep = _keep_two if two else _keep_nearest
        if not two:
            best, where = best[:, 0], where[:, 0]
            alone = shut & (passes.sum(axis=1) == 1)  # one candidate: the answer, no re-rank
            where[alone] = idx[alone, 0]
            shut &= ~alone
        qi, j = np.nonzero(passes & shut[:, None])
        if len(qi):
            keep(q, source, qi, idx[qi, j], best, where)
            self.reranked += len(qi)
        # The rest: every word of the row that reaches the limit (scores computed again, a few rows at a time).
        self.open_queries += len(opened)
        for o in range(0, len(opened), OPEN_ROWS):
            part = opened[o : o + OPEN_ROWS]
            lim = torch.from_numpy(limit[part]).to(qt.device)
            sc = torch.mm(qt[torch.from_numpy(part).to(qt.device)], words.T)
            qi, pos = (t.cpu().numpy() for t in torch.nonzero(sc >= lim[:, None], as_tuple=True))
            keep(q, source, part[qi], pos, best, where)
            self.reranked += len(qi)
        if (where < 0).any():  # never, by the certificate: the best (two) words pass
            raise RuntimeError("certified device search lost a candidate")
        return where


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
