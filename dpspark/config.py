"""One family of typed, validated configuration models: one per command.

The CLI flags are derived from these models (``dpspark.cli.add_model_arguments``: one
``--flag`` per field, its help text the field's description), and the YAML files in
``conf/``, the notebook widgets and the Python API (``dpspark.release``,
``dpspark.perturb_text``) go through the same ``parse``. Every field fails at
construction with its name, the value and what is allowed; ``parse`` turns pydantic's
errors into one ``ConfigError`` (exit code 2). ε, λ, δ, β and the seed are checked by
``dpspark.params`` (ε also against ``MIN_EPSILON``, by ``epsilon_value``).
"""

from __future__ import annotations

import io
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from dpspark import mechanisms, params, reserved, units
from dpspark._pydantic import BaseModel, Field, ValidationError, create_model, root_validator, validator
from dpspark.embeddings import DEFAULT_EMBEDDINGS, FORMATS
from dpspark.errors import ConfigError
from dpspark.mechanisms.geometry import check_lambda
from dpspark.text import LAYOUTS, OOV_POLICIES
from dpspark.wordfiles import read_word_list

Mechanism = Literal[tuple(mechanisms.REGISTRY)]  # type: ignore[valid-type]
Mode = Literal["error", "overwrite"]


def _comma_list(v: Any) -> Any:
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    elif isinstance(v, int | float):
        v = [v]
    return v


MIN_EPSILON = params.MIN_EPSILON
# The ε a first release starts from (README, "Choosing ε": the Mahalanobis mechanism at λ = 1 keeps
# under a tenth of the tokens there). ``--epsilon`` itself has no default; the example configuration,
# the perturb notebook and the Databricks bundle propose this one (tests/unit/test_shared_defaults.py).
FIRST_EPSILON = 6.0
epsilon_value = params.epsilon_value


def _sorted_unique(values: list[float], check: Any, example: str) -> list[float]:
    if not values:
        raise ValueError(f"the grid is empty: give at least one value, e.g. {example}")
    return sorted({check(v) for v in values})


def default_grids_text() -> str:
    """Each mechanism's default ε grid (its spec's ``default_epsilons``), mechanisms with one grid together:
    the help of every ``--epsilons``."""
    grids: dict[tuple[float, ...], list[str]] = {}
    for name, spec in mechanisms.REGISTRY.items():
        grids.setdefault(spec.default_epsilons, []).append(name)
    return "; ".join(f"{', '.join(names)} {','.join(f'{e:g}' for e in grid)}" for grid, names in grids.items())


EPSILONS_HELP = (
    "ε grid, comma-separated (default: each mechanism's own first grid, README's \"Choosing a mechanism and ε\": "
    + default_grids_text()
    + ")"
)


def _epsilon_grid(cls: Any, v: list[float] | None) -> list[float] | None:
    """A given ε grid sorted and checked; None (not given) leaves each mechanism its ``default_epsilons``."""
    return None if v is None else _sorted_unique(v, epsilon_value, "--epsilons 4,5,6,8,10")


_NAME_PART = re.compile(r"`?([A-Za-z0-9_]+)`?")


def _word_file(what: str) -> Any:
    """A word file's check, before Spark starts: UTF-8 text, one word per line (``wordfiles.read_word_list``);
    a path that is not a local file here is read (and refused if missing) where it is used."""

    def check(cls: Any, v: str | None) -> str | None:
        if v and Path(v).is_file():
            read_word_list(v, what)
        return v

    return check


def table_name_parts(name: str) -> list[str]:
    """``catalog.schema.table``, ``schema.table`` or ``table`` → its parts (backticks removed).

    Parts are letters, digits and ``_`` (what every metastore accepts); a bad name is a ValueError.
    """
    parts = name.split(".")
    matched = [_NAME_PART.fullmatch(p) for p in parts]
    if not 1 <= len(parts) <= 3 or not all(m and (p[0] == "`") == (p[-1] == "`") for m, p in zip(matched, parts)):
        raise ValueError(
            f"{name!r} is not a table name: expected catalog.schema.table, schema.table or table, each part "
            "letters, digits and _ (e.g. main.reviews.raw)"
        )
    return [m.group(1) for m in matched]


def before(*fields: str) -> Any:
    """A field check that runs on the raw value (before type conversion)."""
    return validator(*fields, pre=True, allow_reuse=True)


def after(*fields: str) -> Any:
    """A field check that runs on the converted value."""
    return validator(*fields, allow_reuse=True)


def whole(check: Any) -> Any:
    """A check of the whole model: ``check(model)`` raises ValueError on a bad combination.

    It sees a model built from the already validated fields (properties work), and runs only
    when every field passed.
    """

    def run(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
        check(cls.construct(**values))
        return values

    # pydantic keeps one root validator per __name__ along the class hierarchy: each check its own.
    run.__name__, run.__qualname__ = check.__name__, f"whole.{check.__qualname__}"
    return root_validator(skip_on_failure=True, allow_reuse=True)(run)


class Settings(BaseModel):
    """Base of every command's settings: frozen, unknown keys refused, ``lambda`` spelled either way."""

    class Config:
        extra = "forbid"
        allow_population_by_field_name = True
        frozen = True

    @validator("*", pre=True, allow_reuse=True)
    def _whole_number(cls, v: Any, field: Any) -> Any:
        """An integer setting refuses 1.5 as its flag does (pydantic would truncate it to 1), and a number
        refuses YAML's true and false (pydantic would read them as 1 and 0)."""
        kind = field.type_
        integer = isinstance(kind, type) and issubclass(kind, int) and not issubclass(kind, bool)
        if integer and isinstance(v, float) and not v.is_integer():
            raise ValueError(f"must be a whole number (e.g. 7), got {v!r}")
        if isinstance(v, bool) and (integer or (isinstance(kind, type) and issubclass(kind, float))):
            raise ValueError(f"must be a number, got {v!r}: write the number itself (e.g. 2), not true or false")
        return v

    @classmethod
    def parse(cls, values: dict[str, Any]) -> Any:
        """Build from a plain dict (YAML + flags + keywords); validation errors become ConfigError."""
        values = {str(k).replace("-", "_"): v for k, v in values.items()}
        try:
            return cls.parse_obj(values)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, values)) from None

    @classmethod
    def fields(cls) -> dict[str, tuple[str | None, Any, str]]:
        """name → (alias or None, annotation, description) of every setting (the CLI's flags)."""
        return {
            name: (f.alias if f.has_alias else None, f.outer_type_, f.field_info.description or "")
            for name, f in cls.__fields__.items()
        }

    @classmethod
    def default_text(cls, name: str) -> str:
        """A setting's default as a notebook widget's text: a list comma-separated, "" where there is none.
        A grid setting without a default of its own (``lambdas``) shows the class's ``default_lambdas``."""
        f = cls.__fields__[name]
        value = f.get_default()
        if value is None:
            value = getattr(cls, f"default_{name}", None)
        if value is None:
            return ""
        if isinstance(value, (list, tuple)):
            return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    @classmethod
    def from_sources(cls, config_file: str | None, flags: dict[str, Any]) -> Any:
        """The YAML file's settings (if any) overlaid with the flags that were given."""
        values = load_yaml(config_file) if config_file else {}
        values.update(flags)
        return cls.parse(values)


