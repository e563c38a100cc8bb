"""Settings and report files refused before any work starts: the documented exit code, one
sentence naming the problem and the fix, nothing written, the input untouched.

Every CLI case runs ``dpspark.cli.main`` in-process; none of them needs Spark (each fails
in the configuration or in calibrate's reading of report files, before a session starts).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# --- 7. dpspark.prepare ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "imports",
    [
        "import dpspark, dpspark.prepare",
        "import dpspark.prepare; import dpspark",
        "import dpspark; dpspark.prepare; import dpspark.prepare",
        "from dpspark.prepare import Prepared; import dpspark",
        "import dpspark.spark.perturb; import dpspark",
        "import importlib; importlib.import_module('dpspark.prepare'); import dpspark",
    ],
)
def test_dpspark_prepare_stays_the_function(imports):
    check = textwrap.dedent(
        f"""
        {imports}
        import sys, types
        assert callable(dpspark.prepare) and not isinstance(dpspark.prepare, types.ModuleType), dpspark.prepare
        assert dpspark.prepare is sys.modules["dpspark.prepare"].prepare
        from dpspark import prepare
        assert prepare is dpspark.prepare
        """
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_dpspark_prepare_in_this_process():
    import importlib
    import types

    import dpspark

    importlib.import_module("dpspark.prepare")
    assert callable(dpspark.prepare) and not isinstance(dpspark.prepare, types.ModuleType)
