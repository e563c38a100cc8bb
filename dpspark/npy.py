"""``load_npy``: numpy's ``np.load`` under one lock per process.

numpy parses every .npy header with ``ast.literal_eval``, and CPython 3.11's AST constructor keeps its depth count
per interpreter, not per thread (python/cpython#106905): two threads parsing at once can fail with ``SystemError:
AST constructor recursion depth mismatch``. Two releases started together in threads of one process (a notebook's,
or ``tests/spark/test_concurrent_releases.py``) load their arrays at the same moment; dpspark's loads take turns.
A memory-mapped load reads the header only, so the lock is held for microseconds.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_LOCK = threading.Lock()


def load_npy(source: Any, **kwargs: Any) -> Any:
    """``np.load(source, **kwargs)``, one thread of this process at a time."""
    with _LOCK:
        return np.load(source, **kwargs)