class OutputSettings(Settings):
    output: str | None = Field(default=None, description="output directory")
    mode: Mode = Field(
        default="error",
        description="error (default): refuse an existing output; overwrite: replace an earlier dpspark output "
        "(recognised by its manifest), never anything else",
    )
    seed: int | None = Field(default=None, description="fixed seed: tests and experiments only (warns)")
    quiet: bool = Field(
        default=False,
        description="silence logs, warnings and progress; results (tables, the output's path and public "
        "counts) still go to stdout, errors to stderr",
    )

    @after("seed")
    def _seed(cls, v: int | None) -> int | None:
        return params.check_seed(v)

    @after("output")
    def _output_name(cls, v: str | None) -> str | None:
        problem = None if v is None else reserved.output_path_problem(v)
        if problem:
            raise ValueError(problem)
        return v


# The master URLs Spark parses (spark-submit refuses other schemes, SparkContext other local forms).
_MASTER = re.compile(r"local(\[(\d+|\*)(\s*,\s*\d+)?\])?|local-cluster\[[\d\s,]+\]|yarn|(spark|k8s)://\S+")


class SparkSettings(Settings):
    engine: Literal["auto", "spark", "local"] = Field(
        default="auto",
        description="where the command runs: spark, local (this process, no JVM, on local files up to 1 GiB; "
        "every command that takes --engine), or auto (default: spark where pyspark and Java are found, else local)",
    )
    master: str | None = Field(default=None, description="Spark master URL (default local[*], or spark-submit's)")
    remote: str | None = Field(
        default=None, description="Spark Connect URL (sc://host:port) instead of a local/cluster session"
    )

    @after("master")
    def _master(cls, v: str | None) -> str | None:
        if v is not None and not _MASTER.fullmatch(v):
            raise ValueError(
                "not a Spark master URL: use local[*], local[N], spark://HOST:PORT, yarn or "
                "k8s://https://HOST:PORT (or leave master out for local[*])"
            )
        return v

    @after("remote")
    def _remote(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"sc://\S+", v):
            raise ValueError("not a Spark Connect URL: use sc://HOST:PORT (e.g. sc://localhost:15002)")
        return v


class EmbeddingSettings(Settings):
    embeddings: str = Field(default=DEFAULT_EMBEDDINGS, description=f"{DEFAULT_EMBEDDINGS} (default) or a path")
    embeddings_format: Literal[FORMATS] = Field(  # type: ignore[valid-type]
        default="auto", description=f"one of {', '.join(FORMATS)}"
    )
    embeddings_words: str | None = Field(default=None, description="word list for .npy embeddings")
    embeddings_dir: str | None = Field(
        default=None,
        description="a directory every executor reads at the same path (/Volumes/..., /dbfs/..., NFS): a user "
        "embedding is stored there once and memory-mapped, not shipped with every job",
    )
    vocab_size: int = Field(default=50_000, ge=2, description="output vocabulary: the first N words (50000)")
    vocab_file: str | None = Field(default=None, description="output vocabulary: a public word list, one per line")

    _vocab_file = after("vocab_file")(_word_file("vocabulary file"))


class IndexSettings(Settings):
    nn: Literal["exact", "annoy"] = Field(default="exact", description="nearest-neighbour search: exact or annoy")
    annoy_trees: int = Field(default=50, ge=1, description="annoy: number of trees (50)")
    annoy_search_k: int = Field(default=-1, ge=-1, description="annoy: search_k (-1 = annoy's default)")
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="exact search on a GPU: auto (the task's GPU where it has one), cpu or cuda"
    )

    @after("nn")
    def _nn(cls, v: str) -> str:
        import importlib.util

        if v == "annoy" and importlib.util.find_spec("annoy") is None:
            raise ValueError("nn annoy needs the optional package annoy: pip install 'dpspark[annoy]'")
        return v

    @after("device")
    def _device(cls, v: str) -> str:
        import importlib.util

        if v == "cuda" and importlib.util.find_spec("torch") is None:
            raise ValueError("device cuda needs the optional package torch: pip install 'dpspark[gpu]'")
        return v


class ReleaseSettings(OutputSettings, SparkSettings):
    """What every release (perturb, release-vectors) shares: paths, ETL partition, ledger, Spark."""

    input: str | None = Field(default=None, description="input Parquet file or directory")
    input_table: str | None = Field(
        default=None, description="input metastore / Unity Catalog table (catalog.schema.table) instead of --input"
    )
    output_table: str | None = Field(
        default=None,
        description="output table (catalog.schema.table) instead of --output; its ledger is the table "
        "<name>__dpspark_ledger beside it",
    )
    table_format: str | None = Field(
        default=None,
        description="format of a new output table (default: the session's, delta on Databricks, parquet locally)",
    )
    partition: str | None = Field(
        default=None,
        description="ETL: release one input partition (e.g. date=2026-11-21) into the same partition of --output "
        "(or --output-table)",
    )
    allow_rerelease: bool = Field(
        default=False,
        description="release records again on purpose (spends privacy again; recorded in the ledger)",
    )
    partitions: int | None = Field(
        default=None,
        ge=1,
        description="tasks to read the input with (smaller read splits; raw rows are never shuffled)",
    )
    batch_rows: int = Field(default=10_000, description="rows per Arrow batch (10000; at most 2**31 - 1)")

    @after("partition")
    def _partition(cls, v: str | None) -> str | None:
        if v is not None:
            from dpspark.ledger import parse_spec

            parse_spec(v)
        return v

    @after("batch_rows")
    def _batch_rows(cls, v: int) -> int:
        if not 1 <= v < 2**31:  # spark.sql.execution.arrow.maxRecordsPerBatch is a Java int
            raise ValueError(f"batch_rows must be in [1, 2**31 - 1] (a Java int in Spark), got {v}; e.g. 10000")
        return v

    @after("input_table", "output_table")
    def _table(cls, v: str | None, field: Any) -> str | None:
        if v is not None:
            table_name_parts(v)
        problem = reserved.output_table_problem(v) if v is not None and field.name == "output_table" else None
        if problem:
            raise ValueError(problem)
        return v

    @whole
    def _one_input_one_output(self) -> None:
        if self.input and self.input_table:
            raise ValueError("choose one of input (a path) and input_table (a table)")
        if self.output and self.output_table:
            raise ValueError("choose one of output (a path) and output_table (a table)")


def mechanism_parameter_fields() -> dict[str, tuple[str, Any, str]]:
    """Every registered mechanism's own parameters: field name → (alias, type, each owner's description).
    A name that two mechanisms share has one type (a registry error otherwise)."""
    found: dict[str, tuple[str, Any, list[str]]] = {}
    for name, spec in mechanisms.REGISTRY.items():
        for field_name, f in spec.__fields__.items():
            if field_name in ("name", "epsilon") or name == "laplace":
                continue
            alias, kind, texts = found.get(field_name, (f.alias, f.outer_type_, {}))
            if kind != f.outer_type_:
                raise TypeError(f"parameter {field_name} of {name} is {f.outer_type_}, elsewhere {kind}: use one type")
            texts.setdefault(f.field_info.description or "", []).append(name)  # one text, its owners
            found[field_name] = (alias, kind, texts)
    return {
        k: (alias, kind, "; ".join(f"{', '.join(owners)}: {text}" for text, owners in texts.items()))
        for k, (alias, kind, texts) in found.items()
    }


MechanismParameters = create_model(
    "MechanismParameters",
    __base__=Settings,
    **{
        name: (kind | None, Field(default=None, alias=alias, description=text))
        for name, (alias, kind, text) in mechanism_parameter_fields().items()
    },
)


class MechanismSettings(MechanismParameters):  # type: ignore[misc, valid-type]
    """The mechanism and its parameters, one optional field per parameter of every registered mechanism
    (``--lambda``, ``--t``, ``--beta``, ...): ``spec`` validates them against the chosen mechanism."""

    mechanism: Mechanism = Field(
        default="mahalanobis",
        description=f"word mechanism: {', '.join(mechanisms.REGISTRY)} (default mahalanobis)",
    )

    def mechanism_values(self) -> dict[str, Any]:
        """The parameters given for the mechanism (by alias), None left out: the spec's defaults apply."""
        return {
            alias: getattr(self, name)
            for name, (alias, _, _) in mechanism_parameter_fields().items()
            if getattr(self, name, None) is not None
        }

    def spec_for(self, epsilon: float) -> mechanisms.MechanismSpec:
        """The validated spec of this mechanism at ``epsilon`` (ConfigError on a bad or foreign parameter)."""
        return mechanisms.parse({"name": self.mechanism, "epsilon": epsilon, **self.mechanism_values()})


def check_unit_mechanism(name: str, budget: float, release: units.PrivacyUnit | None = None) -> None:
    """The mechanisms a privacy unit other than the token cannot take, refused in one sentence. ``release``: the
    unit of a release (perturb), where a text-level mechanism's draws share a unit's budget as tokens do (a
    document's, or a person's over their rows); without it (the measuring commands, which measure per token) a
    text-level mechanism is refused."""
    kind = mechanisms.REGISTRY[name].guarantee_type
    if kind == "none":
        units.unit_bound(kind, budget, None)  # its one sentence
    if not mechanisms.REGISTRY[name].text_level:
        return
    if release is None:
        raise ValueError(
            f"{name} draws whole documents, which the measuring commands do not measure under a privacy unit yet: "
            "use the token unit, or another mechanism (perturb releases it per document or per person)"
        )


