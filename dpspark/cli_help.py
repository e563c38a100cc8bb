"""How ``dpspark COMMAND --help`` lists each command's settings (help only: no validation here).

The CLI (``dpspark.cli``) builds every command's flags from its model (``dpspark.config``) and groups
them with these tables: the required settings first, then one group per concern, each group in the order
given.
"""

from __future__ import annotations

from dpspark.config import mechanism_parameter_fields
from dpspark.embeddings import DEFAULT_EMBEDDINGS
from dpspark.mechanisms.labels import LEGACY_GRID_FIELDS

HELP_GROUPS: dict[str, tuple[str, ...]] = {
    # group title -> its fields, in the order they are listed
    "input and output": (
        "input",
        "input_table",
        "output",
        "output_table",
        "stats",
        "utility",
        "risk",
        "table_format",
        "partition",
        "allow_rerelease",
        "mode",
        "overwrite",
    ),
    "text": ("columns", "column", "text_column", "label_column", "oov", "oov_token", "layout", "keep_original"),
    "mechanism": ("epsilon", "mechanism", *mechanism_parameter_fields(), "delta", "dim", "seed"),
    "privacy unit": ("privacy_unit", "unit_budget", "unit_budgets", "allocation", "over_cap"),
    "bounds": (
        "max_nw_fraction",
        "min_sw",
        "percentile",
        "max_utility_loss",
        "utility_metric",
        "max_reidentification",
        "target_reidentification",
        "target_nw_fraction",
        "refine",
        "solve",
        "solve_tolerance",
        "solve_rounds",
    ),
    "grid and words measured": (
        "mechanisms",
        "epsilons",
        *LEGACY_GRID_FIELDS,
        "grid",
        "runs",
        "words",
        "words_seed",
        "word_list",
        "corpus",
        "sensitive_words",
        "max_words",
        "words_per_task",
        "runs_per_task",
        "precision",
        "max_fit_runs",
        "doc_runs",
    ),
    "evaluation": (
        "repeats",
        "model",
        "test_fraction",
        "split_seed",
        "sample",
        "betas",
        "class_epsilons",
        "class_beta",
        "pairs",
        "skip_classifier",
        "examples",
        "mldp_words",
        "mldp_trials",
        "pp_tokens",
    ),
    "embedding and vocabulary": (
        "embeddings",
        "embeddings_format",
        "embeddings_words",
        "embeddings_dir",
        "vocab_size",
        "vocab_file",
        "vocab_from_corpus",
    ),
    "nearest-neighbour search": ("nn", "annoy_trees", "annoy_search_k", "recall_queries", "device"),
    "Spark": ("engine", "master", "remote", "partitions", "batch_rows"),
    "output control": ("quiet",),
}

# Per command: the group a field is listed under where it differs from HELP_GROUPS.
_EXPERIMENT = dict.fromkeys(("epsilons", "runs", "delta", "seed"), "evaluation")
HELP_GROUP_OF: dict[str, dict[str, str]] = {
    "EvaluateUtilityConfig": {"mode": "evaluation"},
    "CompareConfig": {"mode": "evaluation"},
    "EmbeddingReportConfig": {"seed": "evaluation"},
    "EvaluateVectorsConfig": _EXPERIMENT,
    "StatsConfig": {"seed": "grid and words measured", "columns": "grid and words measured"},
    "CalibrateConfig": {"seed": "grid and words measured", "columns": "grid and words measured"},
}

# Per command: group titles that say more there than the shared ones.
_COMPUTED = " (only without --stats)"
HELP_TITLES: dict[str, dict[str, str]] = {
    "CalibrateConfig": {
        "grid and words measured": "statistics to compute first, as privacy-stats does" + _COMPUTED,
        "embedding and vocabulary": "embedding and vocabulary" + _COMPUTED,
        "nearest-neighbour search": "nearest-neighbour search" + _COMPUTED,
        # Spark is not among them: the session's file system reads --stats and writes the calibration.
    },
    "EvaluateVectorsConfig": {"evaluation": "experiment (seeded, on public words)"},
    "EmbeddingReportConfig": {"evaluation": "report", "mechanism": "metric of the spectrum section"},
}

# Per command: the settings it cannot run without (given as flags or in --config); a tuple of
# several names is a choice of one of them.
HELP_REQUIRED: dict[str, tuple[tuple[str, ...], ...]] = {
    "PerturbConfig": (("input", "input_table"), ("output", "output_table"), ("columns",), ("epsilon", "unit_budget")),
    "VectorsConfig": (("input", "input_table"), ("output", "output_table"), ("column",), ("epsilon",)),
    "StatsConfig": (("output",),),
    "CalibrateConfig": (("stats", "output"),),
    "EmbeddingReportConfig": (("output",),),
    "EvaluateUtilityConfig": (("input",), ("text_column",), ("label_column",), ("output",)),
    "RiskConfig": (("input",), ("text_column",), ("output",)),
    "CompareConfig": (("input",), ("text_column",), ("label_column",), ("output",)),
    "EvaluateVectorsConfig": (("output",),),
}

# Per command: settings it accepts (one model family) but does not use: kept out of its help.
HELP_HIDDEN: dict[str, tuple[str, ...]] = {"EmbeddingReportConfig": ("embeddings_dir",)}

# The placeholder of a flag's value in the help (choices show as {a,b}; numbers as N or X).
HELP_METAVARS: dict[str, str] = {
    "input": "PATH",
    "output": "PATH",
    "corpus": "PATH",
    "input_table": "TABLE",
    "output_table": "TABLE",
    "table_format": "FORMAT",
    "partition": "KEY=VALUE[/KEY=VALUE]",
    "master": "URL",
    "remote": "sc://HOST:PORT",
    "embeddings": f"{DEFAULT_EMBEDDINGS}|PATH",
    "embeddings_words": "FILE",
    "embeddings_dir": "DIR",
    "vocab_file": "FILE",
    "word_list": "FILE",
    "sensitive_words": "FILE",
    "stats": "DIR",
    "utility": "DIR",
    "risk": "DIR",
    "oov_token": "TOKEN",
    "columns": "COL[,COL...]",
    "column": "COL",
    "text_column": "COL",
    "label_column": "COL",
    "utility_metric": "METRIC",
    "privacy_unit": "token|document|column:NAME",
    "unit_budget": "E",
    "unit_budgets": "E[,E...]",
    "allocation": "scale|cap:K",
}
