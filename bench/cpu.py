"""The CPU line every benchmark prints (machines differ between sessions: quote it with the figures)."""

from __future__ import annotations

import os

from dpspark._blas import cpu_fields

# A machine-wide OPENBLAS_CORETYPE (shared build machines may pin one kernel for every process)
# would make every variant run that kernel and hide dpspark's own choice (dpspark/_blas.py keeps a
# user's setting): benchmarks measure what a user's machine picks, so it is removed here, for this
# process and those it starts, and cpu_line() says so. Import this module before numpy.
IGNORED_CORETYPE = os.environ.pop("OPENBLAS_CORETYPE", None)

FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_line() -> str:
    """Model, family/model numbers, core count and the SIMD/matrix flags that change the search's speed."""
    fields = cpu_fields()
    if not fields:
        return f"unknown CPU, {os.cpu_count()} cores"
    flags = set(fields.get("flags", "").split())
    shown = " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in FLAGS)
    ignored = f"; the environment's OPENBLAS_CORETYPE={IGNORED_CORETYPE} ignored" if IGNORED_CORETYPE else ""
    return (
        f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}),"
        f" {os.cpu_count()} cores; {shown}{ignored}"
    )