class PerturbConfig(ReleaseSettings, EmbeddingSettings, IndexSettings, MechanismSettings):
    """Settings of ``dpspark perturb``. ``epsilon`` has no default: the privacy level is a choice."""

    columns: list[str] = Field(default_factory=list, description="text column(s) to perturb, comma-separated")
    epsilon: float | None = Field(
        default=None,
        description=f"privacy parameter ε >= {MIN_EPSILON:g} per token (required with the token unit, no default)",
    )
    privacy_unit: str = Field(
        default="token",
        description="what one guarantee protects: token (default: each token alone), document (one row, all its "
        "text columns together) or column:NAME[@ID_SPACE] (every row that shares NAME's value: a person); give "
        "--unit-budget; docs/privacy-units.md",
    )
    unit_budget: float | None = Field(
        default=None,
        description="E: each unit's budget, spread over its tokens by --allocation (in place of --epsilon when the "
        "unit is not the token)",
    )
    allocation: str = Field(
        default="scale",
        description="scale (default: each token of a unit of n tokens gets E/n) or cap:K (E/K each; the tokens "
        "after a unit's K-th are released as the placeholder)",
    )
    over_cap: Literal["placeholder", "refuse"] = Field(
        default="placeholder",
        description="under cap:K, a unit's tokens after the K-th: placeholder (default) or refuse (refuse the run, "
        "naming how many units exceed K)",
    )
    vocab_from_corpus: bool = Field(
        default=False, description="derive the vocabulary from the input (publishes its frequent words; warned)"
    )
    recall_queries: int = Field(default=2000, ge=0, description="noisy queries to measure annoy's recall (2000)")
    oov: Literal[OOV_POLICIES] = Field(  # type: ignore[valid-type]
        default="unk", description=f"out-of-vocabulary policy: {', '.join(OOV_POLICIES)} (default unk)"
    )
    oov_token: str = Field(default="[UNK]", description="placeholder of the unk policy ([UNK])")
    layout: Literal[LAYOUTS] = Field(  # type: ignore[valid-type]
        default="single",
        description="single (default: tokens joined by single spaces); lines (keeps line breaks) or keep "
        "(copies whitespace verbatim): both outside the guarantee",
    )
    keep_original: bool = Field(
        default=False, description="also write the raw text as COL_original (the output is then NOT private)"
    )

    _epsilon = before("epsilon")(lambda cls, v: None if v is None else epsilon_value(v))
    _unit_budget = before("unit_budget")(lambda cls, v: None if v is None else units.check_unit_budget(v))

    _privacy_unit = before("privacy_unit")(lambda cls, v: units.PrivacyUnit.parse(v).label())
    _allocation = before("allocation")(lambda cls, v: units.Allocation.parse(v).label())

    @after("oov_token")
    def _oov_token(cls, v: str) -> str:
        if not v or any(ch.isspace() for ch in v):  # dpspark.text.TextPerturber's rule, checked before Spark runs
            raise ValueError(f"oov_token must be one non-empty token without whitespace (e.g. [UNK]), got {v!r}")
        return v

    @before("columns")
    def _columns(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",")]
        if isinstance(v, list) and any(not isinstance(c, str) or not c for c in v):
            raise ValueError("column names must be non-empty")
        return v

    @whole
    def _consistent(self) -> None:
        self._check_unit()
        if not self.vocab_file and not self.vocab_from_corpus:
            self.spec.check_vocabulary(self.vocab_size)  # validates the mechanism's parameters too
        self.spec  # noqa: B018 - validates the mechanism's parameters
        if len(set(self.columns)) != len(self.columns):
            raise ValueError(f"columns are listed twice: {self.columns}")
        if self.vocab_file and self.vocab_from_corpus:
            raise ValueError("choose one of vocab_file and vocab_from_corpus")

    def _check_unit(self) -> None:
        """One of ε (per token) and E (per unit), as the unit asks; a unit's settings only with a unit; the
        mechanisms and policies a unit cannot take refused (``dpspark.units``)."""
        if self.privacy_unit == "token":
            if self.epsilon is None:
                raise ValueError("epsilon is required (choose the privacy level explicitly, e.g. --epsilon 6)")
            if self.unit_budget is not None or self.allocation != "scale" or self.over_cap != "placeholder":
                raise ValueError(
                    "unit_budget, allocation and over_cap apply to a privacy unit other than the token: give "
                    "--privacy-unit document with --unit-budget E, or --epsilon alone"
                )
            return
        if self.epsilon is not None:
            raise ValueError(
                f"choose one of epsilon (per token) and unit_budget (per {self.privacy_unit}): with --privacy-unit "
                f"{self.privacy_unit} give --unit-budget E, each token then gets its share"
            )
        if self.unit_budget is None:
            raise ValueError(f"a {self.privacy_unit} unit needs its budget: give --unit-budget E (e.g. 60)")
        check_unit_mechanism(self.mechanism, self.unit_budget, self.unit)
        if (
            mechanisms.REGISTRY[self.mechanism].text_level
            and self.allocation_of.kind == "cap"
            and self.over_cap == "refuse"
            and self.unit.kind == "document"  # a column: unit's count pass counts the draws (dpspark.run.perturb)
        ):
            raise ValueError(
                f"{self.mechanism}'s draws per document follow the vocabulary, which the count before the release "
                "does not see: use --over-cap placeholder (the draws after the K-th are the placeholder)"
            )
        if self.unit.column in self.columns:
            raise ValueError(
                f"the unit column {self.unit.column!r} is also a text column to perturb: a unit's id must stay as it "
                "is to group its rows; choose another id column, or leave this one out of --columns"
            )
        if self.oov == "drop":
            raise ValueError(
                "oov drop changes a unit's number of tokens, on which its tokens' epsilon depends: use unk or random "
                "with a privacy unit"
            )

    @property
    def unit(self) -> units.PrivacyUnit:
        return units.PrivacyUnit.parse(self.privacy_unit)

    @property
    def allocation_of(self) -> units.Allocation:
        return units.Allocation.parse(self.allocation, self.over_cap)

    @property
    def spec(self) -> mechanisms.MechanismSpec:
        """The mechanism of this run, validated (its parameters, ε included). Under a privacy unit other than the
        token its ε is the unit's budget E; each token is drawn at its share (``WordMechanism.sample_at``)."""
        return self.spec_for(self.epsilon if self.epsilon is not None else self.unit_budget)


class VectorsConfig(ReleaseSettings):
    """Settings of ``dpspark release-vectors`` (PrivEmb or M1)."""

    column: str = Field(
        default="", description="array<float>/array<double>/ML vector column, or a text column (mean GloVe)"
    )
    epsilon: float = Field(description=f"ε >= {MIN_EPSILON:g} (required)")
    delta: float = Field(default=1e-6, description="δ in (0, 1) (1e-6)")
    beta: float = Field(default=0.8, description="β in (0, 1): projection distortion (0.8)")
    dim: int | None = Field(default=None, ge=1, description="m, overriding the formula")
    mechanism: Literal["privemb", "m1"] = Field(default="privemb", description="privemb (default) or m1")
    embeddings: str = Field(default=DEFAULT_EMBEDDINGS, description="for text columns: glove-6b-50d or a path")
    embeddings_dir: str | None = Field(
        default=None,
        description="a directory every executor reads at the same path (/Volumes/..., /dbfs/..., NFS): a user "
        "embedding is stored there once and memory-mapped, not shipped with every job",
    )

    _epsilon = before("epsilon")(lambda cls, v: epsilon_value(v))
    _delta = before("delta")(lambda cls, v: params.check_delta(v))
    _beta = before("beta")(lambda cls, v: params.check_beta(v))

    @after("column")
    def _column(cls, v: str) -> str:
        if not v:
            raise ValueError("name the column to release (--column COL)")
        return v


