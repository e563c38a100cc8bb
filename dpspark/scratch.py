"""This process's scratch directory: bundles, index files and report files before their commit.

Created on first use under the system's temporary directory, named by the process id, and removed when
the process exits; the scratch directory of a dpspark process that died without cleaning up is removed
by the next dpspark process on that machine. Also where dpspark's caches live between processes
(``user_cache``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_PREFIX = "dpspark-scratch-"
_scratch: Path | None = None


def user_cache(*parts: str) -> Path:
    """dpspark's directory in this user's cache (the XDG base directory rule: ``$XDG_CACHE_HOME``, else
    ``~/.cache``), then ``parts``: the artefact cache (``dpspark.prepare.cache_dir``) and the JVM's class
    cache (``dpspark.jvm_cache``). Each has its own variable that overrides this."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base, "dpspark", *parts)


def _remove_stale_scratch(tmp: Path) -> None:
    """Remove scratch directories of dpspark processes on this machine that no longer run."""
    for d in tmp.glob(f"{_PREFIX}*"):
        try:
            pid = int(d.name.removeprefix(_PREFIX).split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            continue


def scratch_dir() -> Path:
    """This process's scratch directory (bundles, index files), removed at exit."""
    global _scratch
    if _scratch is None or not _scratch.exists():
        tmp = Path(tempfile.gettempdir())
        _remove_stale_scratch(tmp)
        _scratch = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch
