"""The package as a user meets it: ``dir(dpspark)``, a light import, and the explicit keyword
parameters of ``dpspark.perturb_text`` and ``dpspark.release``, checked against the configuration
model they feed (``PerturbConfig``) so the two cannot drift apart."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import dpspark
from dpspark import mechanisms
from dpspark.config import PerturbConfig, mechanism_parameter_fields
from dpspark.errors import ConfigError

# runtime: numpy, pyarrow and Python differ across the Databricks runtimes (CONTRIBUTING.md)
pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]

# PerturbConfig fields that each function does not take as a parameter, and why.
SESSION = ("engine", "master", "remote", "batch_rows")  # the DataFrame's session (Spark) is used: none changes a thing
CLI_ONLY = ("quiet",)  # what the command prints; the functions print nothing
READS = ("input", "input_table", "partitions")  # where a release reads from; a transform reads df


# The mechanisms' own parameters come in through **settings, checked against the registry: adding a
# mechanism (or a parameter) edits no signature here.
MECHANISM_PARAMETERS = tuple(mechanism_parameter_fields())


def release_only() -> tuple[str, ...]:
    pytest.importorskip("pyspark")
    from dpspark.spark.perturb import RELEASE_ONLY

    return RELEASE_ONLY


def settings_of(fn) -> dict[str, inspect.Parameter]:
    """Every parameter but the DataFrame and ``**settings``."""
    return {
        name: p
        for name, p in inspect.signature(fn).parameters.items()
        if name != "df" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def test_dir_lists_the_public_api_only():
    listed = dir(dpspark)
    assert listed == sorted(dpspark.__all__)
    for helper in ("Any", "annotations", "importlib", "sys", "types", "_LAZY", "_Package", "Literal"):
        assert helper not in listed
    for name in dpspark.__all__:  # every listed name resolves
        assert getattr(dpspark, name) is not None
    assert {"release", "perturb_text", "PerturbConfig", "ConfigError", "__version__"} <= set(listed)


def test_import_dpspark_loads_nothing_heavy(tmp_path):
    code = (
        "import sys, dpspark; print(sorted(m for m in ('pyspark', 'numpy', 'pydantic', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]"


def test_py_typed_is_shipped():
    # The installed package: in the runtime matrix, the wheel.
    assert (Path(dpspark.__file__).parent / "py.typed").is_file()
    assert '"py.typed"' in (ROOT / "setup.py").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("fn", "not_taken"),
    [
        ("perturb_text", lambda: (*release_only(), *SESSION, *CLI_ONLY, *READS)),
        ("release", lambda: (*SESSION, *CLI_ONLY)),
    ],
)
def test_explicit_parameters_are_the_models_fields(fn, not_taken):
    params = settings_of(getattr(dpspark, fn))
    expected = set(PerturbConfig.fields()) - set(not_taken()) - set(MECHANISM_PARAMETERS)
    assert set(params) == expected, (
        f"dpspark.{fn}: missing {sorted(expected - set(params))}, not in PerturbConfig {sorted(set(params) - expected)}"
    )


@pytest.mark.parametrize("fn", ["perturb_text", "release"])
def test_explicit_defaults_and_choices_are_the_models(fn):
    func = getattr(dpspark, fn)
    hints = typing.get_type_hints(func, globalns={**vars(dpspark), "DataFrame": object})
    model = PerturbConfig.__fields__
    for name, p in settings_of(func).items():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue  # columns, epsilon, output: positional, None when not given
        field = model[name]
        assert p.default == field.default, (
            f"dpspark.{fn}({name}=...) defaults to {p.default!r}, the model to {field.default!r}"
        )
        if name == "mechanism":  # a name of the registry, checked by the model
            assert hints[name] is str and set(typing.get_args(field.outer_type_)) == set(mechanisms.names())
        elif typing.get_origin(field.outer_type_) is typing.Literal:
            hint = hints[name]
            if type(None) in typing.get_args(hint):  # Optional[Literal[...]]: None leaves the mechanism's default
                (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
            assert set(typing.get_args(hint)) == set(typing.get_args(field.outer_type_)), name


@pytest.mark.parametrize("fn", ["perturb_text", "release"])
def test_every_parameter_is_documented(fn):
    func = getattr(dpspark, fn)
    doc = inspect.getdoc(func)
    args = doc.split("Args:", 1)[1]
    for name in settings_of(func):
        assert f"\n    {name}: " in args or args.startswith(f"\n    {name}: "), (
            f"dpspark.{fn}: {name} is not documented"
        )
    assert "**settings:" in args


@pytest.mark.parametrize("fn", ["perturb_text", "release"])
def test_all_defaults_spelled_out_give_the_same_config(fn):
    """Passing every explicit default is the same as passing none (the model's defaults are the functions')."""
    params = {n: p.default for n, p in settings_of(getattr(dpspark, fn)).items() if p.default is not None}
    params = {k: v for k, v in params.items() if k in PerturbConfig.__fields__}
    minimal = {"columns": ["text"], "epsilon": 10.0, "output": "out"}
    assert PerturbConfig.parse({**params, **minimal}) == PerturbConfig.parse(minimal)


@pytest.mark.parametrize("fn", ["perturb_text", "release"])
def test_no_mechanism_is_spelled_out_in_the_public_functions(fn):
    """The registry is the one list: no parameter of a mechanism in the signature, no mechanism named in
    the code but the default (a new mechanism needs no edit of dpspark/__init__.py)."""
    func = getattr(dpspark, fn)
    assert not set(settings_of(func)) & set(MECHANISM_PARAMETERS)
    code = inspect.getsource(func).split('"""')[-1]  # the body after the docstring
    signature = inspect.getsource(func).split('"""')[0]
    for name in mechanisms.names():
        assert f'"{name}"' not in code
        assert f'"{name}"' not in signature or name == PerturbConfig.__fields__["mechanism"].default