def _grid_value(x: Any) -> float | str:
    """A grid value: a number where it reads as one, else the word (e.g. similarity=cosine)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    text = str(x).strip()
    try:
        return float(text)
    except ValueError:
        return text


def parse_grid(v: Any) -> dict[str, list[float | str]]:
    """``lambda=0,1 t=0.5`` (or a YAML mapping) → {"lambda": [0.0, 1.0], "t": [0.5]}: each mechanism's own
    axes; values that are not numbers stay words (``similarity=cosine,euclidean``) for the mechanism to check."""
    if v is None or v == "" or v == []:
        return {}
    if isinstance(v, dict):
        return {str(k): [_grid_value(x) for x in _comma_list(x)] for k, x in v.items()}
    # "lambda=0,1 t=0.5" as one value or as several (the help's quoted example is one argument)
    parts = v.split() if isinstance(v, str) else [p for x in v for p in str(x).split()]
    out: dict[str, list[float | str]] = {}
    for part in parts:
        key, sep, values = part.partition("=")
        if not sep or not key or not values:
            raise ValueError(f"grid entries are NAME=V1,V2 (e.g. lambda=0,1 t=0.5), got {part!r}")
        out[key] = [_grid_value(x) for x in values.split(",") if x.strip()]
    return out


class GridSettings(Settings):
    """A grid of mechanism settings: mechanisms × ε × each mechanism's own axes.

    ``--mechanisms laplace,tem,santext --epsilons 1,2,5 --grid lambda=0,1 t=0.5``: every mechanism
    takes the grid axes that are its parameters (lambda for mahalanobis and vickrey, t for vickrey,
    beta or gamma for tem, position_gamma for 1-diffractor) and its defaults for the rest. Without
    ``--mechanisms`` the grid is today's λ grid of the noise mechanisms (``--lambdas``; λ = 0 is the Laplace mechanism).
    """

    mechanisms: list[str] | None = Field(
        default=None,
        description=f"mechanisms of the grid, comma-separated, from {', '.join(mechanisms.REGISTRY)} "
        "(default: the λ grid of laplace/mahalanobis)",
    )
    grid: dict[str, list[float | str]] = Field(
        default_factory=dict,
        description="the mechanisms' own axes, e.g. --mechanisms vickrey,tem --grid 'lambda=0,1 t=0.25,0.5 "
        "beta=0.001' (each mechanism takes its own; every axis must belong to one of --mechanisms)",
    )

    default_lambdas: ClassVar[tuple[float, ...]] = (0.0, 0.25, 0.5, 0.75, 1.0)

    _mechanisms = before("mechanisms")(lambda cls, v: None if v is None else _comma_list(v))
    _grid = before("grid")(lambda cls, v: parse_grid(v))

    @after("mechanisms")
    def _known(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            unknown = [m for m in v if m not in mechanisms.REGISTRY]
            if unknown or not v:
                raise ValueError(f"mechanisms must be among {', '.join(mechanisms.REGISTRY)}, got {v}")
            v = list(dict.fromkeys(v))
        return v

    @whole
    def _settings_valid(self) -> None:
        settings = self.settings()
        if getattr(self, "vocab_size", None) and not getattr(self, "vocab_file", None):
            for s in settings:
                s.check_vocabulary(self.vocab_size)

    def settings(self) -> list[mechanisms.MechanismSpec]:
        """Every setting of the grid, validated, in a stable order (mechanism, its axes, ε)."""
        import itertools

        grid = dict(self.grid)
        if getattr(self, "lambdas", None) is not None:
            grid.setdefault("lambda", list(self.lambdas))
        names = self.mechanisms
        single = getattr(self, "mechanism", None)
        if names is None and single not in (None, "mahalanobis", "laplace"):
            names = [single]
        if names is None:
            other = sorted(set(grid) - {"lambda"})
            if other:
                raise ValueError(
                    f"grid axes {other} need --mechanisms naming the mechanisms they belong to (without it the "
                    "grid is the λ grid of laplace and mahalanobis)"
                )
            lams = grid.get("lambda", list(self.default_lambdas))
            chosen = [("laplace", {})] if 0.0 in lams else []
            chosen += [("mahalanobis", {"lambda": lam}) for lam in lams if lam != 0.0]
        else:
            # laplace is λ = 0: a lambda axis belongs to mahalanobis or vickrey, never to laplace
            def axes_of(name: str) -> list[str]:  # its parameters, and an old spelling the grid still uses
                spec = mechanisms.REGISTRY[name]
                return [*spec.parameter_names(), *(old for old, new in spec.renamed.items() if new not in grid)]

            own_axes = {p for m in names if m != "laplace" for p in axes_of(m)}
            unused = set(grid) - own_axes
            if unused:
                raise ValueError(
                    f"grid axes {sorted(unused)} are parameters of none of the mechanisms {names}"
                    + (" (laplace is λ = 0: add mahalanobis for λ > 0)" if "lambda" in unused else "")
                )
            chosen = []
            for name in names:
                own = [p for p in axes_of(name) if p in grid and name != "laplace"]
                for values in itertools.product(*(grid[p] for p in own)):
                    chosen.append((name, dict(zip(own, values))))
        specs = []
        for name, values in chosen:
            if name == "mahalanobis" and values.get("lambda") == 0.0:
                name, values = "laplace", {}  # the same mechanism: one setting, named as the papers do
            for e in self.grid_values() or mechanisms.REGISTRY[name].default_epsilons:
                spec = mechanisms.parse({"name": name, "epsilon": e, **values})
                if spec not in specs:
                    specs.append(spec)
        return specs

    def grid_values(self) -> list[float] | None:
        """The grid's ε values (each setting's ε; a unit's budget E where a privacy unit takes them)."""
        return getattr(self, "epsilons", None)

    def grid_epsilons(self) -> list[float]:
        """Every ε of the grid, sorted: ``--epsilons`` where given, else the union of the mechanisms' default
        grids (what a manifest records)."""
        return sorted({s.epsilon for s in self.settings()})


class UnitGridSettings(Settings):
    """A measuring command's privacy unit: the token (the grid is ε per token) or the document (the grid is each
    row's budget E, its tokens sharing it under the allocation). privacy-stats, privacy-risk, evaluate-utility
    and compare (``dpspark.run.settings.unit_grid``)."""

    privacy_unit: str = Field(
        default="token",
        description="what one guarantee protects: token (default: the grid is --epsilons per token), document "
        "(one row's text: the grid is --unit-budgets, each row's tokens sharing E) or column:NAME[@ID_SPACE] (every "
        "row that shares NAME's value: a person's tokens over all their rows share E); docs/privacy-units.md",
    )
    unit_budgets: list[float] | None = Field(
        default=None,
        description="the grid of unit budgets E, comma-separated, in place of --epsilons when the unit is not the "
        "token",
    )
    allocation: str = Field(
        default="scale",
        description="how a unit's budget is spread: scale (default: E/n to each of n tokens) or cap:K (E/K each; "
        "a unit's tokens after the K-th become the placeholder)",
    )

    _unit_budgets = before("unit_budgets")(
        lambda cls, v: None if v is None else [units.check_unit_budget(x) for x in _comma_list(v)]
    )

    _privacy_unit = before("privacy_unit")(lambda cls, v: units.PrivacyUnit.parse(v).label())
    _allocation = before("allocation")(lambda cls, v: units.Allocation.parse(v).label())

    @whole
    def _unit_grid(self) -> None:
        if self.privacy_unit == "token":
            if self.unit_budgets is not None or self.allocation != "scale":
                raise ValueError(
                    "unit_budgets and allocation apply to a privacy unit other than the token: give --privacy-unit "
                    "document with --unit-budgets, or --epsilons alone"
                )
            return
        if self.epsilons is not None:
            raise ValueError(
                f"with --privacy-unit {self.privacy_unit} the grid is the unit's budget: give --unit-budgets E,... in "
                "place of --epsilons (each token then gets its share)"
            )
        if not self.unit_budgets:
            raise ValueError(f"a {self.privacy_unit} unit needs its budgets: give --unit-budgets (e.g. 20,60,200)")
        for spec in self.settings():
            check_unit_mechanism(spec.name, spec.epsilon)
        texts = [*getattr(self, "columns", []), getattr(self, "text_column", None)]
        if self.unit.column is not None and self.unit.column in texts:
            raise ValueError(
                f"the unit column {self.unit.column!r} is also the text column: a unit's id groups the rows whose text "
                "is measured; choose another id column"
            )

    @property
    def unit(self) -> units.PrivacyUnit:
        return units.PrivacyUnit.parse(self.privacy_unit)

    def grid_values(self) -> list[float] | None:
        return self.epsilons if self.privacy_unit == "token" else self.unit_budgets

    @property
    def allocation_of(self) -> units.Allocation:
        return units.Allocation.parse(self.allocation)


