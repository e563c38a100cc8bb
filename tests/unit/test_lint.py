"""The package's lint, C901 included (pyproject.toml: no function of more than 15 branches outside the
numeric kernels exempted by name), runs in make test: a change that breaks it does not land."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    pytest.importorskip("ruff")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True)


def test_ruff_check_passes():
    out = ruff("check", "--output-format", "concise", "dpspark", "tests", "bench", "examples", "notebooks")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_complexity_gate_catches_a_branchy_function(tmp_path):
    """The same configuration refuses a function of 16 branches in the package (the gate is live)."""
    (tmp_path / "dpspark").mkdir()
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(16))
    (tmp_path / "dpspark" / "branchy.py").write_text(f"def f(x):\n{body}    return -1\n")
    out = ruff("check", "--config", str(ROOT / "pyproject.toml"), "--output-format", "concise", "dpspark", cwd=tmp_path)
    assert out.returncode == 1
    assert "C901 `f` is too complex (17 > 15)" in out.stdout
