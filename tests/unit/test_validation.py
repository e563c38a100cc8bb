"""Settings and report files refused before any work starts: the documented exit code, one
sentence naming the problem and the fix, nothing written, the input untouched.

Every CLI case runs ``dpspark.cli.main`` in-process; none of them needs Spark (each fails
in the configuration or in calibrate's reading of report files, before a session starts).
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpspark import config
from dpspark.cli import NO_EPSILON_MEETS_BOUNDS, explain_failure, main
from dpspark.errors import ConfigError, InputDataError, OutputError
from dpspark.stats import Bounds, calibrate, joint_calibrate
from dpspark.utility import BASELINE, utility_loss

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


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_through_the_command(capsys, tmp_path):
    # calibrate writes calibration.md into the --stats directory: here a device that is always full.
    stats = tmp_path / "stats"
    stats.mkdir()
    write_per_word(stats)
    (stats / "calibration.md").symlink_to("/dev/full")
    code, err = run(capsys, "calibrate", "--stats", str(stats), "--quiet")
    assert_refused(code, err, OutputError, "calibrate", "the disk", "is full: free space or choose another --output")
    assert not (stats / "calibration.json").exists()


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
    assert joint_calibrate(points, 0.05, 0.2)["best"] == {"epsilon": 1.0, "lambda": 1.0}


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
    loss = utility_loss(summary, "accuracy")
    assert all(math.isnan(loss[(e, 1.0)]) for e in (1.0, 2.0, 3.0))
    assert loss[(4.0, 1.0)] == pytest.approx(0.1)


def write_per_word(directory: Path, rows: int = 4) -> None:
    rng = np.random.default_rng(0)
    pq.write_table(
        pa.table(
            {
                "epsilon": [1.0, 5.0] * (rows // 2),
                "lambda": [1.0] * rows,
                "word": list(range(rows)),
                "nw": rng.integers(0, 10, rows),
                "sw": rng.integers(1, 10, rows),
                "runs": [10] * rows,
            }
        ),
        directory / "per_word.parquet",
    )


def write_risk(directory: Path, top1: list[float], epsilons: list[float] | None = None) -> None:
    epsilons = epsilons or [float(e) for e in range(1, len(top1) + 1)]
    pq.write_table(
        pa.table({"epsilon": epsilons, "lambda": [1.0] * len(top1), "top1": top1}), directory / "risk.parquet"
    )


def write_utility(directory: Path, accuracy: list[float]) -> None:
    rows = [{"mode": BASELINE, "epsilon": None, "lambda": None, "accuracy_mean": 0.9}]
    rows += [
        {"mode": "train-time", "epsilon": float(e), "lambda": 1.0, "accuracy_mean": a}
        for e, a in enumerate(accuracy, 1)
    ]
    pq.write_table(pa.Table.from_pylist(rows), directory / "summary.parquet")


SOURCES = {
    # flag: (file, its writer, the bound the flag needs)
    "--stats": ("per_word.parquet", write_per_word, ()),
    "--risk": ("risk.parquet", lambda d: write_risk(d, [0.1, 0.3]), ("--max-reidentification", "0.2")),
    "--utility": ("summary.parquet", lambda d: write_utility(d, [0.88, 0.7]), ("--max-utility-loss", "0.05")),
}


def spoil(path: Path, how: str) -> str:
    """Damage a report table; return what the message must name."""
    table = pq.read_table(path)
    if how == "not parquet":
        path.write_text("epsilon,lambda\n1,1\n")
        return "cannot be read as Parquet"
    if how == "missing column":
        pq.write_table(table.drop(["lambda"]), path)
        return "lacks the column(s) lambda"
    if how == "no rows":
        pq.write_table(table.slice(0, 0), path)
        return "has no rows"
    assert how == "nan epsilon"
    eps = table.column("epsilon").to_pylist()
    eps[-1] = math.nan
    pq.write_table(table.set_column(table.column_names.index("epsilon"), "epsilon", pa.array(eps)), path)
    return "1 row(s) without a finite epsilon"


@pytest.mark.parametrize("how", ["not parquet", "missing column", "no rows", "nan epsilon"])
@pytest.mark.parametrize("flag", list(SOURCES))
def test_calibrate_refuses_malformed_report_files(capsys, tmp_path, flag, how):
    name, write, bound = SOURCES[flag]
    source = tmp_path / "source"
    source.mkdir()
    write(source)
    fragment = spoil(source / name, how)
    before = snapshot(tmp_path)
    out = tmp_path / "calibration"
    argv = ["calibrate", flag, str(source), *bound, "--quiet"] + (["--output", str(out)] if bound else [])
    code, err = run(capsys, *argv)
    assert_refused(code, err, InputDataError, "calibrate", str(source / name), fragment, flag)
    assert not out.exists()
    assert snapshot(tmp_path) == before  # nothing written into the source either (calibration.md)


def test_calibrate_refuses_a_utility_summary_without_its_baseline(capsys, tmp_path):
    source = tmp_path / "u"
    source.mkdir()
    write_utility(source, [0.88])
    table = pq.read_table(source / "summary.parquet")
    pq.write_table(table.slice(1), source / "summary.parquet")
    before = snapshot(tmp_path)
    code, err = run(
        capsys, "calibrate", "--utility", str(source), "--max-utility-loss", "0.05", "--output", str(tmp_path / "o")
    )
    assert_refused(code, err, InputDataError, "calibrate", "needs exactly one baseline row")
    assert snapshot(tmp_path) == before


def test_calibrate_with_a_nan_figure_recommends_nothing(capsys, tmp_path):
    risk = tmp_path / "r"
    risk.mkdir()
    write_risk(risk, [0.5, math.nan, 0.6])  # only the NaN row would be under the bound
    before = snapshot(risk)
    out = tmp_path / "cal"
    code, err = run(capsys, "calibrate", "--risk", str(risk), "--max-reidentification", "0.2", "--output", str(out))
    assert code == NO_EPSILON_MEETS_BOUNDS, err
    result = json.loads((out / "calibration.json").read_text())
    assert result["best"] is None and not any(r["met"] for r in result["rows"])
    assert snapshot(risk) == before
    # The same table with the NaN row measured: that row is recommended.
    write_risk(risk, [0.5, 0.1, 0.6])
    assert (
        main(["calibrate", "--risk", str(risk), "--max-reidentification", "0.2", "--output", str(tmp_path / "c2")]) == 0
    )
    assert json.loads((tmp_path / "c2" / "calibration.json").read_text())["best"] == {"epsilon": 2.0, "lambda": 1.0}