class StatsConfig(OutputSettings, SparkSettings, EmbeddingSettings, IndexSettings, UnitGridSettings, GridSettings):
    """Settings of ``dpspark privacy-stats`` (Nw/Sw over a grid of mechanisms, ε and their parameters)."""

    epsilons: list[float] | None = Field(default=None, description=EPSILONS_HELP)
    lambdas: list[float] | None = Field(
        default=None, description="λ grid, comma-separated (default 0,0.25,0.5,0.75,1; same as --grid lambda=...)"
    )
    runs: int = Field(default=100, description="K: runs of the mechanism per word (100)")
    words: int = Field(default=500, ge=1, description="number of vocabulary words sampled uniformly (500)")
    words_seed: int = Field(default=0, ge=0, description="seed of that public sample (0)")
    word_list: str | None = Field(default=None, description="measure these words instead (one per line)")
    corpus: str | None = Field(default=None, description="measure the most frequent vocabulary words of this Parquet")
    columns: list[str] = Field(default_factory=list, description="text columns of --corpus")
    words_per_task: int = Field(default=50, ge=1, description="words per work item (50)")
    runs_per_task: int | None = Field(default=None, ge=1, description="runs per work item (all K)")

    _lists = before("epsilons", "lambdas")(lambda cls, v: _comma_list(v))
    _columns = before("columns")(PerturbConfig._columns.__func__)
    _word_list = after("word_list")(_word_file("word list"))

    _epsilons = after("epsilons")(_epsilon_grid)

    @after("lambdas")
    def _lambdas(cls, v: list[float] | None) -> list[float] | None:
        return None if v is None else _sorted_unique(v, check_lambda, "--lambdas 0,1")

    @after("runs")
    def _runs(cls, v: int) -> int:
        if v < 2:
            raise ValueError(f"K must be at least 2 to say anything about Nw and Sw, got {v}")
        return v

    @whole
    def _sources(self) -> None:
        if self.word_list and self.corpus:
            raise ValueError("choose one of word_list and corpus")
        if self.corpus and not self.columns:
            raise ValueError("corpus needs --columns: the text columns to take words from")
        if self.privacy_unit != "token" and not self.corpus:
            raise ValueError(
                f"a {self.privacy_unit} unit's budget is shared by the tokens of each unit: give the documents "
                "(--corpus PARQUET --columns COL; each row is one, or a part of its person's under a column: unit), "
                "whose shape sets the per-token ε measured"
            )


class CalibrateConfig(StatsConfig):
    """Settings of ``dpspark calibrate``: bounds, and the statistics to read (or compute first)."""

    stats: str | None = Field(
        default=None,
        description="a privacy-stats output directory to read (without it the statistics are computed into --output)",
    )
    max_nw_fraction: float | None = Field(
        default=None, gt=0, le=1, description="bound: Nw <= fraction·K, a fraction of the K runs (0.5)"
    )
    min_sw: float | None = Field(
        default=None,
        ge=1,
        description="bound: Sw >= this count of distinct outputs among the K runs (so at most K; a bound above "
        "the statistics' K is refused)",
    )
    percentile: float = Field(default=100.0, gt=0, le=100, description="100 (default) = worst case; e.g. 95")
    utility: str | None = Field(default=None, description="an evaluate-utility output directory (utility bound)")
    risk: str | None = Field(default=None, description="a privacy-risk output directory (re-identification bound)")
    max_utility_loss: float | None = Field(
        default=None, ge=0, le=1, description="bound: baseline minus mean utility <= this (e.g. 0.02)"
    )
    utility_metric: str = Field(default="accuracy", description="metric of the utility bound (accuracy)")
    max_reidentification: float | None = Field(
        default=None, ge=0, le=1, description="bound: share of corpus tokens recovered top-1 <= this (e.g. 0.2)"
    )

    @whole
    def _joint_sources(self) -> None:
        if self.max_utility_loss is not None and not self.utility:
            raise ValueError("max_utility_loss needs --utility DIR (an evaluate-utility output)")
        if self.max_reidentification is not None and not self.risk:
            raise ValueError("max_reidentification needs --risk DIR (a privacy-risk output)")

    @property
    def joint(self) -> bool:
        """True when utility or risk bounds are given (Xu et al. §6: most private setting meeting them)."""
        return self.max_utility_loss is not None or self.max_reidentification is not None

    @property
    def nw_sw_bounds(self) -> bool:
        return self.max_nw_fraction is not None or self.min_sw is not None


