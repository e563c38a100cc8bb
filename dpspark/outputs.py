"""Strict JSON for every output, and the report directories of the commands that run without Spark.

The Spark commands' reports (privacy-stats, privacy-risk, evaluate-utility, calibrate) go through
``dpspark.spark.reports.ReportOutput``: the session's file system, a hidden stage, the output's
lock, the manifest last. ``check_output_dir`` and ``writing_into`` serve embedding-report and
evaluate-vectors, which read only public data, run on the driver alone and must work where pyspark
is not installed: they write local paths with ``pathlib``.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from dpspark.errors import OutputExistsError


def jsonable(obj: Any) -> Any:
    """numpy values to plain Python; non-finite floats to None (strict JSON); float keys as %g."""
    if isinstance(obj, dict):
        return {f"{k:g}" if isinstance(k, float) else str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    return obj


def to_json(obj: Any) -> str:
    return json.dumps(jsonable(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def check_output_dir(out_dir: str | Path, overwrite: bool, what: str) -> None:
    """Refuse a file, or an existing directory unless ``overwrite`` (then ``what`` files are replaced)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputExistsError(f"output {out_dir} exists and is not a directory; choose another --output")
    if out_dir.exists() and not overwrite:
        raise OutputExistsError(
            f"output directory {out_dir} already exists; choose a new --output or pass --mode overwrite "
            f"(which replaces the {what} files in it)"
        )


@contextmanager
def writing_into(out_dir: str | Path, overwrite: bool, what: str) -> Iterator[list[Path]]:
    """Create ``out_dir`` (checked by ``check_output_dir``) and yield a list to which the
    caller appends each path *before* writing it. On any failure, removes what this call
    created: the directory tree, or the listed files when the directory existed."""
    out_dir = Path(out_dir)
    check_output_dir(out_dir, overwrite, what)
    created_root = None
    if not out_dir.exists():
        created_root = out_dir
        while not created_root.parent.exists():
            created_root = created_root.parent
    written: list[Path] = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        yield written
    except BaseException:
        if created_root is not None:
            shutil.rmtree(created_root, ignore_errors=True)
        else:
            for p in written:
                p.unlink(missing_ok=True)
        raise
