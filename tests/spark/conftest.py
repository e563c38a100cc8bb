"""Fixtures of the release tests (test_release_safety.py, test_concurrent_releases.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


@pytest.fixture()
def dataset(tmp_path) -> Path:
    d = tmp_path / "raw"
    d.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["the city is quiet", "a dog ran home", None]}), d / "p0.parquet")
    return d