class CorpusGridSettings(
    OutputSettings, SparkSettings, EmbeddingSettings, IndexSettings, UnitGridSettings, GridSettings
):
    """What the corpus evaluations share (evaluate-utility, privacy-risk): a Parquet input,
    one text column, and the (ε, λ) grid of the word mechanism to evaluate."""

    input: str | None = Field(default=None, description="input Parquet file or directory")
    text_column: str = Field(default="", description="the text column to perturb")
    epsilons: list[float] | None = Field(default=None, description=EPSILONS_HELP)
    lambdas: list[float] | None = Field(
        default=None, description="λ grid, comma-separated (default 0,0.5,1; laplace: 0)"
    )
    mechanism: Mechanism = Field(
        default="mahalanobis",
        description="mahalanobis (default: every λ of the grid), laplace (λ = 0 only), or one other mechanism "
        "(or give several with --mechanisms)",
    )
    default_lambdas: ClassVar[tuple[float, ...]] = (0.0, 0.5, 1.0)

    _lists = before("epsilons", "lambdas")(lambda cls, v: _comma_list(v))
    _epsilons = after("epsilons")(_epsilon_grid)
    _lambdas = after("lambdas")(StatsConfig._lambdas.__func__)

    @after("text_column")
    def _text_column(cls, v: str) -> str:
        if not v:
            raise ValueError("name the text column (--text-column COL)")
        return v

    @whole
    def _columns_named(self) -> None:
        # Fields left at their default "" are not validated one by one: name every missing flag here.
        missing = [f"--{n.replace('_', '-')}" for n in ("text_column", "label_column") if getattr(self, n, None) == ""]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise ValueError(f"{' and '.join(missing)} {verb} required: name the input's column(s) to use")

    @whole
    def _laplace_grid(self) -> None:
        if self.mechanism == "laplace" and self.mechanisms is None and self.lambdas != [0.0]:
            raise ValueError(
                f"the laplace mechanism is λ = 0; got lambdas = {self.lambdas}: pass --lambdas 0, or use "
                "--mechanism mahalanobis (whose λ = 0 is the Laplace mechanism)"
            )


class EvaluateUtilityConfig(CorpusGridSettings):
    """Settings of ``dpspark evaluate-utility``: downstream utility of perturbed text (Xu et al. §5.2,
    Feyisetan et al. §5). ``mode`` is the evaluation mode here, as the command's contract names it;
    replacing an earlier output is ``overwrite``."""

    label_column: str = Field(default="", description="the label column (string, integer or boolean; 2+ classes)")
    mode: Literal["train-time", "test-time", "both"] = Field(  # type: ignore[assignment]
        default="both",
        description="the evaluation mode here (not the write mode): train-time (train on perturbed, test on "
        "plain), test-time (train on plain, test on perturbed) or both (default); to replace an earlier output "
        "use --overwrite",
    )
    overwrite: bool = Field(
        default=False,
        description="replace an earlier evaluate-utility output at --output (this command's write mode: its "
        "--mode is the evaluation mode)",
    )
    repeats: int = Field(default=3, ge=1, description="R: independent perturbations per (ε, λ) (3)")
    model: Literal["tfidf-logreg", "embedding-logreg"] = Field(
        default="tfidf-logreg",
        description="tfidf-logreg (default: hashed token counts × IDF → logistic regression) or embedding-logreg "
        "(mean GloVe vector → logistic regression)",
    )
    test_fraction: float = Field(default=0.3, gt=0, lt=1, description="share of rows in the test split (0.3)")
    split_seed: int = Field(
        default=42, ge=0, description="seed of the train/test split (42; a fixed split, not noise randomness)"
    )

    @after("label_column")
    def _label_column(cls, v: str) -> str:
        if not v:
            raise ValueError("name the label column (--label-column COL)")
        return v

    @whole
    def _distinct_columns(self) -> None:
        if self.label_column == self.text_column:
            raise ValueError(f"text_column and label_column are the same column ({self.text_column!r})")

    @property
    def write_mode(self) -> str:
        return "overwrite" if self.overwrite else "error"


class RiskConfig(CorpusGridSettings):
    """Settings of ``dpspark privacy-risk``: how much of a corpus an informed attacker recovers."""

    runs: int = Field(
        default=20, description="K: runs of the mechanism per corpus word, half to fit the attack, half to score (20)"
    )
    sensitive_words: str | None = Field(
        default=None, description="a file of sensitive words (names, places), one per line: reported separately"
    )
    max_words: int | None = Field(
        default=None, ge=1, description="measure only the N most frequent corpus words (default: all)"
    )
    words_per_task: int = Field(default=200, ge=1, description="words per work item (200)")
    precision: float = Field(
        default=0.01,
        gt=0,
        le=1,
        description="settings without exact likelihoods: double the fitting runs until top-1 and top-5 move by "
        "less than this (0.01)",
    )
    max_fit_runs: int | None = Field(
        default=None,
        ge=1,
        description="at most this many fitting runs per word when doubling them (default 16 × K/2: four doublings)",
    )
    doc_runs: int = Field(
        default=10, ge=1, description="runs per row of the per-document exposure of --sensitive-words (10)"
    )

    _sensitive_words = after("sensitive_words")(_word_file("sensitive words file"))

    @after("runs")
    def _runs(cls, v: int) -> int:
        if v < 2 or v % 2:
            raise ValueError(f"K must be even and at least 2 (half fits the attack, half scores it), got {v}")
        return v


class CompareConfig(EvaluateUtilityConfig, RiskConfig):
    """Settings of ``dpspark compare``: mechanisms side by side on a labelled dataset (utility,
    re-identification, the field's privacy metrics) and at equal empirical privacy."""

    epsilons: list[float] | None = Field(default=None, description=EPSILONS_HELP)
    target_reidentification: float = Field(
        default=0.10,
        gt=0,
        lt=1,
        description="equal privacy: each mechanism's ε at which top-1 re-identification reaches this share (0.10)",
    )
    target_nw_fraction: float = Field(
        default=0.20,
        gt=0,
        lt=1,
        description="equal privacy, second target: the ε at which the mean Nw reaches this fraction of K (0.20)",
    )
    refine: int = Field(
        default=2,
        ge=0,
        le=4,
        description="rounds of extra ε points where the re-identification target falls between two (2)",
    )
    max_utility_loss: float | None = Field(
        default=None, ge=0, le=1, description="bound: baseline minus mean utility <= this (e.g. 0.02)"
    )
    utility_metric: str = Field(default="accuracy", description="metric of the utility bound and the plots (accuracy)")
    max_reidentification: float | None = Field(
        default=None, ge=0, le=1, description="bound: share of corpus tokens recovered top-1 <= this (e.g. 0.2)"
    )
    overwrite: bool = Field(
        default=False,
        description="replace an earlier compare output at --output (this command's write mode: its --mode is the "
        "evaluation mode)",
    )
    examples: int = Field(default=3, ge=0, le=20, description="before/after example rows in the report (3)")
    mldp_words: int = Field(default=25, ge=1, description="MLDP's Nw/Sw: words sampled from the vocabulary (25)")
    mldp_trials: int = Field(default=100, ge=2, description="MLDP's Nw/Sw: trials per word (100)")
    pp_tokens: int | None = Field(
        default=None, ge=1, description="PP over each document's first N tokens (default: every token)"
    )
    solve: bool = Field(
        default=False,
        description="per mechanism, search the ε where each bound is met to --solve-tolerance (a bracketing "
        "search in log ε over measured points; needs --max-reidentification or --max-utility-loss; replaces "
        "--refine)",
    )
    solve_tolerance: float = Field(
        default=0.01,
        gt=0,
        lt=1,
        description="--solve: a bound is met to this: top-1 (the upper end of its interval) or the utility loss, "
        "within it below the bound (0.01)",
    )
    solve_rounds: int = Field(default=6, ge=1, le=20, description="--solve: at most this many rounds of points (6)")

    @after("solve_tolerance", "solve_rounds")
    def _solve_only(cls, v: Any, values: dict[str, Any], field: Any) -> Any:
        """Checked only when given (pydantic leaves defaults alone): a --solve setting without --solve would
        change nothing, and the user would believe it did."""
        if not values.get("solve", True):
            flag = "--" + field.name.replace("_", "-")
            raise ValueError(f"{flag} sets the ε search of --solve, which is off: add --solve, or leave {flag} out")
        return v

    @whole
    def _solve_needs_a_bound(self) -> None:
        if self.solve and self.max_reidentification is None and self.max_utility_loss is None:
            raise ValueError(
                "--solve searches the ε that meets a bound: give --max-reidentification and/or --max-utility-loss"
            )

    @after("utility_metric")
    def _utility_metric(cls, v: str) -> str:
        from dpspark.utility import BINARY_METRICS, MULTICLASS_METRICS

        known = tuple(dict.fromkeys(BINARY_METRICS + MULTICLASS_METRICS))
        if v not in known:
            raise ValueError(f"utility_metric must be one of {', '.join(known)}, got {v!r}")
        return v

    @property
    def write_mode(self) -> str:
        return "overwrite" if self.overwrite else "error"


