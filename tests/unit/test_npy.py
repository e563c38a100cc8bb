"""dpspark.npy.load_npy: numpy's loads take turns within a process (CPython 3.11's AST constructor, which numpy's
.npy header parser uses, is not thread-safe: python/cpython#106905)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from dpspark import npy

pytestmark = pytest.mark.runtime


def test_loads_from_threads_never_overlap_and_return_the_arrays(tmp_path, monkeypatch):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(12).reshape(3, 4))
    inside, most = 0, 0
    count = threading.Lock()
    real = np.load

    def slow_load(source, **kwargs):  # noqa: ANN001, ANN202 - np.load's own signature
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)  # long enough for the other threads to arrive
        try:
            return real(source, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(npy.np, "load", slow_load)
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(npy.load_npy(path, mmap_mode="r"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1 and len(results) == 6
    assert all(np.array_equal(r, np.arange(12).reshape(3, 4)) for r in results)
