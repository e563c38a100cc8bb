"""The compare report's renderers: every section in Markdown and HTML, images embedded, no link out."""

import base64
import re

import pytest

from dpspark.evaluation import compare_report as cr

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime


def point(setting, eps, top1, acc):
    p = {"setting": setting, "epsilon": eps, "top1": top1, "top1_lo": top1 - 0.01, "top1_hi": top1 + 0.02}
    for mode in cr.MODES:
        p.update({f"{mode}_accuracy": acc, f"{mode}_accuracy_lo": acc - 0.01, f"{mode}_accuracy_hi": acc + 0.01})
    return p


@pytest.fixture
def rendered(tmp_path):
    points = [point("laplace", e, t, a) for e, t, a in ((1, 0.05, 0.86), (5, 0.1, 0.9), (10, 0.4, 0.97))]
    points += [point("tem β=0.001", e, t, a) for e, t, a in ((1, 0.02, 0.87), (5, 0.3, 0.95))]
    chosen = points[1]
    name = cr.write_frontier(tmp_path, points, "accuracy", 0.98, 0.04, 0.1, chosen)
    sections = [
        cr.Section("Dataset and embedding", ["rows **1000**, text `text`"]),
        cr.Section("Recommendation", ["**Recommended: laplace, ε = 5**"]),
        cr.Section("Privacy–utility frontier", ["a plot"], images=[(name, "frontier")]),
        cr.Section("Equal empirical privacy", [], [cr.Table(["setting", "ε"], [["laplace", "5"], ["a|b", "<1>"]])]),
        cr.Section("Before and after", [], [cr.Table(["original", "perturbed"], [["Tom & me", "tim and you"]])]),
    ]
    md = cr.render_md("Comparison", sections)
    html = cr.render_html("Comparison", sections, tmp_path)
    return sections, md, html, (tmp_path / name).read_bytes()


def test_markdown_has_every_section_table_and_image(rendered):
    sections, md, _, _ = rendered
    for s in sections:
        assert f"## {s.title}" in md
    assert "| laplace | 5 |" in md
    assert "| a\\|b | <1> |" in md  # a pipe in a cell does not split it
    assert "![frontier](frontier.png)" in md


def test_html_embeds_its_images_and_links_nowhere(rendered):
    sections, _, html, png = rendered
    for s in sections:
        assert f"<h2>{s.title.replace('&', '&amp;')}</h2>" in html
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == 1 and srcs[0].startswith("data:image/png;base64,")
    assert base64.b64decode(srcs[0].split(",", 1)[1]) == png
    assert "href=" not in html and "http://" not in html and "https://" not in html
    assert "<td>Tom &amp; me</td>" in html and "&lt;1&gt;" in html  # text escaped
    assert "<strong>Recommended: laplace, ε = 5</strong>" in html and "<code>text</code>" in html


def test_shares_with_intervals():
    assert cr.with_ci(0.543, 0.521, 0.564) == "54.3 (52.1–56.4)"
    assert cr.with_ci(0.5, 0.5, 0.5) == "50.0"  # an exact figure has no interval
    assert cr.with_ci(float("nan"), None, None) == "–"
    assert cr.pct(None) == "–"


def test_a_setting_without_its_epsilon_names_one_series_and_its_mlflow_metrics():
    """``MechanismSpec.series_label``: what compare, evaluate-utility and privacy-risk call a setting (the
    frontier's lines, the equal-privacy rows); compare's MLflow metric names spell it in ASCII."""
    from dpspark import mechanisms
    from dpspark.evaluation.compare_mlflow import _mlflow_key

    labels = {
        "laplace": {"name": "laplace", "epsilon": 5},
        "mahalanobis λ=0.5": {"name": "mahalanobis", "epsilon": 5, "lambda": 0.5},
        "tem β=0.001": {"name": "tem", "epsilon": 1e6, "beta": 0.001},
    }
    for label, given in labels.items():
        spec = mechanisms.parse(given)
        assert spec.series_label() == label
        assert spec.series_label() == mechanisms.parse({**given, "epsilon": 2}).series_label()  # ε left out
    assert _mlflow_key("mahalanobis_λ=0.5_eps_1e+06/top1") == "mahalanobis_lambda_0.5_eps_1e06/top1"
    assert _mlflow_key("tem_β=0.001_eps_5/train-time_accuracy") == "tem_beta_0.001_eps_5/train-time_accuracy"


def test_the_frontier_draws_the_users_bounds():
    points = [point("laplace", e, t, a) for e, t, a in ((1, 0.05, 0.86), (5, 0.1, 0.9))]
    labels = lambda fig: fig.axes[0].get_legend_handles_labels()[1]  # noqa: E731
    plain = labels(cr.frontier_figure(points, "accuracy", 0.98, 0.04, 0.1))
    assert not any(label.startswith("bound:") for label in plain)
    bounded = labels(cr.frontier_figure(points, "accuracy", 0.98, 0.04, 0.1, None, 0.2, 0.05))
    assert "bound: top-1 ≤ 0.2" in bounded and "bound: accuracy loss ≤ 0.05" in bounded
    lines = {
        round(line.get_ydata()[0], 6)
        for line in cr.frontier_figure(points, "accuracy", 0.98, 0.04, 0.1, None, 0.2, 0.05).axes[0].get_lines()
        if line.get_linestyle() == "-."
    }
    assert lines == {0.93}  # baseline − the utility bound