@pytest.mark.parametrize("fn", ["perturb_text", "release"])
@pytest.mark.parametrize(
    ("mechanism", "given", "field", "value"),
    [
        ("custext", {"top_k": 5}, "top_k", 5),
        ("1-diffractor", {"noise": "tem", "position_gamma": 3}, "position_gamma", 3.0),
        ("vickrey", {"lambda": 0.25, "t": 0.75}, "lam", 0.25),
        ("syntf", {"draws": 7}, "draws", 7),
    ],
)
def test_mechanism_parameters_reach_the_model_through_settings(monkeypatch, fn, mechanism, given, field, value):
    seen = spy(monkeypatch, fn)
    getattr(dpspark, fn)(
        None,
        columns="text",
        epsilon=10,
        mechanism=mechanism,
        **given,
        **({} if fn == "perturb_text" else {"output": "out"}),
    )
    config = PerturbConfig.parse({"output": "out", **seen})
    assert getattr(config.spec, field) == value


def test_a_foreign_mechanism_parameter_is_refused_by_name(monkeypatch):
    seen = spy(monkeypatch, "release")
    dpspark.release(None, "out", "text", 10, mechanism="tem", top_k=5)
    with pytest.raises(ConfigError, match=r"top_k: is not a parameter of tem \(its parameters: beta, gamma\)"):
        PerturbConfig.parse(seen)


def spy(monkeypatch, name: str) -> dict:
    pytest.importorskip("pyspark")
    import dpspark.spark.perturb as impl

    seen: dict = {}

    def record(df, **kwargs):
        seen.update(kwargs)
        return "result"

    monkeypatch.setattr(impl, name, record)
    return seen


def test_perturb_text_passes_the_given_settings_and_the_yaml_spelling(monkeypatch):
    seen = spy(monkeypatch, "perturb_text")
    assert dpspark.perturb_text(None, "text", 10, mechanism="laplace", **{"lambda": 0.0, "vocab-size": 100}) == "result"
    assert seen["mechanism"] == "laplace" and seen["lambda"] == 0.0 and seen["vocab-size"] == 100
    assert "lam" not in seen and "seed" not in seen  # None: the model's default, and no clash with "lambda"
    config = PerturbConfig.parse(seen)
    assert (config.mechanism, config.lam, config.vocab_size, config.columns) == ("laplace", 0.0, 100, ["text"])


def test_release_passes_the_given_settings(monkeypatch):
    seen = spy(monkeypatch, "release")
    dpspark.release(None, "out", "text", 10, partition="date=2026-11-21", allow_rerelease=True, lam=0.5)
    config = PerturbConfig.parse(seen)
    assert (config.output, config.partition, config.allow_rerelease, config.lam) == (
        "out",
        "date=2026-11-21",
        True,
        0.5,
    )


@pytest.mark.parametrize("settings", [{"output": "out"}, {"mode": "overwrite", "partition": "date=2026-11-21"}])
def test_perturb_text_still_refuses_release_settings_by_name(settings):
    pytest.importorskip("pyspark")
    with pytest.raises(ConfigError, match=r"takes no .*call dpspark\.release\(df, output="):
        dpspark.perturb_text(None, "text", 1.0, **settings)
    assert not set(settings) & set(settings_of(dpspark.perturb_text))  # never an explicit parameter of the transform
