"""Pick OpenBLAS's fastest float32 GEMM kernels before numpy loads them.

Exact nearest-neighbour search is one large float32 GEMM, the cost of the whole
system, and OpenBLAS's own kernel choice is not the fastest one on AMD Zen 4
(bench/bench_perturb.py and bench/bench_search.py measure the choices side by side):

- Zen 4 (family 0x19 with AVX-512) executes AVX-512 as two 256-bit halves: the AVX2
  ("Haswell") kernels run the search ≈ 1.3× faster than the AVX-512 ("SkylakeX") ones
  OpenBLAS picks by itself.
- Zen 5 (family 0x1A) has full-width AVX-512: OpenBLAS's own choice there, SkylakeX, runs
  the search 1.45× faster than Haswell (EPYC, 50,000 and 400,000 words, one core), so it
  is kept.

The choice only changes speed: both compute the same products up to float rounding
order. Nothing is changed when the user set OPENBLAS_CORETYPE or DPSPARK_KEEP_BLAS=1,
when numpy is already loaded, or on any other CPU. Where an OPENBLAS_CORETYPE from the
environment overrides the kernel measured fastest on a measured CPU, the commands say so in
their log (``kept_kernel_note``): a machine-wide setting is otherwise followed silently.
"""

from __future__ import annotations

import os
import sys
from itertools import takewhile

# (vendor, family) of CPUs with AVX-512 -> the OpenBLAS core type measured fastest there
# (None: OpenBLAS's own choice was).
_KERNELS: dict[tuple[str, str], str | None] = {("AuthenticAMD", "25"): "Haswell", ("AuthenticAMD", "26"): None}


def cpu_fields() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (vendor_id, cpu family, model, flags, ...);
    empty where there is none. Imports nothing: callable before numpy loads."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="ignore") as f:
            lines = list(takewhile(str.strip, f))  # up to the blank line that ends the first processor
    except OSError:
        return {}
    return dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines) if k.strip())


def _measured(fields: dict[str, str] | None) -> tuple[str, str] | None:
    """This CPU's (vendor, family) where ``_KERNELS`` holds a measurement for it, else None."""
    fields = cpu_fields() if fields is None else fields
    key = (fields.get("vendor_id", ""), fields.get("cpu family", ""))
    return key if key in _KERNELS and "avx512f" in fields.get("flags", "").split() else None


def preferred_kernel(fields: dict[str, str] | None = None) -> str | None:
    """The OpenBLAS core type dpspark sets on this CPU, or None to keep OpenBLAS's own choice."""
    key = _measured(fields)
    return _KERNELS[key] if key else None


def kept_kernel_note(fields: dict[str, str] | None = None) -> str | None:
    """A log line when the environment's OPENBLAS_CORETYPE overrides the kernel measured fastest
    on this CPU (call it before ``prefer_fast_kernels``); None where it does not, or where no
    measurement says which is faster."""
    given = os.environ.get("OPENBLAS_CORETYPE")
    key = _measured(fields)
    if not given or not key:
        return None
    best = _KERNELS[key]
    if best is not None and given.lower() == best.lower():
        return None
    faster = f"the {best} kernels measured faster" if best else "OpenBLAS's own kernel choice measured faster"
    return (
        f"OPENBLAS_CORETYPE={given} from the environment is kept; on this CPU ({key[0]} family {key[1]}) "
        f"{faster} for the nearest-word search: "
        + (f"set OPENBLAS_CORETYPE={best}" if best else "unset it")
        + " for faster runs"
    )


def prefer_fast_kernels() -> None:
    if "numpy" in sys.modules or "OPENBLAS_CORETYPE" in os.environ or os.environ.get("DPSPARK_KEEP_BLAS") == "1":
        return
    kernel = preferred_kernel()
    if kernel:
        os.environ["OPENBLAS_CORETYPE"] = kernel


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
