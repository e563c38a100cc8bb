"""The OpenBLAS kernel choice by CPU (dpspark/_blas.py), from /proc/cpuinfo fields."""

from __future__ import annotations

import pytest

from dpspark._blas import kept_kernel_note, preferred_kernel

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

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


@pytest.mark.parametrize(
    ("vendor", "family", "given", "says"),
    [
        ("AuthenticAMD", "26", "Haswell", "OpenBLAS's own kernel choice measured faster"),  # Zen 5 pinned to AVX2
        ("AuthenticAMD", "25", "SkylakeX", "the Haswell kernels measured faster"),  # Zen 4 pinned to AVX-512
        ("AuthenticAMD", "25", "haswell", None),  # the measured choice (any case)
        ("GenuineIntel", "6", "Haswell", None),  # no measurement says which is faster
        ("AuthenticAMD", "26", None, None),  # nothing set
    ],
)
def test_a_kept_environment_kernel_is_named_where_it_is_slower(monkeypatch, vendor, family, given, says):
    if given is None:
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_CORETYPE", given)
    note = kept_kernel_note({"vendor_id": vendor, "cpu family": family, "flags": AVX512})
    if says is None:
        assert note is None
    else:
        assert says in note and f"OPENBLAS_CORETYPE={given}" in note