class EmbeddingReportConfig(OutputSettings, EmbeddingSettings):
    """Settings of ``dpspark embedding-report`` (public data only: no privacy noise)."""

    lam: float = Field(default=1.0, alias="lambda", description="λ in [0, 1] for the ε factor (1)")
    sample: int = Field(default=5000, ge=0, description="words whose k-NN percentiles are computed (0 = all)")
    seed: int | None = Field(  # type: ignore[assignment]
        default=0, description="seed of the word sample (0): a statistic of public data, so fixed by default"
    )

    _lam = before("lam")(lambda cls, v: check_lambda(v))

    @property
    def metric(self) -> dict[str, float]:
        """The spectrum section's metric parameters (``dpspark.mechanisms.geometry.spectrum``'s)."""
        return {"lam": self.lam}


class EvaluateVectorsConfig(OutputSettings):
    """Settings of ``dpspark evaluate-vectors`` (a seeded experiment on public words)."""

    epsilons: list[float] = Field(default_factory=lambda: [1.0, 2.0, 5.0], description="ε of the approximation runs")
    betas: list[float] = Field(default_factory=lambda: [0.5, 0.6, 0.7, 0.8, 0.9], description="β values for M2")
    class_epsilons: list[float] = Field(default_factory=lambda: [5.0, 10.0, 20.0], description="ε of the classifier")
    class_beta: float = Field(default=0.8, description="β of M2 in the classifier (0.8)")
    runs: int = Field(default=10, ge=1, description="classifier runs (new split and noise each; 10)")
    delta: float = Field(default=1e-6, description="δ of PrivEmb (1e-6)")
    pairs: int = Field(default=100, ge=2, description="n of the n × n word pairs (100)")
    skip_classifier: bool = Field(default=False, description="skip experiment 3 (the classifier)")
    seed: int | None = Field(default=0, description="seed of every generator of the experiment (0)")  # type: ignore[assignment]

    _lists = before("epsilons", "betas", "class_epsilons")(lambda cls, v: _comma_list(v))
    _delta = before("delta")(lambda cls, v: params.check_delta(v))
    _class_beta = before("class_beta")(lambda cls, v: params.check_beta(v))

    @after("epsilons", "class_epsilons")
    def _epsilons(cls, v: list[float]) -> list[float]:
        return [epsilon_value(e) for e in v]

    @after("betas")
    def _betas(cls, v: list[float]) -> list[float]:
        return sorted(params.check_beta(b) for b in v)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(exc: ValidationError, values: dict[str, Any]) -> str:
    """pydantic's errors as one line: each field with what is wrong and the value given."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if p != "__root__"]
        field = ".".join(loc) or "config"
        kind, msg = err["type"], err["msg"]
        if kind == "value_error.missing":
            msg = "is required" + (
                " (choose the privacy level explicitly, e.g. --epsilon 6)" if field == "epsilon" else ""
            )
        elif kind == "value_error.extra":
            msg = "is not a known setting"
        given = bool(loc) and loc[0] in values and kind not in ("value_error.missing", "value_error.extra")
        value = values.get(loc[0]) if given else None
        shown = f" (got {_short(value)})" if given and "got " not in msg and not isinstance(value, dict) else ""
        lines.append(f"{field}: {msg}{shown}")
    return "invalid configuration: " + "; ".join(lines)


class _PlainLoader(yaml.SafeLoader):
    """YAML without aliases: a config file is a handful of settings, and an alias is a copy of its
    anchor, so a few nested aliases can stand for billions of values."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            line = self.peek_event().start_mark.line + 1
            raise ConfigError(
                f"config file {self.name} uses an alias (*name) on line {line}: dpspark does not expand aliases, "
                "write the value out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A key given twice is refused: YAML would keep the last one silently (``epsilon:`` twice, the
        first forgotten)."""
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, Hashable):
                break  # YAML's own check refuses it ("found unhashable key")
            if key in seen:
                raise ConfigError(
                    f"config file {self.name} sets {key!r} twice (lines {seen[key]} and {line}): keep the one you mean"
                )
            seen[key] = line
        return super().construct_mapping(node, deep)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file (UTF-8, no aliases) into a dict (keys as in the CLI, with '-' or '_')."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} not found")
    try:
        stream = io.StringIO(p.read_text(encoding="utf-8"))
        stream.name = str(p)  # YAML's error marks then name the file (and quote none of it)
        data = yaml.load(stream, Loader=_PlainLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {p} is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of settings, got {type(data).__name__}")
    settings: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in settings:  # two spellings of one setting (vocab-size and vocab_size)
            raise ConfigError(f"config file {p} sets {name!r} twice (two spellings of it): keep the one you mean")
        settings[name] = value
    return settings
