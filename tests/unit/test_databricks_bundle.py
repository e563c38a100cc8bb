"""The Databricks Asset Bundle (databricks/databricks.yml): its daily release task runs dpspark's own
entry point with flags that dpspark's CLI parser and configuration model accept, once Databricks
has put the run's date in the partition."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from dpspark.cli import build_parser, flag_name
from dpspark.config import FIRST_EPSILON, PerturbConfig

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

BUNDLE = Path(__file__).resolve().parents[2] / "databricks" / "databricks.yml"
RUN_DATE = "2026-11-21"
# The dynamic value references the bundle may use, each with the value Databricks would give it.
DYNAMIC = {"job.start_time.iso_date": RUN_DATE}
SAMPLE = {"input": "/Volumes/main/raw/reviews", "output": "/Volumes/main/shared/reviews_private"}


@pytest.fixture(scope="module")
def bundle() -> dict:
    return yaml.safe_load(BUNDLE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def job(bundle) -> dict:
    (job,) = bundle["resources"]["jobs"].values()
    return job


@pytest.fixture(scope="module")
def task(job) -> dict:
    (task,) = job["tasks"]
    return task


def resolved(bundle: dict, value: str) -> str:
    """``value`` as the task sees it: bundle variables (``${var.x}``) from their defaults or a sample,
    then Databricks' dynamic value references (``{{job.start_time.iso_date}}``)."""
    variables = bundle["variables"]

    def var(m: re.Match) -> str:
        name = m.group(1)
        assert name in variables, f"${{var.{name}}} is not declared under variables"
        return str(variables[name].get("default", SAMPLE.get(name)))

    def dynamic(m: re.Match) -> str:
        assert m.group(1) in DYNAMIC, f"unexpected dynamic value reference {{{{{m.group(1)}}}}}"
        return DYNAMIC[m.group(1)]

    value = re.sub(r"\$\{var\.([A-Za-z0-9_]+)\}", var, str(value))
    return re.sub(r"\{\{\s*([^}]+?)\s*\}\}", dynamic, value)


def test_the_task_runs_dpspark_perturb_from_the_wheel(bundle, task):
    wheel = task["python_wheel_task"]
    assert wheel["package_name"] == "dpspark"
    scripts = {ep.name: ep.value for ep in metadata.entry_points(group="console_scripts")}
    assert scripts.get(wheel["entry_point"]) == "dpspark.cli:run"  # exits with the command's code
    assert "named_parameters" not in wheel  # flags are positional parameters, as on the command line
    assert any(str(lib.get("whl", "")).endswith(".whl") for lib in task["libraries"])
    assert bundle["artifacts"]["dpspark_wheel"]["type"] == "whl"


def test_the_parameters_parse_with_dpsparks_cli(bundle, task):
    params = [resolved(bundle, p) for p in task["python_wheel_task"]["parameters"]]
    assert params[0] == "perturb"
    known = {flag_name(name, alias) for name, (alias, _, _) in PerturbConfig.fields().items()}
    flags = [p.split("=", 1)[0] for p in params[1:] if p.startswith("--")]
    assert flags and set(flags) <= known, f"not flags of dpspark perturb: {sorted(set(flags) - known)}"

    args = vars(build_parser().parse_args(params))
    assert args.pop("command") == "perturb"
    settings = {k: v for k, v in args.items() if k in known or f"--{k.replace('_', '-')}" in known}
    config = PerturbConfig.parse(settings)
    assert config.partition == f"date={RUN_DATE}"
    assert config.columns == ["text"]
    assert config.epsilon == FIRST_EPSILON  # the README's first ε (tests/unit/test_shared_defaults.py)
    assert (config.input, config.output) == (SAMPLE["input"], SAMPLE["output"])
    assert config.mode == "error" and not config.allow_rerelease and not config.keep_original  # the safe defaults


def test_the_partition_is_the_runs_date(task):
    params = task["python_wheel_task"]["parameters"]
    assert params[params.index("--partition") + 1] == "date={{job.start_time.iso_date}}"


def test_a_daily_quartz_schedule_in_utc(job):
    schedule = job["schedule"]
    fields = schedule["quartz_cron_expression"].split()
    assert len(fields) in (6, 7)  # seconds minutes hours day-of-month month day-of-week [year]
    seconds, minutes, hours, day_of_month, month, day_of_week = fields[:6]
    assert all(f.isdigit() for f in (seconds, minutes, hours))  # once a day, at a fixed time
    assert (day_of_month, month, day_of_week) == ("*", "*", "?")
    assert schedule["timezone_id"] == "UTC"  # the time zone of {{job.start_time.iso_date}}
    assert job["max_concurrent_runs"] == 1


def test_the_cluster_encrypts_local_io(job, task):
    clusters = {c["job_cluster_key"]: c["new_cluster"] for c in job["job_clusters"]}
    cluster = clusters[task["job_cluster_key"]]
    assert cluster["spark_conf"]["spark.io.encryption.enabled"] == "true"
