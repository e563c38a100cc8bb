"""One typed, validated configuration behind the CLI, the YAML files, notebooks and the API.

Every field fails at construction with its name, the value and what is allowed
(pydantic turns those into ConfigError via ``PerturbConfig.parse``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dpspark.embeddings import DEFAULT_EMBEDDINGS, FORMATS
from dpspark.errors import ConfigError
from dpspark.text import OOV_POLICIES

Mechanism = Literal["mahalanobis", "laplace"]


class PerturbConfig(BaseModel):
    """Settings of the perturb job. ``epsilon`` has no default: the privacy level is a choice."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    input: str | None = None
    output: str | None = None
    columns: list[str] = Field(default_factory=list)
    epsilon: float
    mechanism: Mechanism = "mahalanobis"
    lam: float | None = Field(default=None, alias="lambda")
    embeddings: str = DEFAULT_EMBEDDINGS
    embeddings_format: Literal[FORMATS] = "auto"  # type: ignore[valid-type]
    embeddings_words: str | None = None
    vocab_size: int = Field(default=50_000, ge=2)
    vocab_file: str | None = None
    vocab_from_corpus: bool = False
    nn: Literal["exact", "annoy"] = "exact"
    annoy_trees: int = Field(default=50, ge=1)
    annoy_search_k: int = Field(default=-1, ge=-1)
    recall_queries: int = Field(default=2000, ge=0)
    oov: Literal[OOV_POLICIES] = "unk"  # type: ignore[valid-type]
    oov_token: str = "[UNK]"
    keep_original: bool = False
    mode: Literal["error", "overwrite"] = "error"
    seed: int | None = None
    master: str | None = None
    remote: str | None = None
    batch_rows: int = Field(default=10_000, ge=1)
    partitions: int | None = Field(default=None, ge=1)
    partition: str | None = None
    allow_rerelease: bool = False

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str | None) -> str | None:
        if v is not None:
            parts = [p.split("=", 1) for p in v.strip("/").split("/")]
            if not all(len(p) == 2 and p[0] and p[1] for p in parts):
                raise ValueError(f"expected KEY=VALUE[/KEY=VALUE...], e.g. date=2026-11-21, got {v!r}")
        return v

    @field_validator("epsilon")
    @classmethod
    def _epsilon(cls, v: float) -> float:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"must be a positive finite number, got {v}")
        return v

    @field_validator("lam")
    @classmethod
    def _lam(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ValueError(f"must be in [0, 1] (0 = Laplace, 1 = full Mahalanobis), got {v}")
        return v

    @field_validator("columns", mode="before")
    @classmethod
    def _columns(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [c.strip() for c in v.split(",")]
        if isinstance(v, list) and any(not c for c in v):
            raise ValueError("column names must be non-empty")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> PerturbConfig:
        if self.mechanism == "laplace" and self.lam not in (None, 0.0):
            raise ValueError(
                f"the laplace mechanism is λ = 0; got lambda = {self.lam}: use --mechanism mahalanobis for λ > 0"
            )
        if len(set(self.columns)) != len(self.columns):
            raise ValueError(f"columns are listed twice: {self.columns}")
        if self.vocab_file and self.vocab_from_corpus:
            raise ValueError("choose one of vocab_file and vocab_from_corpus")
        return self

    @property
    def lambda_(self) -> float:
        """λ in force: 0 for Laplace, 1 by default for Mahalanobis (Xu et al.'s strongest setting)."""
        if self.mechanism == "laplace":
            return 0.0
        return 1.0 if self.lam is None else self.lam

    @classmethod
    def parse(cls, values: dict[str, Any]) -> PerturbConfig:
        """Build from a plain dict (YAML + flags), turning validation errors into ConfigError."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "is required" + (
                " (choose the privacy level explicitly, e.g. --epsilon 10)" if field == "epsilon" else ""
            )
        elif err["type"] == "extra_forbidden":
            msg = "is not a known setting"
        value = err.get("input")
        quiet = err["type"] in ("missing", "extra_forbidden") or isinstance(value, dict) or "got " in msg
        shown = "" if quiet else f" (got {value!r})"
        lines.append(f"{field}: {msg}{shown}")
    return "invalid configuration: " + "; ".join(lines)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a dict (keys as in the CLI, with '-' or '_')."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} not found")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of settings, got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _float_list(v: Any) -> Any:
    if isinstance(v, str):
        v = [x for x in v.split(",") if x.strip()]
    if isinstance(v, (int, float)):
        v = [v]
    return v


class StatsConfig(BaseModel):
    """Settings of the privacy-stats job (Nw/Sw over a grid of ε and λ)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    output: str | None = None
    epsilons: list[float] = Field(default_factory=lambda: [1.0, 5.0, 10.0, 20.0, 40.0])
    lambdas: list[float] = Field(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])
    runs: int = 100
    words: int = 500
    words_seed: int = 0
    word_list: str | None = None
    corpus: str | None = None
    columns: list[str] = Field(default_factory=list)
    embeddings: str = DEFAULT_EMBEDDINGS
    embeddings_format: Literal[FORMATS] = "auto"  # type: ignore[valid-type]
    embeddings_words: str | None = None
    vocab_size: int = Field(default=50_000, ge=2)
    vocab_file: str | None = None
    nn: Literal["exact", "annoy"] = "exact"
    annoy_trees: int = Field(default=50, ge=1)
    annoy_search_k: int = Field(default=-1, ge=-1)
    words_per_task: int = Field(default=50, ge=1)
    runs_per_task: int | None = Field(default=None, ge=1)
    mode: Literal["error", "overwrite"] = "error"
    seed: int | None = None
    master: str | None = None

    _lists = field_validator("epsilons", "lambdas", mode="before")(classmethod(lambda cls, v: _float_list(v)))
    _columns = field_validator("columns", mode="before")(PerturbConfig._columns.__func__)

    @field_validator("epsilons")
    @classmethod
    def _epsilons(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("the grid is empty: give at least one ε, e.g. --epsilons 1,5,10,20,40")
        bad = [e for e in v if not (math.isfinite(e) and e > 0)]
        if bad:
            raise ValueError(f"every ε must be a positive finite number, got {bad}")
        return sorted(set(v))

    @field_validator("lambdas")
    @classmethod
    def _lambdas(cls, v: list[float]) -> list[float]:
        if not v:
            raise ValueError("the grid is empty: give at least one λ, e.g. --lambdas 0,1")
        bad = [x for x in v if not (math.isfinite(x) and 0 <= x <= 1)]
        if bad:
            raise ValueError(f"every λ must be in [0, 1], got {bad}")
        return sorted(set(v))

    @field_validator("runs")
    @classmethod
    def _runs(cls, v: int) -> int:
        if v < 2:
            raise ValueError(f"K must be at least 2 to say anything about Nw and Sw, got {v}")
        return v

    @model_validator(mode="after")
    def _sources(self) -> StatsConfig:
        if self.word_list and self.corpus:
            raise ValueError("choose one of word_list and corpus")
        if self.corpus and not self.columns:
            raise ValueError("corpus needs --columns: the text columns to take words from")
        return self

    @classmethod
    def parse(cls, values: dict[str, Any]) -> StatsConfig:
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None
