"""The CPU line every benchmark prints (machines differ between sessions: quote it with the figures)."""

from __future__ import annotations

import os

FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_line() -> str:
    """Model, family/model numbers, core count and the SIMD/matrix flags that change the search's speed."""
    try:
        info = open("/proc/cpuinfo", encoding="ascii", errors="ignore").read().split("\n\n")[0]
    except OSError:
        return f"unknown CPU, {os.cpu_count()} cores"
    fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in info.splitlines()))
    flags = set(fields.get("flags", "").split())
    shown = " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in FLAGS)
    return (
        f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}),"
        f" {os.cpu_count()} cores; {shown}"
    )
