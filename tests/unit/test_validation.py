"""Settings and report files refused before any work starts: the documented exit code, one
sentence naming the problem and the fix, nothing written, the input untouched.

Every CLI case runs ``dpspark.cli.main`` in-process; none of them needs Spark (each fails
in the configuration, before a session starts).
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dpspark import config
from dpspark.cli import explain_failure, main
from dpspark.errors import ConfigError, OutputError
from dpspark.stats import Bounds, calibrate, joint_calibrate
from dpspark.utility import BASELINE, utility_loss_by_setting

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

REVIEWS = Path(__file__).resolve().parents[2] / "examples" / "reviews.parquet"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path → bytes)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def assert_refused(code: int, err: str, error: type, command: str, *fragments: str) -> None:
    assert code == error.exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dpspark {command}: error: "), err  # one line, no traceback
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in stderr: {err}"


@pytest.fixture
def workdir(tmp_path) -> tuple[Path, Path]:
    """(a copy of the example input in its own directory, the output path that must stay absent)."""
    data = tmp_path / "in"
    data.mkdir()
    shutil.copy(REVIEWS, data / "reviews.parquet")
    return data, tmp_path / "out"


def perturb_refused(capsys, workdir, error: type, fragments: tuple[str, ...], *extra: str, config_file=None) -> str:
    """Run perturb on the example input; assert the refusal, no output and an unchanged input."""
    data, out = workdir
    before = snapshot(data.parent)
    argv = ["perturb", "--input", str(data / "reviews.parquet"), "--output", str(out), "--columns", "text"]
    argv += ["--config", str(config_file)] if config_file else []
    code, err = run(capsys, *argv, "--quiet", *extra)
    assert_refused(code, err, error, "perturb", *fragments)
    assert not out.exists()
    assert snapshot(data.parent) == before  # input unchanged, nothing added beside it
    return err


# --- 2. oov_token ------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["", "two words", "a\nb", " "])
def test_oov_token_must_be_one_token(capsys, workdir, token):
    with pytest.raises(ConfigError, match="oov_token must be one non-empty token without whitespace"):
        config.PerturbConfig.parse({"epsilon": 1, "oov_token": token})
    perturb_refused(capsys, workdir, ConfigError, ("oov_token", repr(token)), "--epsilon", "1", "--oov-token", token)


def test_oov_token_accepts_a_token():
    assert config.PerturbConfig.parse({"epsilon": 1, "oov_token": "<unk>"}).oov_token == "<unk>"


# --- 3. batch_rows -----------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [2**31, 2**40, 0])
def test_batch_rows_must_fit_spark(capsys, workdir, rows):
    with pytest.raises(ConfigError, match=r"batch_rows must be in \[1, 2\*\*31 - 1\]"):
        config.PerturbConfig.parse({"epsilon": 1, "batch_rows": rows})
    perturb_refused(
        capsys, workdir, ConfigError, ("batch_rows", str(rows)), "--epsilon", "1", "--batch-rows", str(rows)
    )


def test_batch_rows_largest_is_accepted():
    assert config.PerturbConfig.parse({"epsilon": 1, "batch_rows": 2**31 - 1}).batch_rows == 2**31 - 1


# --- 4. YAML config files ----------------------------------------------------------------------


def test_yaml_that_is_not_utf8(capsys, workdir, tmp_path):
    conf = tmp_path / "latin1.yaml"
    conf.write_bytes("epsilon: 1\noov_token: café\n".encode("latin-1"))
    perturb_refused(capsys, workdir, ConfigError, (str(conf), "not UTF-8", "save it as UTF-8"), config_file=conf)


def test_yaml_alias_bomb_is_refused_in_a_short_message(capsys, workdir, tmp_path):
    conf = tmp_path / "bomb.yaml"
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for prev, name in zip("abcdef", "bcdefg"):  # 7 levels: 9**7 = 4.8 million strings once expanded
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    conf.write_text("\n".join([*lines, "epsilon: *g", ""]))
    err = perturb_refused(capsys, workdir, ConfigError, (str(conf), "alias", "line 2"), config_file=conf)
    assert len(err) < 500


def test_yaml_seed_must_be_whole(capsys, workdir, tmp_path):
    conf = tmp_path / "seed.yaml"
    conf.write_text("epsilon: 1\nseed: 1.5\n")
    perturb_refused(capsys, workdir, ConfigError, ("seed", "whole number", "1.5"), config_file=conf)
    # As the flag is (argparse's int refuses it, exit 2).
    with pytest.raises(SystemExit) as flag:
        main(["perturb", "--epsilon", "1", "--seed", "1.5"])
    assert flag.value.code == ConfigError.exit_code
    capsys.readouterr()


def test_yaml_whole_numbers_still_accepted(tmp_path):
    conf = tmp_path / "ok.yaml"
    conf.write_text("epsilon: 1\nseed: 7\nvocab-size: 300.0\n")
    c = config.PerturbConfig.from_sources(str(conf), {})
    assert (c.seed, c.vocab_size) == (7, 300)
    with pytest.raises(ConfigError, match="vocab_size: must be a whole number"):
        config.PerturbConfig.parse({"epsilon": 1, "vocab_size": 300.5})


# --- 5. Spark master / remote, full disk -------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--master", "bogus://x", "not a Spark master URL"),
        ("--master", "local[abc]", "not a Spark master URL"),
        ("--remote", "http://host:15002", "not a Spark Connect URL"),
    ],
)
def test_spark_urls_are_checked(capsys, workdir, flag, value, fragment):
    perturb_refused(capsys, workdir, ConfigError, (fragment, value), "--epsilon", "1", flag, value)


@pytest.mark.parametrize("master", ["local", "local[*]", "local[4]", "local[2, 3]", "spark://h:7077", "yarn"])
def test_spark_master_urls_accepted(master):
    assert config.PerturbConfig.parse({"epsilon": 1, "master": master}).master == master


def test_a_full_disk_is_exit_5(capsys):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/out/part-0.parquet")
    assert explain_failure("perturb", full) == OutputError.exit_code == 5
    err = capsys.readouterr().err
    assert err == (
        "dpspark perturb: error: the disk holding /data/out/part-0.parquet is full: free space or choose another "
        "--output\n"
    )
    # Other OSErrors stay unexpected (exit 1 with the traceback).
    assert explain_failure("perturb", OSError(errno.EACCES, "Permission denied")) is None
    assert capsys.readouterr().err == ""


# --- 6. ε floor --------------------------------------------------------------------------------


def test_epsilon_below_the_floor(capsys, workdir):
    err = perturb_refused(capsys, workdir, ConfigError, ("epsilon must be at least 1e-06",), "--epsilon", "1e-300")
    assert "RuntimeWarning" not in err


@pytest.mark.parametrize(
    ("model", "field", "others"),
    [
        (config.PerturbConfig, "epsilon", {}),
        (config.VectorsConfig, "epsilon", {"column": "v"}),
        (config.StatsConfig, "epsilons", {}),
        (config.CalibrateConfig, "epsilons", {}),
        (config.EvaluateUtilityConfig, "epsilons", {"text_column": "t", "label_column": "l"}),
        (config.RiskConfig, "epsilons", {"text_column": "t"}),
        (config.EvaluateVectorsConfig, "class_epsilons", {}),
    ],
)
def test_every_epsilon_shares_the_floor(model, field, others):
    with pytest.raises(ConfigError, match=r"epsilon must be at least 1e-06 \(below it the noise"):
        model.parse({field: 1e-300, **others})
    accepted = model.parse({field: config.MIN_EPSILON, **others})  # the floor itself is accepted
    assert getattr(accepted, field) in (config.MIN_EPSILON, [config.MIN_EPSILON])


def test_the_floor_keeps_the_noise_finite():
    # The reason for the floor: at ε = MIN_EPSILON the noise of the largest embedding (d = 300),
    # its square (what the nearest-neighbour search computes) and its sum are finite in float64.
    from dpspark.mechanisms import sample_noise

    z = sample_noise(1000, 300, config.MIN_EPSILON, np.random.default_rng(0))
    assert np.isfinite(np.einsum("ij,ij->i", z, z)).all()


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


# --- 1. calibrate: NaN meets no bound, malformed report files are exit 3 ------------------------


def test_joint_calibrate_never_recommends_from_nan():
    nan = math.nan
    points = {
        (1.0, 1.0): {"reidentification": 0.5, "utility_loss": 0.01},  # real, fails the risk bound
        (2.0, 1.0): {"reidentification": nan, "utility_loss": 0.01},
        (3.0, 1.0): {"reidentification": 0.1, "utility_loss": nan},
        (nan, 1.0): {"reidentification": 0.1, "utility_loss": 0.01},
        (4.0, nan): {"reidentification": 0.1, "utility_loss": 0.01},
        (5.0, 1.0): {"reidentification": -math.inf, "utility_loss": 0.01},
    }
    result = joint_calibrate(points, max_utility_loss=0.05, max_reidentification=0.2)
    assert result["best"] is None
    assert not any(r["met"] for r in result["rows"])
    assert [r["frontier"] for r in result["rows"] if (r["epsilon"], r["lambda"]) == (1.0, 1.0)] == [True]
    assert sum(r["frontier"] for r in result["rows"]) == 1  # a NaN point is on no frontier
    # The same real point with a good figure is recommended.
    points[(1.0, 1.0)]["reidentification"] = 0.1
    assert joint_calibrate(points, 0.05, 0.2)["best"] == {
        "epsilon": 1.0,
        "lambda": 1.0,
        "setting": "mahalanobis λ=1",
        "mechanism": "mahalanobis",
    }


def test_calibrate_never_recommends_from_nan():
    runs = 10
    table = {
        (1.0, 1.0): (np.array([1.0, 2.0]), np.array([9.0, 8.0]), runs),
        (5.0, 1.0): (np.array([1.0, np.nan]), np.array([9.0, 8.0]), runs),
        (9.0, 1.0): (np.array([1.0, 2.0]), np.array([np.nan, 8.0]), runs),
    }
    r = calibrate(table, Bounds(max_nw_fraction=0.5, min_sw=2))
    assert r["best"] == {"setting": "mahalanobis λ=1", "mechanism": "mahalanobis", "lambda": 1.0, "epsilon": 1.0}
    assert [c["met"] for c in r["per_setting"][0]["checked"]] == [True, False, False]
    only_nan = {(5.0, 1.0): table[(5.0, 1.0)]}
    assert calibrate(only_nan, Bounds(max_nw_fraction=0.5))["best"] is None


def test_utility_loss_keeps_a_nan_of_either_mode():
    summary = [
        {"mode": BASELINE, "epsilon": None, "lambda": None, "accuracy_mean": 0.9},
        {"mode": "train-time", "epsilon": 1.0, "lambda": 1.0, "accuracy_mean": 0.85},
        {"mode": "test-time", "epsilon": 1.0, "lambda": 1.0, "accuracy_mean": math.nan},
        {"mode": "test-time", "epsilon": 2.0, "lambda": 1.0, "accuracy_mean": math.nan},
        {"mode": "train-time", "epsilon": 2.0, "lambda": 1.0, "accuracy_mean": 0.88},
        {"mode": "train-time", "epsilon": 3.0, "lambda": 1.0, "accuracy_mean": None},
        {"mode": "train-time", "epsilon": 4.0, "lambda": 1.0, "accuracy_mean": 0.8},
        {"mode": "test-time", "epsilon": 4.0, "lambda": 1.0, "accuracy_mean": 0.85},
    ]
    loss = utility_loss_by_setting(summary, "accuracy")
    assert all(math.isnan(loss[(e, "mahalanobis λ=1")]) for e in (1.0, 2.0, 3.0))
    assert loss[(4.0, "mahalanobis λ=1")] == pytest.approx(0.1)


# Calibrate's reading of report files (malformed files refused, NaN figures) needs the session's file
# system: tests/spark/test_calibrate.py.


def test_only_a_setting_that_needs_the_covariance_refuses_a_vocabulary_of_at_most_d_words():
    from dpspark.config import RiskConfig
    from dpspark.errors import EmbeddingError
    from dpspark.prepare import prepare_grid

    values = {"text_column": "t", "output": "o", "epsilons": "5", "vocab_size": 40}  # 40 words, 50 dimensions
    exponential = RiskConfig.parse({**values, "mechanisms": "tem,santext"})
    grid = prepare_grid(exponential, exponential.settings(), None)
    assert len(grid.vocab_rows) == 40 and [m.spec.name for m in grid.mechanisms()] == ["tem", "santext"]
    config = RiskConfig.parse({**values, "mechanisms": "mahalanobis"})
    with pytest.raises(EmbeddingError, match="a vocabulary of 40 words cannot give a positive-definite covariance"):
        prepare_grid(config, config.settings(), None)
