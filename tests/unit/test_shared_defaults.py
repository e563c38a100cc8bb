"""The Databricks notebooks, the Asset Bundle and the CLI share one set of defaults.

A notebook's widgets are read as Databricks would define them: its cells run, with the notebook
runner's stand-in for ``dbutils``, up to the first cell that reads a widget. Every widget that is a
setting of the command the notebook runs starts at that command's default (``dpspark.config``),
and ε, which no command defaults, starts where the README's "Choosing ε" starts a first release
(``FIRST_EPSILON``), in the perturb notebook, the bundle and the example configuration alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpspark.config import (
    FIRST_EPSILON,
    CalibrateConfig,
    CompareConfig,
    EvaluateUtilityConfig,
    PerturbConfig,
    RiskConfig,
    StatsConfig,
    VectorsConfig,
)
from dpspark.notebook_runner import DBUtils, parse_cells, python_source

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
BUNDLE = ROOT / "databricks" / "databricks.yml"
# The models whose settings each notebook's widgets are, first match wins (privacy_utility runs three commands).
MODELS = {
    "perturb_text.py": (PerturbConfig,),
    "privacy_stats.py": (StatsConfig,),
    "release_vectors.py": (VectorsConfig,),
    "privacy_utility.py": (EvaluateUtilityConfig, RiskConfig, CalibrateConfig),
    "compare.py": (CompareConfig,),
}
# Widgets that name the user's data (no command defaults them) or steer the notebook only.
DATA = {"input", "output", "columns", "column", "text_column", "label_column", "rows", "id_column", "unit_column"}
# What each command needs before its defaults mean anything (the settings every run must name).
REQUIRED = {"input": "in.parquet", "output": "out", "text_column": "text", "label_column": "label"}


def widgets(name: str) -> dict[str, str]:
    """The notebook's widgets with their defaults, as its definition cells leave them."""
    dbutils = DBUtils()
    namespace = {"__name__": "__main__", "dbutils": dbutils, "spark": None}
    for cell in parse_cells((NOTEBOOKS / name).read_text(encoding="utf-8")):
        source = python_source(cell)
        if "dbutils.widgets.get(" in source:
            break
        exec(compile(source, f"{name}", "exec"), namespace)  # noqa: S102
    return dict(dbutils.widgets._values)


def field(models: tuple, widget: str):
    """(model, field name) of the first model with a setting named (or aliased) ``widget``."""
    for model in models:
        for name, f in model.__fields__.items():
            if widget in (name, f.alias):
                return model, name
    return None, None


def test_the_notebooks_all_define_widgets():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.py")) == sorted(MODELS)


@pytest.mark.parametrize("notebook", sorted(MODELS))
def test_every_widget_starts_at_the_commands_default(notebook):
    shown = widgets(notebook)
    assert "output" in shown and shown["output"] == "", "the output has no default (never the driver's /tmp)"
    checked = []
    for widget, value in shown.items():
        if widget in DATA or widget == "mechanisms":
            continue
        model, name = field(MODELS[notebook], widget)
        assert model is not None, f"{notebook}: widget {widget!r} is no setting of {MODELS[notebook]}"
        if widget == "epsilon":  # no command defaults ε
            expected = f"{FIRST_EPSILON:g}" if model is PerturbConfig else ""
        else:
            expected = model.default_text(name)
        assert value == expected, (
            f"{notebook}: widget {widget!r} starts at {value!r}, the CLI's default is {expected!r}"
        )
        checked.append(widget)
    assert checked, notebook


@pytest.mark.parametrize("notebook", ["privacy_stats.py", "privacy_utility.py", "compare.py"])
def test_the_mechanisms_widget_gives_the_commands_default_grid(notebook):
    """A multiselect holds one default choice: mahalanobis over the λ widget's grid is the grid the
    command runs when no mechanism is named (laplace, then mahalanobis at each λ > 0)."""
    shown = widgets(notebook)
    model = MODELS[notebook][0]
    required = {k: v for k, v in REQUIRED.items() if k in model.__fields__}
    cli = model.parse(required)
    notebook_config = model.parse({**required, "mechanisms": shown["mechanisms"], "lambdas": shown["lambdas"]})
    assert notebook_config.settings() == cli.settings()
    assert len(cli.settings()) >= 2 * len(cli.grid_epsilons())  # without --epsilons: the default grid


def test_the_compare_notebook_has_the_clis_targets_and_both_bounds():
    shown = widgets("compare.py")
    assert shown["vocab_size"] == str(CompareConfig.__fields__["vocab_size"].default) == "50000"
    assert float(shown["target_reidentification"]) == CompareConfig.__fields__["target_reidentification"].default
    assert shown["max_reidentification"] == shown["max_utility_loss"] == ""  # the bounds: none unless set


def test_no_notebook_writes_to_the_drivers_tmp():
    for path in NOTEBOOKS.glob("*.py"):
        assert "/tmp" not in path.read_text(encoding="utf-8"), path.name


def test_one_first_epsilon_in_the_bundle_the_notebook_and_the_example_configuration():
    bundle = yaml.safe_load(BUNDLE.read_text(encoding="utf-8"))
    assert float(bundle["variables"]["epsilon"]["default"]) == FIRST_EPSILON
    assert float(widgets("perturb_text.py")["epsilon"]) == FIRST_EPSILON
    assert yaml.safe_load((ROOT / "conf" / "perturb.yaml").read_text(encoding="utf-8"))["epsilon"] == FIRST_EPSILON


def test_the_bundles_cluster_limits_openblas_to_one_thread():
    """Runtime 15.4 (the bundle's default) ships threadpoolctl 2.2.0: dpspark relies on the environment."""
    bundle = yaml.safe_load(BUNDLE.read_text(encoding="utf-8"))
    assert bundle["variables"]["spark_version"]["default"].startswith("15.4.")
    ((job),) = bundle["resources"]["jobs"].values()
    for cluster in job["job_clusters"]:
        assert cluster["new_cluster"]["spark_env_vars"]["OPENBLAS_NUM_THREADS"] == "1"
