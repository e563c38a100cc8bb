"""The "Choosing ε" table of the docs (docs/choosing-epsilon.md) is what examples/choosing_epsilon.py
prints with the seed the page names: every row is rerun here with that seed and compared."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest

from dpspark.rng import SeededRunWarning

pytestmark = [pytest.mark.readme, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| ([\w-]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$")
# Seeded, the rerun draws the same noise: what may still differ is a nearest-neighbour tie that another
# CPU's float arithmetic breaks the other way. The tolerances allow a few such tokens (a name row is
# 0.4 points of the mean of 3 runs over ~80 rows) and stay well under the run-to-run spread of fresh
# randomness (measured: names at vickrey ε = 12 spread over 55.9–64.4 in six runs), so a table left
# from an older mechanism, or drawn without the seed, fails.
SEED = 2026
TOLERANCE = (0.3, 1.3, 0.002)


def table(text: str) -> dict[tuple[str, float], tuple[float, float, float]]:
    rows = [ROW.match(line) for line in text.splitlines()]
    return {(m[1], float(m[2])): (float(m[3]), float(m[4]), float(m[5])) for m in rows if m}


def test_the_readme_table_is_what_the_script_prints():
    page = (REPO / "docs" / "choosing-epsilon.md").read_text(encoding="utf-8")
    section = page.split("# Choosing ε", 1)[1].split("\n## ", 1)[0]
    printed = table(section)
    assert len(printed) >= 40  # every mechanism of the script's grid, 5 to 7 ε each
    assert f"choosing_epsilon.py --seed {SEED}" in section
    spec = importlib.util.spec_from_file_location("choosing_epsilon", REPO / "examples" / "choosing_epsilon.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.warns(SeededRunWarning):
        script.main(["--runs", "3", "--seed", str(SEED)])
    fresh = table(out.getvalue())
    assert set(fresh) == set(printed)
    for key, values in printed.items():
        for name, a, b, tol in zip(("unchanged", "names", "cs"), values, fresh[key], TOLERANCE):
            assert abs(a - b) <= tol, f"{key} {name}: docs {a}, now {b}"
