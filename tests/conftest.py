"""Shared fixtures: the default embeddings (loaded once) and one local[2] Spark session."""

from __future__ import annotations

import os
import sys

import pytest

from dpspark.embeddings import load_default


@pytest.fixture(scope="session")
def glove():
    return load_default()


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from dpspark.spark.session import get_session

    session = get_session("local[2]", batch_rows=1000)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
