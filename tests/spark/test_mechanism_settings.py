"""A mechanism's setting that the vocabulary cannot take is refused before anything is written.

Such settings are checked on the driver when the mechanism prepares its public arrays
(``MechanismSpec.prepare``): exit 2, a message that names the problem and the fix, no output, and
the input untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dpspark.cli import main
from dpspark.errors import PrivacyWarning

pytestmark = pytest.mark.spark

REVIEWS = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def data(tmp_path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(REVIEWS, d / "reviews.parquet")
    return d


def refused(tmp_path: Path, data: Path, capsys, *flags: str) -> str:
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    args = ["perturb", "--input", str(data / "reviews.parquet"), "--columns", "text", "--output", str(out)]
    assert main([*args, "--quiet", *flags]) == 2
    assert not out.exists()
    assert snapshot(tmp_path) == before  # nothing written, the input unchanged
    return capsys.readouterr().err


def test_santext_plus_without_protected_words_is_refused(spark, tmp_path, data, capsys):
    words = tmp_path / "in" / "protected.txt"
    words.write_text("zzqxv\nqqwzx\n", encoding="utf-8")
    err = refused(
        tmp_path, data, capsys, "--mechanism", "santext-plus", "--epsilon", "3", "--sensitive-words", str(words)
    )
    assert "none of the 2 words" in err and "protected set would be empty" in err and "--sensitive-fraction" in err


def test_santext_plus_parameters_are_checked_by_name(spark, tmp_path, data, capsys):
    err = refused(tmp_path, data, capsys, "--mechanism", "santext-plus", "--epsilon", "3", "--p", "0")
    assert "p must be in (0, 1]" in err
    err = refused(tmp_path, data, capsys, "--mechanism", "santext-plus", "--epsilon", "3", "--t", "0.5")
    assert "t: is not a parameter of santext-plus" in err


def test_truncated_gumbel_below_its_threshold_is_refused(spark, tmp_path, data, capsys):
    """b > 0 only for ε > (5 + 2 ln V)/Δ0: 75.8 on the 50,000-word vocabulary (Δ0: monday–tuesday)."""
    err = refused(tmp_path, data, capsys, "--mechanism", "truncated-gumbel", "--epsilon", "10")
    assert "epsilon > (5 + 2 ln V)/Δ0 = 75.8183" in err and "use a larger epsilon" in err


def test_truncated_gumbel_warns_that_no_guarantee_holds(spark, tmp_path, data):
    """Above its threshold it runs, and says in a warning and in the manifest that no guarantee can be stated."""
    out = tmp_path / "out"
    args = ["perturb", "--input", str(data / "reviews.parquet"), "--columns", "text", "--output", str(out)]
    with pytest.warns(PrivacyWarning, match="truncated-gumbel has no privacy guarantee"):
        assert main([*args, "--mechanism", "truncated-gumbel", "--epsilon", "100"]) == 0
    manifest = json.loads((out / "_dpspark_manifest.json").read_text())
    assert manifest["guarantee_type"] == "none" and "contradicts" in manifest["guarantee"]
