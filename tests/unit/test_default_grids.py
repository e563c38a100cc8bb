"""One default ε grid per mechanism (issue 39, defect 14): each spec's ``default_epsilons`` is the first
grid that README.md's "Choosing a mechanism and ε" (and docs/choosing-epsilon.md) recommends, and every
grid command measures it when ``--epsilons`` is not given."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpspark.config import CompareConfig, EvaluateUtilityConfig, RiskConfig, StatsConfig
from dpspark.mechanisms import REGISTRY

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| ([\w, ()=-]+?) \| ([\d., ]+?)(?::[^|]*)? \|$")


def first_grids(page: str) -> dict[str, tuple[float, ...]]:
    """mechanism → its first grid, from the page's "| mechanism | first grid |" table."""
    text = (REPO / page).read_text(encoding="utf-8")
    table = text.split("| mechanism | first grid |", 1)[1].split("\n\n", 1)[0]
    out = {}
    for line in table.splitlines():
        m = ROW.match(line)
        if m:
            grid = tuple(float(x) for x in m[2].split(","))
            for name in m[1].split(" (")[0].split(","):
                out[name.strip()] = grid
    return out


@pytest.mark.parametrize("page", ["README.md", "docs/choosing-epsilon.md"])
def test_every_mechanism_default_grid_is_the_pages_first_grid(page):
    assert first_grids(page) == {name: spec.default_epsilons for name, spec in REGISTRY.items()}


CORPUS = {"output": "o", "input": "in.parquet", "text_column": "t", "label_column": "l", "vocab_size": 2000}


@pytest.mark.parametrize(
    "model, values",
    [
        (CompareConfig, CORPUS),
        (EvaluateUtilityConfig, CORPUS),
        (RiskConfig, {k: v for k, v in CORPUS.items() if k != "label_column"}),
        (StatsConfig, {"output": "o", "vocab_size": 2000}),
    ],
)
def test_every_grid_command_measures_each_mechanism_at_its_default_grid(model, values):
    names = ["laplace", "tem", "custext", "1-diffractor"]
    config = model.parse({**values, "mechanisms": names})
    measured: dict[str, list[float]] = {}
    for spec in config.settings():
        measured.setdefault(spec.name, []).append(spec.epsilon)
    assert measured == {n: list(REGISTRY[n].default_epsilons) for n in names}
    # without --mechanisms: the λ grid of the noise family, at laplace's and mahalanobis' grid
    plain = model.parse(values)
    assert sorted({s.epsilon for s in plain.settings()}) == [4.0, 5.0, 6.0, 8.0, 10.0]
    assert plain.grid_epsilons() == [4.0, 5.0, 6.0, 8.0, 10.0]
    # an explicit grid is every mechanism's
    given = model.parse({**values, "mechanisms": names, "epsilons": "2,8"})
    assert {s.epsilon for s in given.settings()} == {2.0, 8.0}


def test_the_help_and_the_commands_page_say_the_default():
    from dpspark.config import EPSILONS_HELP

    for name, spec in REGISTRY.items():
        grid = ",".join(f"{e:g}" for e in spec.default_epsilons)
        assert re.search(rf"{re.escape(name)}[\w\s,-]* {re.escape(grid)}", EPSILONS_HELP), name
    for model in (CompareConfig, EvaluateUtilityConfig, RiskConfig, StatsConfig):
        assert model.fields()["epsilons"][2] == EPSILONS_HELP
    page = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
    for name, spec in REGISTRY.items():
        grid = ", ".join(f"{e:g}" for e in spec.default_epsilons)
        assert re.search(rf"{re.escape(name)}[\w\s,-]* at {re.escape(grid)}", page), name
