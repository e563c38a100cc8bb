"""The OpenBLAS kernel choice by CPU (dpspark/_blas.py), from /proc/cpuinfo fields."""

from __future__ import annotations

import pytest

from dpspark._blas import preferred_kernel

AVX512 = "fpu sse2 avx2 avx512f avx512bw avx512_bf16"


@pytest.mark.parametrize(
    ("vendor", "family", "flags", "kernel"),
    [
        ("AuthenticAMD", "25", AVX512, "Haswell"),  # Zen 4: AVX-512 as two halves
        ("AuthenticAMD", "26", AVX512, None),  # Zen 5: full width, OpenBLAS's own SkylakeX is faster
        ("AuthenticAMD", "25", "fpu sse2 avx2", None),  # Zen 3: OpenBLAS's own choice
        ("GenuineIntel", "6", AVX512 + " amx_bf16", None),  # Intel: OpenBLAS's own choice
    ],
)
def test_kernel_choice(vendor, family, flags, kernel):
    assert preferred_kernel({"vendor_id": vendor, "cpu family": family, "flags": flags}) == kernel
