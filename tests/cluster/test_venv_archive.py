"""The packed-virtualenv recipe for spark-submit (docs/clusters.md), followed step by step.

wheel (as ``make dist`` builds it) → ``python -m venv env`` → ``env/bin/pip install`` the wheel
and pandas → ``venv-pack -p env -o env.tar.gz`` → ``PYSPARK_DRIVER_PYTHON=python
PYSPARK_PYTHON=./env/bin/python spark-submit --archives env.tar.gz#env "$(python -m dpspark.jobs
perturb)" ...`` on the sample data. The executors find ``./env/bin/python`` in their working
directory, where Spark unpacks the archive: that is a cluster's executor (YARN, Kubernetes,
standalone), not ``local[*]``, whose Python workers run in the driver's directory. So the master is
``local-cluster[1,2,1024]``: one worker with a separate executor JVM on this machine, started by
spark-submit itself. Its work directory is ``$SPARK_HOME/work``; SPARK_HOME is a directory of links
to the pip-installed pyspark, so nothing is written into the virtualenv.

Kept cheap: pip skips byte-compiling, the archive is not compressed (``--compress-level 0``: it
never leaves this machine: 3 s here) and the job runs on the 500-row sample. The
virtualenv, the archive and the unpacked copies (≈ 1.4 GB) are removed after the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.runtime,
    pytest.mark.xdist_group("cluster"),
]

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "reviews.parquet"
BIN = Path(sys.executable).parent  # the test environment's scripts (venv-pack, spark-submit)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{cmd[:3]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture
def scratch(tmp_path):
    """tmp_path, with the virtualenv, the archive and its unpacked copies (≈ 1.4 GB) removed after."""
    yield tmp_path
    for big in (tmp_path / "build", tmp_path / "spark_home" / "work"):
        shutil.rmtree(big, ignore_errors=True)


def test_packed_virtualenv_recipe(scratch, check_faithful):
    tmp_path = scratch
    build, work = tmp_path / "build", tmp_path / "submit"
    work.mkdir()
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", build, REPO])  # make dist
    (wheel,) = build.glob("dpspark-*.whl")

    # The recipe: a virtualenv with the wheel (and pandas for pyspark's Arrow path; pyspark itself
    # comes from the cluster), packed with venv-pack.
    env = build / "env"
    run([sys.executable, "-m", "venv", env])
    run([env / "bin" / "pip", "install", "--quiet", "--no-compile", wheel, "pandas>=1.5.3,<3"])
    archive = build / "env.tar.gz"
    run([BIN / "venv-pack", "--quiet", "-p", env, "-o", archive, "--compress-level", "0"])

    home = tmp_path / "spark_home"  # links to the pip-installed pyspark; the worker writes home/work
    home.mkdir()
    for entry in Path(pyspark.__file__).resolve().parent.iterdir():
        (home / entry.name).symlink_to(entry)
    job = run([sys.executable, "-m", "dpspark.jobs", "perturb"]).stdout.strip()
    out = tmp_path / "reviews_private"
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "SPARK_HOME")}
    environ.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_DRIVER_PYTHON=sys.executable,  # the submitting machine's python, where dpspark is installed
        PYSPARK_PYTHON="./env/bin/python",
    )
    submit = [home / "bin" / "spark-submit", "--master", "local-cluster[1,2,1024]"]
    submit += ["--archives", f"{archive}#env", job]
    submit += ["--input", SAMPLE, "--output", out, "--columns", "text,title", "--epsilon", "10"]
    submit += ["--vocab-size", "5000", "--quiet"]
    # Run from a directory without ./env: only the executor's working directory has one.
    run(submit, cwd=work, env=environ)

    check_faithful(out)
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["status"] == "succeeded" and manifest["counts"]["rows"] == 500
    assert manifest["spark"]["master"].startswith("local-cluster")
    # The executor unpacked the archive in its working directory and ran the wheel's dpspark from it.
    (executor,) = (home / "work").glob("app-*/0")
    unpacked = executor / "env" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert (unpacked / "dpspark" / "spark" / "transform.py").is_file() and not (work / "env").exists()
