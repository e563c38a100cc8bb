"""make test's parallel run keeps each xdist group on one worker (--dist loadgroup): the Connect server, the
standalone cluster and the Spark modules' shared fixtures (tests/conftest.py) rely on it. A pytest or
pytest-xdist that silently ignores the groups (pytest-dev/pytest-xdist#1386) fails here, not as minutes lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import defaultdict


def test_a_group_runs_on_one_worker_and_a_module_fixture_group_too(tmp_path):
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.hookimpl(tryfirst=True)
            def pytest_collection_modifyitems(config, items):  # as tests/conftest.py adds its groups
                for item in items:
                    if item.name.startswith("test_added"):
                        item.add_marker(pytest.mark.xdist_group("added"))
            """
        )
    )
    (tmp_path / "test_groups.py").write_text(
        textwrap.dedent(
            """
            import os
            import time

            import pytest

            def record(kind, i):
                time.sleep(0.05)
                with open(f"{kind}-{i}", "w") as f:
                    f.write(os.environ["PYTEST_XDIST_WORKER"])

            @pytest.mark.xdist_group("marked")
            @pytest.mark.parametrize("i", range(6))
            def test_marked(i):
                record("marked", i)

            @pytest.mark.parametrize("i", range(6))
            def test_added(i):
                record("added", i)

            @pytest.mark.parametrize("i", range(6))
            def test_free(i):
                record("free", i)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = defaultdict(set)
    for f in tmp_path.iterdir():
        if "-" in f.name and not f.suffix:
            workers[f.name.split("-")[0]].add(f.read_text())
    assert len(workers["marked"]) == 1 and len(workers["added"]) == 1, dict(workers)
    assert workers["free"] <= {"gw0", "gw1"} and workers["free"]
