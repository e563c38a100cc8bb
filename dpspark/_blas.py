"""Pick OpenBLAS's fastest float32 GEMM kernels before numpy loads them.

Exact nearest-neighbour search is one large float32 GEMM, the cost of the whole
system. On AMD Zen 4 (family 0x19 with AVX-512) AVX-512 instructions execute as
two 256-bit halves, and OpenBLAS's AVX2 ("Haswell") kernels run the search ≈ 20%
faster than the AVX-512 ("SkylakeX") kernels it picks by itself (bench/bench_perturb.py
measures both side by side). The choice only changes speed: both compute the same
products up to float rounding order. Nothing is changed when the user set
OPENBLAS_CORETYPE or DPSPARK_KEEP_BLAS=1, when numpy is already loaded, or on any
other CPU.
"""

from __future__ import annotations

import os
import sys


def _is_zen4() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="ignore") as f:
            info = f.read(8192)
    except OSError:
        return False
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in info.splitlines()) if k.strip()
    )
    return (
        fields.get("vendor_id") == "AuthenticAMD"
        and fields.get("cpu family") == "25"
        and "avx512f" in fields.get("flags", "").split()
    )


def prefer_fast_kernels() -> None:
    if "numpy" in sys.modules or "OPENBLAS_CORETYPE" in os.environ or os.environ.get("DPSPARK_KEEP_BLAS") == "1":
        return
    if _is_zen4():
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def one_thread() -> None:
    """Limit this process's BLAS to one thread (a Spark task slot is one core).

    dpspark's own sessions already set OPENBLAS_NUM_THREADS=1 (and OMP/MKL) for their Python
    workers; this also covers sessions started elsewhere (a notebook's). threadpoolctl is
    optional: versions before 3 (Databricks 14.3/15.4 ship 2.2.0) print a ctypes error in
    every worker and the limit does not take effect, so they are left alone.
    """
    try:
        import threadpoolctl
    except ImportError:
        return
    if int(threadpoolctl.__version__.split(".")[0]) >= 3:
        threadpoolctl.threadpool_limits(1)
