"""Every benchmark in its quick mode, so that none rots: `make bench-smoke` (and `make test`) run it.

Runs each ``*.py`` of DIR (default: this script's folder) that has an ``if __name__ ==
"__main__":`` block as ``python SCRIPT --smoke``, one at a time, each in a fresh interpreter with
one BLAS thread and a time limit, and prints one line per script with its seconds and PASS or
FAIL. Exits 1 when any fails, after the tail of each failing script's stderr. A script whose
source never mentions ``--smoke`` fails without running: every benchmark must have a quick mode.

    python bench/smoke.py [DIR] [--timeout 300]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN = re.compile(r"""^if __name__ == ["']__main__["']:""", re.M)


def scripts(directory: Path) -> list[Path]:
    """The scripts of ``directory`` with a ``__main__`` block, this one left out, by name."""
    me = Path(__file__).resolve()
    return [p for p in sorted(directory.glob("*.py")) if p.resolve() != me and MAIN.search(p.read_text("utf-8"))]


def run(script: Path, timeout: float) -> tuple[bool, float, str]:
    """(passed, seconds, why or the stderr tail) of ``python script --smoke``, in a scratch folder."""
    if "--smoke" not in script.read_text("utf-8"):
        return False, 0.0, f"{script.name} has no --smoke flag: give it a quick mode of a few seconds"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="dpspark-bench-smoke-") as cwd:
        t0 = time.perf_counter()
        # Its own session, so that a timeout ends what it started too (the JVMs of Spark runs).
        p = subprocess.Popen(
            [sys.executable, str(script), "--smoke"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
            return False, time.perf_counter() - t0, f"over the {timeout:g} s limit\n{err[-3000:]}"
        seconds = time.perf_counter() - t0
    return p.returncode == 0, seconds, f"exit {p.returncode}\n{err[-3000:]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", nargs="?", type=Path, default=HERE, help="the benchmarks (default: bench/)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one script may take (300)")
    a = ap.parse_args(argv)
    found = scripts(a.directory)
    if not found:
        print(f"bench smoke: no script with a __main__ block in {a.directory}", file=sys.stderr)
        return 1
    failed: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    for script in found:
        ok, seconds, why = run(script, a.timeout)
        print(f"  {script.name:<28} {seconds:6.1f} s  {'PASS' if ok else 'FAIL'}", flush=True)
        if not ok:
            failed.append((script.name, why))
    for name, why in failed:
        print(f"== {name} failed: {why}", file=sys.stderr)
    total = time.perf_counter() - t0
    print(f"bench smoke: {len(found) - len(failed)} of {len(found)} passed in {total:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