def measured_point(setting, eps, top1, acc):
    from dpspark.mechanisms import parse

    p = point(setting, eps, top1, acc)
    name = setting.split()[0]
    p.update(
        spec=parse({"name": name, "epsilon": eps}), mechanism=name, guarantee_type="metric",
        guarantee_unit="ε per unit of Euclidean distance between the words' vectors", top5=top1, top5_lo=top1,
        top5_hi=top1, attacker="bayes", unchanged=top1 / 2, nw_fraction=top1, mldp_nw=3.0, mldp_sw=9.0, pp=0.5,
        low=0.4, cs=0.7, dictionary=0.9, puc=None, time_s=1.5, examples=["a b c d"],
    )  # fmt: skip
    return p


def report_of(**settings):
    from types import SimpleNamespace

    c = dict(
        input="in.parquet", text_column="text", label_column="label", split_seed=42, model="tfidf-logreg", repeats=1,
        runs=20, utility_metric="accuracy", target_reidentification=0.1, target_nw_fraction=0.2,
        max_reidentification=None, max_utility_loss=None, solve=False, solve_tolerance=0.01, solve_rounds=6,
        mldp_words=25, mldp_trials=100, pp_tokens=None,
    )  # fmt: skip
    c.update(settings)
    points = [measured_point("laplace", e, t, a) for e, t, a in ((1, 0.05, 0.86), (5, 0.15, 0.9), (10, 0.4, 0.97))]
    corpus = {
        "train_rows": 700, "test_rows": 300, "tokens": 5000, "tokens_with_vector": 4900, "tokens_in_vocabulary": 4000,
        "vocabulary_coverage": 0.8, "vector_coverage": 0.98, "words_measured": 900, "token_coverage": 1.0,
        "floor_top1": 0.04, "floor_top5": 0.12, "low_words": 50, "dictionary": "a dictionary",
    }  # fmt: skip
    return cr.Comparison(
        SimpleNamespace(**c), points, {"accuracy": 0.98}, {"train-time_accuracy": 0.9, "test-time_accuracy": 0.91},
        corpus, {"name": "glove-6b-50d", "dim": 50, "sha256": "e5fa03ea3cd4ec"}, 2000, 2, ["a b c d"], [],
    )  # fmt: skip


def test_the_report_is_built_from_plain_data_without_spark():
    """compare's report from measured points alone: its sections, the coverage line, the vocabulary only
    row, the vocabulary hint where the vocabulary alone loses more than a point, the units of ε."""
    report = report_of()
    chosen, why = report.analysis.recommend()
    titles = [s.title for s in report.sections(chosen, why, report.analysis.equal_privacy(), "frontier.png")]
    assert titles == [
        "Dataset and embedding", "Recommendation", "Privacy–utility frontier", "Equal empirical privacy",
        "Every setting measured", "Guarantees in words", "Before and after", "Definitions",
    ]  # fmt: skip
    md = cr.render_md("Comparison", report.sections(chosen, why, report.analysis.equal_privacy(), "frontier.png"))
    assert "Vocabulary coverage: 80.0% of the corpus's 5000 tokens are words of the 2000-word vocabulary" in md
    # one format in the utility table (issue 39, 13): vocabulary only in percentages like every setting
    assert "| vocabulary only | ∞ | 90.0 | 91.0 |" in md and "| laplace | 1 | 86.0 (85.0–87.0) |" in md
    assert "**The vocabulary caps utility**" in md and "0.0800 below the baseline" in md
    assert "Unit of ε, **laplace**: ε per unit of Euclidean distance" in md and "PUC (dpspark's composite)" in md


def test_the_report_has_a_solved_section_with_every_point_under_solve():
    report = report_of(solve=True, max_reidentification=0.17)  # top-1's upper ends: 0.07, 0.17, 0.42
    chosen, why = report.analysis.recommend()
    sections = report.sections(chosen, why, report.analysis.equal_privacy(), "frontier.png")
    (solved,) = [s for s in sections if s.title == "Solved ε"]
    ((row,),) = [t.rows for t in solved.tables]
    assert row[0] == "laplace" and row[2] == "5" and row[5] == "solved"
    assert row[6] == "1: 0.0700; 5: 0.1700; 10: 0.4200"
    # the fixture's top-1 interval at ε = 5 is 0.02 wide: wider than the tolerance 0.01, so the search stops there
    assert row[4] == "0.02" and any("cannot be told apart" in line and "laplace" in line for line in solved.paragraphs)
