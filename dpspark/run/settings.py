"""A run's settings: each setting of a grid as the perturb settings a release would use, its exact key for
``derive_key``, and its preparation (``Prepared``); the measuring commands' privacy unit (``unit_grid``). Shared
by evaluate-utility, compare and privacy-risk."""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpspark import units
from dpspark.config import EvaluateUtilityConfig, PerturbConfig, UnitGridSettings
from dpspark.device import DEVICE_SEARCH
from dpspark.embeddings import Embeddings
from dpspark.mechanisms import MechanismSpec
from dpspark.neighbours import AnnoyIndex
from dpspark.params import epsilon_value
from dpspark.prepare import Prepared, prepare, prepare_grid
from dpspark.unit_table import UnitTable, Walk, joined

TEXT, LABEL, UNIT = "text", "label", "unit"  # the labelled commands' internal columns (UNIT: a column: unit's ids)
ORIGINAL = f"{TEXT}_original"  # the perturb transform's keep_original column


def perturb_config(config: EvaluateUtilityConfig, spec: MechanismSpec) -> PerturbConfig:
    """The perturb settings of one setting of the grid (what a release with ``spec`` would use)."""
    shared = ("embeddings", "embeddings_format", "embeddings_words", "embeddings_dir", "vocab_size", "vocab_file")
    shared += ("nn", "annoy_trees", "annoy_search_k")
    values = {k: getattr(config, k) for k in shared}
    own = {k: v for k, v in spec.parameters().items() if k not in ("name", "epsilon") and v is not None}
    values.update(own, columns=[TEXT], epsilon=spec.epsilon, mechanism=spec.name)
    if getattr(config, "privacy_unit", "token") != "token":  # the setting's ε is the unit's budget E
        values.update(epsilon=None, unit_budget=spec.epsilon, privacy_unit=config.privacy_unit)
        values.update(allocation=config.allocation)
    return PerturbConfig.parse(values)


@dataclasses.dataclass(frozen=True)
class People:
    """A ``column:`` unit's people over a measuring command's frames (the labelled halves, train then test; or
    one corpus): their table (``dpspark.unit_table.joined``: each person's tokens over all the frames), and each
    frame's walk through it, whose key (the count pass's, one per run) never leaves the run."""

    table: UnitTable
    walks: list[Walk]

    @classmethod
    def count(cls, backend: Any, unit: units.PrivacyUnit, frames: list[Any], columns: list[str], column: str) -> People:
        """Counted by ``backend.person_counts`` where the rows are, ``column`` holding ``unit``'s ids in
        ``frames``; rows without an id refused (``units.refuse_null_ids``)."""
        key = secrets.token_bytes(32)
        counts = [backend.person_counts(frame, columns, column, key) for frame in frames]
        units.refuse_null_ids(sum(c.nulls for c in counts), unit)
        table, offsets = joined(counts)
        return cls(table, [Walk(column, key, offset, c.partitions) for c, offset in zip(counts, offsets)])

    def bundle(self, write: Callable[[Path], object]) -> Callable[[Path], None]:
        """A bundle writer: ``write``'s bundle with the table beside it (what each setting's release walks)."""

        def both(directory: Path) -> None:
            write(directory)
            self.table.save(directory)

        return both


def release_bundle(prep: Prepared, people: People | None) -> Callable[[Path], object]:
    """A setting's bundle writer: its preparation's, with a ``column:`` unit's table beside it."""
    return prep.write_bundle if people is None else people.bundle(prep.write_bundle)


@dataclasses.dataclass(frozen=True)
class Halves:
    """A labelled split's halves and, under a ``column:`` unit, their people: the perturbed copies of a half walk
    each person's tokens over both halves (train's first)."""

    train: Any
    test: Any
    people: People | None = None

    def of(self, testing: bool) -> Any:
        return self.test if testing else self.train

    def walk(self, testing: bool) -> Walk | None:
        return None if self.people is None else self.people.walks[int(testing)]


def unit_grid(
    backend: Any,
    config: UnitGridSettings,
    halves: list[Any],
    columns: tuple[str, ...] = (TEXT,),
    people: People | None = None,
) -> dict[str, Any]:
    """A measuring command's privacy unit in its manifest: the unit and its adjacency and, under a unit other
    than the token, the allocation, the grid's budgets, the units' shape over ``halves`` (the rows of the text
    ``columns``: one unit each, the labelled halves, privacy-risk's corpus or privacy-stats'; under a ``column:``
    unit a person's rows together over all the halves, ``people``'s table, else counted here with the id column
    under its own name) and the per-token ε each budget gives on this data (min, the median unit's, max)."""
    unit = config.unit
    out: dict[str, Any] = {"privacy_unit": unit.fields(), "adjacency": unit.adjacency()}
    if unit.is_token:
        return out
    lengths: Counter[int] = Counter()
    if unit.kind == "column":  # a person's rows in two halves are one person
        people = people or People.count(backend, unit, halves, list(columns), str(unit.column))
        lengths.update(people.table.unit_totals().tolist())
    else:
        for half in halves:
            lengths.update(backend.length_counts(half, list(columns)))
    alloc = config.allocation_of
    shape = units.shape_of(dict(lengths), alloc)
    counts = [units.shape_counts(sum(lengths.values()), shape, e, alloc) for e in config.grid_epsilons()]
    epsilons = [{"unit_budget": e, **(c["token_epsilon"] or {})} for e, c in zip(config.grid_epsilons(), counts)]
    shown = {k: v for k, v in counts[0].items() if k != "token_epsilon"}
    return out | {"allocation": alloc.fields(), "unit_budgets": config.grid_epsilons(), "unit_counts": shown,
                  "token_epsilons": epsilons}  # fmt: skip


