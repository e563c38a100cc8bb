"""Run a Databricks source-format notebook locally, with stand-ins for the Databricks globals.

The notebooks in ``notebooks/`` are plain Python files in Databricks' source format:
the first line is ``# Databricks notebook source``, cells are separated by
``# COMMAND ----------`` and magic cells (``%md``, ``%pip``, ``%sh``, ...) are lines that
start with ``# MAGIC``. ``run_notebook`` executes the Python cells in order in one shared
namespace that holds local stand-ins for what Databricks provides:

- ``spark``: the given SparkSession, or ``SparkSession.builder.getOrCreate()``;
- ``dbutils.widgets`` (``text``, ``dropdown``, ``combobox``, ``multiselect``, ``get``,
  ``getArgument``, ``remove``, ``removeAll``): a widget's value is its default from the
  notebook unless the ``widgets`` argument overrides it;
- ``dbutils.library.restartPython()``: a no-op (the ``%pip`` cell is skipped locally);
- ``display(obj)``: records the first 20 rows of a Spark DataFrame as pandas (a pandas
  DataFrame as is, anything else unchanged);
- ``displayHTML(html)``: records the HTML string.

No ``sc``: serverless and standard access mode notebooks have no SparkContext, and the
notebooks here must run there (``tests/connect`` runs them on a Spark Connect session).

    from dpspark.notebook_runner import run_notebook
    result = run_notebook("notebooks/perturb_text.py", {"epsilon": "5", "output": "/tmp/x"})
    result["displayed"][0]          # a pandas DataFrame

pyspark is imported only when no session is given.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

HEADER = "# Databricks notebook source"
CELL_SEPARATOR = re.compile(r"^# COMMAND -+\s*$", re.MULTILINE)
MAGIC = "# MAGIC"
RESTART = "dbutils.library.restartPython()"
DISPLAY_ROWS = 20


class NotebookError(RuntimeError):
    """A cell of a notebook failed; the message names the notebook, the cell and the error."""

    def __init__(self, path: str, cell: int, source: str, error: BaseException) -> None:
        first = next((line.strip() for line in source.splitlines() if line.strip()), "")
        super().__init__(f"notebook {path}: cell {cell} failed ({first!r}): {type(error).__name__}: {error}")
        self.path, self.cell, self.source, self.error = path, cell, source, error


class WidgetError(KeyError):
    """A widget is read before it is defined, or given a value outside its choices."""

    def __str__(self) -> str:  # KeyError would show the message with quotes
        return str(self.args[0])


class Widgets:
    """``dbutils.widgets``: values come from ``overrides`` when given, else from the defaults."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self._overrides = {k: _as_text(v) for k, v in (overrides or {}).items()}
        self._values: dict[str, str] = {}

    def _define(self, name: str, default: str, choices: list[str] | None = None, multi: bool = False) -> None:
        value = self._overrides.get(name, _as_text(default))
        if choices is not None:
            choices = [str(c) for c in choices]
            picked = [v.strip() for v in value.split(",")] if multi else [value]
            bad = [v for v in picked if v not in choices]
            if bad and not (multi and value == ""):
                raise WidgetError(f"widget {name!r}: {', '.join(map(repr, bad))} is not one of {choices}")
        self._values[name] = value

    def text(self, name: str, defaultValue: str = "", label: str | None = None) -> None:
        self._define(name, defaultValue)

    def dropdown(self, name: str, defaultValue: str, choices: list[str], label: str | None = None) -> None:
        self._define(name, defaultValue, choices)

    def combobox(self, name: str, defaultValue: str, choices: list[str], label: str | None = None) -> None:
        self._define(name, defaultValue)  # a combobox also accepts values outside its choices

    def multiselect(self, name: str, defaultValue: str, choices: list[str], label: str | None = None) -> None:
        self._define(name, defaultValue, choices, multi=True)

    def get(self, name: str) -> str:
        if name not in self._values:
            raise WidgetError(f"widget {name!r} is not defined; defined widgets: {sorted(self._values) or 'none'}")
        return self._values[name]

    def getArgument(self, name: str, default: str | None = None) -> str | None:
        return self._values.get(name, default)

    def remove(self, name: str) -> None:
        self._values.pop(name, None)

    def removeAll(self) -> None:
        self._values.clear()


class _Library:
    def restartPython(self) -> None:
        """Nothing to restart locally: the %pip cell was skipped."""


class DBUtils:
    """The parts of ``dbutils`` the notebooks use."""

    def __init__(self, widgets: dict[str, Any] | None = None) -> None:
        self.widgets = Widgets(widgets)
        self.library = _Library()


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def parse_cells(text: str) -> list[str]:
    """The cells of a source-format notebook (magic cells included, as they are)."""
    lines = text.splitlines()
    if lines and lines[0].strip() == HEADER:
        text = "\n".join(lines[1:])
    return [cell.strip("\n") for cell in CELL_SEPARATOR.split(text)]


def python_source(cell: str) -> str:
    """The cell's Python code: ``# MAGIC`` lines and ``dbutils.library.restartPython()`` removed."""
    return "\n".join(
        line for line in cell.splitlines() if not line.lstrip().startswith(MAGIC) and line.strip() != RESTART
    )


def run_notebook(path: str | Path, widgets: dict[str, Any] | None = None, spark: Any = None) -> dict[str, Any]:
    """Execute the notebook's Python cells in order; return what it displayed.

    Returns ``{"displayed": [...], "html": [...], "namespace": {...}}``: the objects given
    to ``display`` (Spark DataFrames as pandas, first 20 rows), the strings given to
    ``displayHTML`` and the notebook's final namespace. A failing cell raises
    ``NotebookError`` naming the notebook and the cell (1-based, counting every cell).
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if not text.startswith(HEADER):
        raise ValueError(f"{path} is not a Databricks source notebook: its first line must be {HEADER!r}")
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
    displayed: list[Any] = []
    html: list[str] = []

    def display(obj: Any, *args: Any, **kwargs: Any) -> None:
        if hasattr(obj, "toPandas") and hasattr(obj, "limit"):  # a Spark DataFrame (classic or Connect)
            obj = obj.limit(DISPLAY_ROWS).toPandas()
        displayed.append(obj)

    def display_html(content: str) -> None:
        html.append(str(content))

    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__file__": str(path),
        "spark": spark,
        "dbutils": DBUtils(widgets),
        "display": display,
        "displayHTML": display_html,
    }
    for number, cell in enumerate(parse_cells(text), start=1):
        source = python_source(cell)
        if not source.strip():
            continue
        try:
            code = compile(source, f"{path} [cell {number}]", "exec")
            exec(code, namespace)
        except Exception as exc:
            raise NotebookError(str(path), number, source, exc) from exc
    return {"displayed": displayed, "html": html, "namespace": namespace}