def token_epsilon(fields: dict[str, Any], budget: float) -> float:
    """The per-token ε a unit budget ``budget`` gives the median unit of these rows (``unit_grid``'s fields):
    E/n for the median unit's n tokens under ``scale``, E/K under ``cap:K``; the budget itself for the token unit
    (whose grid is ε per token)."""
    if "unit_counts" not in fields:
        return budget
    alloc, shape = fields["allocation"], fields["unit_counts"]["tokens_per_unit"]
    return budget / (alloc["cap"] if alloc["kind"] == "cap" else max(1, shape["median"] if shape else 1))


def token_spec(fields: dict[str, Any], spec: MechanismSpec) -> MechanismSpec:
    """The setting whose per-token privacy figures (re-identification, Nw/Sw) stand for ``spec`` of a grid with
    the unit ``fields`` (``unit_grid``'s): ``spec`` itself under the token unit; under a unit, the same mechanism
    at the per-token ε its budget gives the median unit of the rows (``token_epsilon``)."""
    e = token_epsilon(fields, spec.epsilon)
    return spec if e == spec.epsilon else spec.copy(update={"epsilon": epsilon_value(e)})


def unit_word(fields: dict[str, Any]) -> str:
    """What one unit is, in a report's words: "document", or a ``column:`` unit's column (one "user")."""
    unit = fields["privacy_unit"]
    return str(unit["column"]) if unit["kind"] == "column" else str(unit["kind"])


def unit_line(fields: dict[str, Any]) -> str | None:
    """The unit's sentence for a report: what the grid's ε is, and the per-token ε it gives here."""
    if "token_epsilons" not in fields:
        return None
    kind, alloc = unit_word(fields), fields["allocation"]
    spread = "each of a unit's n tokens at E/n" if alloc["kind"] == "scale" else f"each token at E/{alloc['cap']}"
    shares = "; ".join(
        f"E = {e['unit_budget']:g}: {e['min']:.3g} to {e['max']:.3g} (median {kind} {e['median_unit']:.3g})"
        for e in fields["token_epsilons"]
        if "min" in e
    )
    return (
        f"Privacy unit: {kind} ({fields['adjacency']}). The grid's ε is each {kind}'s budget E ({alloc['kind']}: "
        f"{spread}); the per-token ε it gives on these rows: {shares}."
    )


def setting_key(spec: MechanismSpec) -> str:
    """The setting as one exact label for ``derive_key``: its parameters (name and ε included) as JSON
    (floats written exactly), so that a setting's noise does not depend on the rest of the grid."""
    return json.dumps(spec.parameters(), sort_keys=True)


def prepare_settings(
    config: EvaluateUtilityConfig, specs: list[MechanismSpec], embeddings: Embeddings, workdir: Path
) -> list[Prepared]:
    """One ``Prepared`` (a release's preparation, its own bundle) per setting. With exact search the
    vocabulary, the index and the Space (with every setting's artefacts) are prepared once (``prepare_grid``) and
    shared; an annoy index is built and its recall measured per setting (the recall depends on the
    setting's noise)."""
    if config.nn != "exact":
        return [
            prepare(perturb_config(config, spec), embeddings=embeddings, workdir=workdir / str(i))
            for i, spec in enumerate(specs)
        ]
    grid = prepare_grid(config, specs, workdir, embeddings)
    return [
        Prepared(perturb_config(config, spec), dataclasses.replace(grid, specs=[spec]), recall=1.0, recall_queries=0)
        for spec in specs
    ]


def mechanism_fields(config: Any, emb: Embeddings, vocab_rows: np.ndarray, annoy: AnnoyIndex | None) -> dict:
    """The manifest's account of the mechanism's public parts (statistics and risk outputs)."""
    return {
        "embeddings": {"name": emb.name, "sha256": emb.sha256, "words": len(emb)},
        "dimension": emb.dim,
        "vocabulary": {"size": int(len(vocab_rows)), "source": config.vocab_file or f"first {config.vocab_size}"},
        "nearest_neighbour": {
            "method": config.nn,
            "params": annoy.params() if annoy else {},
            "device": config.device,
            "device_search": DEVICE_SEARCH,
        },
        "seeded": config.seed is not None,
    }
