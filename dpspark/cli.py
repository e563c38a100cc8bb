"""The ``dpspark`` command. Flags override the YAML file given with --config.

Every subcommand's flags are derived from its configuration model (``dpspark.config``):
one ``--flag-name`` per field, the field's description as help, grouped for ``--help`` by
the tables at the end of ``dpspark.config`` (required settings first), so the CLI, the YAML
files, the notebooks and the Python API accept exactly the same settings. Switches are plain
``--flag``; choices show as ``{a,b}``; no flag may be abbreviated.

Exit codes (every command's ``--help`` lists them, read from ``dpspark.errors``): 0 success;
1 unexpected failure; each ``DPSparkError`` class its own ``exit_code``; 6 ``calibrate``: nothing
of the grid meets the bounds. Results (tables, the output's path and public counts) go to stdout
even under ``--quiet``, which silences logs, warnings and progress.
"""

from __future__ import annotations

import argparse
import errno
import functools
import json
import logging
import os
import sys
import types
import typing
import warnings
from pathlib import Path
from typing import Any

NO_EPSILON_MEETS_BOUNDS = 6

DOCTOR_HELP = "check this machine: Java, pyspark, the default embedding, Python, BLAS threads"

# Two examples per command, shown at the end of its --help (each parses with that command's flags).
EXAMPLES = {
    "perturb": (
        "dpspark perturb --input examples/reviews.parquet --output out/reviews_private --columns text,title "
        "--epsilon 6",
        "dpspark perturb --input-table main.raw.events --output-table main.shared.events --columns text "
        "--epsilon 6 --partition date=2026-11-21",
    ),
    "release-vectors": (
        "dpspark release-vectors --input embeddings.parquet --output out/private_vectors --column vec --epsilon 5",
        "dpspark release-vectors --input reviews.parquet --output out/review_vectors --column text --epsilon 5 "
        "--mechanism m1",
    ),
    "privacy-stats": (
        "dpspark privacy-stats --output out/privacy_stats",
        "dpspark privacy-stats --epsilons 1,5,10,20 --lambdas 0,1 --runs 100 --words 500 --output out/privacy_stats",
    ),
    "calibrate": (
        "dpspark calibrate --stats out/privacy_stats --max-nw-fraction 0.5 --min-sw 20",
        "dpspark calibrate --utility out/utility --risk out/risk --max-utility-loss 0.02 "
        "--max-reidentification 0.2 --output out/calibration",
    ),
    "embedding-report": (
        "dpspark embedding-report --output out/embedding_report",
        "dpspark embedding-report --vocab-size 20000 --lambda 0.5 --output out/embedding_report",
    ),
    "evaluate-utility": (
        "dpspark evaluate-utility --input out/sms_spam.parquet --text-column text --label-column label "
        "--output out/utility",
        "dpspark evaluate-utility --input out/sms_spam.parquet --text-column text --label-column label "
        "--mode train-time --epsilons 1,5,20 --output out/utility --overwrite",
    ),
    "privacy-risk": (
        "dpspark privacy-risk --input out/sms_spam.parquet --text-column text --output out/risk",
        "dpspark privacy-risk --input out/sms_spam.parquet --text-column text --runs 20 "
        "--sensitive-words names.txt --output out/risk",
    ),
    "compare": (
        "dpspark compare --input out/sms_spam.parquet --text-column text --label-column label "
        "--mechanisms laplace,mahalanobis,tem,custext --epsilons 1,5,10,20 --output out/compare",
        "dpspark compare --input out/sms_spam.parquet --text-column text --label-column label "
        "--mechanisms laplace,santext --max-utility-loss 0.02 --max-reidentification 0.1 --output out/compare",
    ),
    "evaluate-vectors": (
        "dpspark evaluate-vectors --output out/evaluate_vectors",
        "dpspark evaluate-vectors --skip-classifier --pairs 50 --output out/evaluate_vectors",
    ),
    "doctor": ("dpspark doctor",),
}
RELEASES = ("perturb", "release-vectors")  # the commands that write a ledger (exit codes 7 and 8)
# The commands that search nearest words (where the BLAS kernel's speed matters: ``_blas.kept_kernel_note``).
SEARCHES = ("perturb", "privacy-stats", "calibrate", "embedding-report", "evaluate-utility", "privacy-risk", "compare")
REQUIRED_TITLE = "required (as flags or in --config FILE)"
GENERAL_TITLE = "general"
OTHER_TITLE = "other settings"
WIDTH = 100


def _plain(annotation: Any) -> Any:
    """The annotation without Optional."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def _scalar_type(annotation: Any) -> Any:
    """int, float, bool or str for a field's annotation (Optional unwrapped; lists come as text)."""
    annotation = _plain(annotation)
    for kind in (bool, int, float):  # bool first: it is an int; constrained ints/floats are subclasses
        if isinstance(annotation, type) and issubclass(annotation, kind):
            return kind
    return str


def _choices(annotation: Any) -> tuple[str, ...] | None:
    """The values of a Literal field (shown as {a,b}; pydantic still checks them)."""
    annotation = _plain(annotation)
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else None


def flag_name(field: str, alias: str | None) -> str:
    return "--" + (alias or field).replace("_", "-")


def _metavar(name: str, alias: str | None, annotation: Any) -> str | None:
    from dpspark.cli_help import HELP_METAVARS

    kind, choices = _scalar_type(annotation), _choices(annotation)
    if kind is bool:
        return None
    if choices:
        return "{" + ",".join(choices) + "}"
    if name in HELP_METAVARS:
        return HELP_METAVARS[name]
    plain = _plain(annotation)
    if typing.get_origin(plain) is list and typing.get_args(plain) == (float,):
        return "FLOAT[,FLOAT...]"
    return {int: "N", float: "FLOAT"}.get(kind, (alias or name).upper())


def help_layout(model: Any) -> list[tuple[str, list[str]]]:
    """(group title, field names) in the order ``--help`` lists them: the required settings first,
    then the groups of ``dpspark.cli_help.HELP_GROUPS`` (empty ones left out), ``--quiet`` last.
    Fields in ``HELP_HIDDEN`` are accepted but not listed; a field no table names lands in
    OTHER_TITLE (a unit test keeps that group empty)."""
    from dpspark import cli_help

    key = model.__name__
    fields = list(model.fields())
    hidden = set(cli_help.HELP_HIDDEN.get(key, ()))
    required = [n for choice in cli_help.HELP_REQUIRED.get(key, ()) for n in choice]
    group_of = {f: g for g, names in cli_help.HELP_GROUPS.items() for f in names}
    group_of.update(cli_help.HELP_GROUP_OF.get(key, {}))
    titles = cli_help.HELP_TITLES.get(key, {})
    listed = [f for f in fields if f not in hidden and f not in required]
    layout = [(REQUIRED_TITLE, required)] if required else []
    for group, order in cli_help.HELP_GROUPS.items():
        ranked = [*order, *(f for f in fields if f not in order)]  # moved here by HELP_GROUP_OF: after
        members = [f for f in ranked if f in listed and group_of.get(f) == group]
        if members:
            layout.append((GENERAL_TITLE if group == "output control" else titles.get(group, group), members))
    others = [f for f in listed if f not in group_of]
    if others:
        layout.append((OTHER_TITLE, others))
    return layout


def _alternatives(model: Any) -> dict[str, list[str]]:
    """Each required field that is one of a choice → the flags of the others."""
    from dpspark import cli_help

    fields = model.fields()
    out = {}
    for choice in cli_help.HELP_REQUIRED.get(model.__name__, ()):
        for name in choice:
            out[name] = [flag_name(o, fields[o][0]) for o in choice if o != name]
    return out


def add_model_arguments(parser: argparse.ArgumentParser, model: Any) -> None:
    """One flag per field of ``model`` (``--vocab-size`` for vocab_size, ``--lambda`` for lam),
    in the groups of ``help_layout``; booleans are switches (``--quiet``), Literals show their
    choices. Values are checked by the model (pydantic), not by argparse."""
    fields = model.fields()
    others = _alternatives(model)
    layout = help_layout(model)
    groups = {title: parser.add_argument_group(title) for title, _ in layout}
    groups.setdefault(GENERAL_TITLE, parser.add_argument_group(GENERAL_TITLE))
    listed = [(groups[title], name) for title, names in layout for name in names]
    hidden = [(parser, name) for name in fields if name not in {n for _, n in listed}]
    for target, name in [*listed, *hidden]:
        alias, annotation, description = fields[name]
        help_text = description if target is not parser else argparse.SUPPRESS
        unsaid = [flag for flag in others.get(name, ()) if flag not in description]
        if unsaid and target is not parser:
            help_text += f" (or {' or '.join(unsaid)})"
        flag, dest, kind = flag_name(name, alias), alias or name, _scalar_type(annotation)
        if kind is bool:
            target.add_argument(flag, dest=dest, action="store_true", help=help_text)
        elif typing.get_origin(_plain(annotation)) is dict:  # NAME=VALUES entries: --grid lambda=0,1 t=0.5
            target.add_argument(flag, dest=dest, nargs="+", metavar="NAME=V1,V2", help=help_text)
        else:
            target.add_argument(flag, dest=dest, type=kind, metavar=_metavar(name, alias, annotation), help=help_text)
    general = groups[GENERAL_TITLE]
    general.add_argument("--config", metavar="FILE.yaml", help="YAML file with any of these settings (flags win)")
    general.add_argument("-h", "--help", action="help", help="show this help and exit")


def _units(model: Any) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The synopsis of a command: its required units, and (group, optional units) per group."""
    fields = model.fields()

    def unit(name: str) -> str:
        alias, annotation, _ = fields[name]
        metavar = _metavar(name, alias, annotation)
        return flag_name(name, alias) + (f" {metavar}" if metavar else "")

    from dpspark import cli_help

    required = [
        unit(choice[0]) if len(choice) == 1 else "(" + " | ".join(unit(n) for n in choice) + ")"
        for choice in cli_help.HELP_REQUIRED.get(model.__name__, ())
    ]
    groups = [
        (title, [f"[{unit(n)}]" for n in names]) for title, names in help_layout(model) if title != REQUIRED_TITLE
    ]
    for i, (title, units) in enumerate(groups):
        if title == GENERAL_TITLE:
            groups[i] = (title, [*units, "[--config FILE.yaml]", "[-h]"])
    return required, groups


def _wrap(units: list[str], first: str, indent: str, width: int = WIDTH) -> list[str]:
    """``units`` (never split) after ``first`` (a space between them unless it ends in one),
    wrapped at ``width``, each further line starting with ``indent``."""
    lines, line = [], first
    for i, u in enumerate(units):
        if i and len(line) + 1 + len(u) > width:
            lines.append(line)
            line = indent + u
        else:
            line += u if (i == 0 and (not first or first.endswith(" "))) else " " + u
    return [*lines, line]


def usage(command: str) -> str:
    from dpspark import config

    required, _ = _units(getattr(config, COMMANDS[command].model))
    return "\n".join(_wrap([*required, "[options]"], f"dpspark {command}", "    ", WIDTH - 7))


def synopsis(command: str) -> str:
    """Every flag of ``command``: its required ones, then each group's (docs/commands.md's "All flags")."""
    from dpspark import config

    required, groups = _units(getattr(config, COMMANDS[command].model))
    lines = _wrap(required, f"dpspark {command}", "    ")
    for title, units in groups:
        lines += [f"  # {title}", *_wrap(units, "    ", "    ")]
    return "\n".join(lines)


def readme_flags() -> str:
    """docs/commands.md's "All flags" block (a unit test keeps the two equal)."""
    return "\n".join([synopsis("perturb"), "dpspark doctor", "dpspark --version"])


def exit_codes(command: str) -> list[tuple[int, str]]:
    """(code, meaning) of ``command``'s exit codes: each ``dpspark.errors`` class that sets its own
    ``exit_code``, described by its docstring; 6 for calibrate; 7 and 8 for the releases."""
    from dpspark import errors

    if command == "doctor":
        return [(0, "every check passed"), (1, "a check failed: its line says what to fix")]
    codes = [(0, "success"), (1, "unexpected failure (with a traceback)")]
    release_only = (errors.ReleaseRefusedError, errors.LedgerError)
    for cls in vars(errors).values():
        if not (isinstance(cls, type) and issubclass(cls, errors.DPSparkError) and "exit_code" in vars(cls)):
            continue
        if cls.exit_code == 1 or (issubclass(cls, release_only) and command not in RELEASES):
            continue
        doc = " ".join((cls.__doc__ or cls.__name__).split("\n\n")[0].split()).replace("``", "")
        codes.append((cls.exit_code, f"{cls.__name__}: {doc}"))
    if command == "calibrate":
        codes.append(
            (
                NO_EPSILON_MEETS_BOUNDS,
                "nothing meets the bounds: no ε of the grid (with utility / risk bounds: no (ε, λ))",
            )
        )
    if command == "compare":
        codes.append(
            (NO_EPSILON_MEETS_BOUNDS, "no setting of the grid meets --max-utility-loss / --max-reidentification")
        )
    return sorted(codes)


def epilog(command: str) -> str:
    import textwrap

    lines = ["examples:", *(f"  {e}" for e in EXAMPLES[command]), "", "exit codes:"]
    for code, text in exit_codes(command):
        lines += textwrap.wrap(text, WIDTH - 6, initial_indent=f"  {code}  ", subsequent_indent="     ")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from dpspark import __version__, config

    parser = argparse.ArgumentParser(
        prog="dpspark",
        description="Metric differential privacy for text on Spark.",
        epilog="First time here? dpspark doctor checks the machine; dpspark COMMAND --help lists a command's "
        "flags, the required ones first.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"dpspark {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, (model, help_text, _) in COMMANDS.items():
        p = sub.add_parser(
            command,
            help=help_text,
            description=help_text,
            usage=usage(command),
            epilog=epilog(command),
            argument_default=argparse.SUPPRESS,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False,
            add_help=False,
        )
        add_model_arguments(p, getattr(config, model))
    sub.add_parser(
        "doctor",
        help=DOCTOR_HELP,
        description=DOCTOR_HELP + ". One line per check, OK or what to fix; exit 0 when every check passes, "
        "1 when one fails.",
        epilog=epilog("doctor"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    return parser


def parse_args(argv: list[str] | None = None) -> dict[str, Any]:
    """The command and its flags; an unknown flag is refused by the command's own parser, with the
    closest flags it has (no flag is abbreviated: ``calibrate --epsilon`` is not ``--epsilons``)."""
    import difflib

    parser = build_parser()
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        command = sub[namespace.command]
        flags = [f for a in command._actions if a.help != argparse.SUPPRESS for f in a.option_strings]
        close = difflib.get_close_matches(next((u for u in unknown if u.startswith("-")), ""), flags, n=3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}; see dpspark {namespace.command} --help")
    return vars(namespace)


def _print(obj: Any) -> None:
    """A command's result, on stdout whether or not --quiet (which silences logs and progress)."""
    print(obj if isinstance(obj, str) else json.dumps(obj, indent=2, ensure_ascii=False))


def _released(command: str, c: Any, m: dict) -> str:
    """One line naming a release (as the user named it) and its public counts: what --quiet prints."""
    where = (c.output or c.output_table or m["output"]) + (
        f" (partition {m['partition']})" if m.get("partition") else ""
    )
    counts = ", ".join(f"{v:,} {k}" for k, v in m["counts"].items())
    led = m["ledger"]
    spent = (
        "; no guarantee: this release spends an unbounded budget"
        if led.get("this_release_unbounded", led.get("unbounded"))
        else "; the output's budget is unbounded: an earlier release of it has no guarantee"
        if led.get("unbounded")
        else ""
    )
    engine = f" (engine: {m['engine']})" if "engine" in m else ""
    return f"dpspark {command}: released {where}{engine}: {counts}; manifest and ledger beside it{spent}"


def _cmd_perturb(c: Any) -> int:
    from dpspark import local

    m = local.perturb(c)
    if c.quiet:
        _print(_released("perturb", c, m))
        return 0
    keys = ("status", "engine", "output", "partition", "mechanism", "epsilon", "lambda", "euclidean_epsilon_bound")
    summary = {k: m[k] for k in keys if k in m}  # lambda and the Euclidean bound: the noise family's
    summary.update(mechanism_parameters=m["mechanism_parameters"], guarantee_type=m["guarantee_type"])
    summary["layout"] = m["layout"]
    summary["recall_at_1"] = m["nearest_neighbour"]["recall_at_1"]
    summary.update(counts=m["counts"], ledger=m["ledger"], timings=m["timings"])
    _print(summary)
    return 0


def _cmd_release_vectors(c: Any) -> int:
    from dpspark import local

    m = local.release_vectors(c)
    if c.quiet:
        _print(_released("release-vectors", c, m))
        return 0
    keys = (
        "status",
        "engine",
        "output",
        "mechanism",
        "epsilon",
        "delta",
        "beta",
        "input_dimension",
        "output_dimension",
    )
    _print({**{k: m[k] for k in keys}, "counts": m["counts"], "timings": m["timings"]})
    return 0


def _cmd_privacy_stats(c: Any) -> int:
    from dpspark import local

    m = local.privacy_stats(c)
    t = m["timings"]
    md = Path(c.output) / "summary.md"
    table = md.read_text(encoding="utf-8") if md.is_file() else ""
    _print(
        f"{table}{m['draws']:,} draws in {t['statistics_s']} s ({t['draws_per_s']:,.0f} draws/s); statistics, "
        f"tables and plots in {c.output} (engine: {m['engine']})"
    )
    return 0


def _cmd_calibrate(c: Any) -> int:
    from dpspark import report
    from dpspark.spark.calibrate import run_calibrate

    result = run_calibrate(c)
    if c.joint:
        _print(report.frontier_md(result, result["bounds"]))
        if result["best"] is None:
            print("dpspark calibrate: no (ε, λ) of the grid meets these bounds", file=sys.stderr)
            return NO_EPSILON_MEETS_BOUNDS
        return 0
    _print(report.calibration_md(result, result["bounds"]))
    if result["best"] is None:
        print("dpspark calibrate: no ε in range meets these bounds for any setting", file=sys.stderr)
        return NO_EPSILON_MEETS_BOUNDS
    return 0


def _cmd_evaluate_utility(c: Any) -> int:
    from dpspark import local

    m = local.evaluate_utility(c)
    md = Path(c.output) / "summary.md"
    table = md.read_text(encoding="utf-8") if md.is_file() else ""
    t = m["timings"]
    _print(
        f"{table}\n{t['grid_points']} grid points in {t['grid_s']} s ({t['per_grid_point_s']} s each); "
        f"results, summary, plots and manifest in {c.output} (engine: {m['engine']})"
    )
    return 0


def _cmd_privacy_risk(c: Any) -> int:
    from dpspark import local

    m = local.privacy_risk(c)
    md = Path(c.output) / "summary.md"
    table = md.read_text(encoding="utf-8") if md.is_file() else ""
    _print(
        f"{table}\n{m['draws']:,} draws in {m['timings']['risk_s']} s; tables and plots in {c.output} "
        f"(engine: {m['engine']})"
    )
    return 0


def _cmd_compare(c: Any) -> int:
    from dpspark import local

    m = local.compare(c)
    md = Path(c.output) / "report.md"
    _print(md.read_text(encoding="utf-8") if md.is_file() else m["recommendation"])
    t = m["timings"]
    where = f"report.md, report.html in {c.output} (engine: {m['engine']})"
    _print(f"\n{t['grid_points']} settings, {t['per_grid_point_s']} s each; {where}")
    bounded = c.max_utility_loss is not None or c.max_reidentification is not None
    if bounded and m["recommended"] is None:
        print("dpspark compare: no setting of the grid meets these bounds", file=sys.stderr)
        return NO_EPSILON_MEETS_BOUNDS
    return 0


def _cmd_evaluation(command: str, c: Any) -> int:
    try:
        from dpspark.evaluation import embedding_report, privemb_eval
    except ImportError as exc:  # scikit-learn / vaderSentiment are the eval extra
        from dpspark.errors import ConfigError

        raise ConfigError(f"{command} needs the eval extra: pip install 'dpspark[eval]' ({exc})") from None
    # Their ``run`` prints the result unless quiet; here --quiet has already silenced logs and warnings.
    return (embedding_report if command == "embedding-report" else privemb_eval).run(c.copy(update={"quiet": False}))


class Command(typing.NamedTuple):
    model: str  # the name of its settings model in dpspark.config
    help: str
    run: typing.Callable[[Any], int]  # the validated settings -> the exit code


COMMANDS: dict[str, Command] = {
    # command: (its settings model in dpspark.config, its help, what runs it); ``doctor`` has no settings
    "perturb": Command("PerturbConfig", "privately perturb every token of Parquet text columns", _cmd_perturb),
    "release-vectors": Command(
        "VectorsConfig",
        "release private vectors (PrivEmb or M1) of an array/vector or text column",
        _cmd_release_vectors,
    ),
    "privacy-stats": Command(
        "StatsConfig",
        "Nw/Sw plausible-deniability statistics over a grid of mechanisms, ε and their parameters",
        _cmd_privacy_stats,
    ),
    "calibrate": Command(
        "CalibrateConfig", "the largest ε per λ whose worst-case Nw/Sw meet your bounds", _cmd_calibrate
    ),
    "embedding-report": Command(
        "EmbeddingReportConfig",
        "geometry of the embedding: k-NN distance percentiles, density (Xu Table 5), spectrum of Σ",
        functools.partial(_cmd_evaluation, "embedding-report"),
    ),
    "evaluate-utility": Command(
        "EvaluateUtilityConfig",
        "downstream utility of perturbed text: a classifier train-time / test-time over a grid of settings",
        _cmd_evaluate_utility,
    ),
    "privacy-risk": Command(
        "RiskConfig",
        "re-identification risk: the share of corpus tokens an informed attacker recovers, per setting",
        _cmd_privacy_risk,
    ),
    "compare": Command(
        "CompareConfig",
        "mechanisms side by side on labelled data: utility, re-identification, the field's metrics, equal privacy",
        _cmd_compare,
    ),
    "evaluate-vectors": Command(
        "EvaluateVectorsConfig",
        "PrivEmb (M2) against M1: distance, inner-product and linear-classifier utility (paper §5)",
        functools.partial(_cmd_evaluation, "evaluate-vectors"),
    ),
}


DISK_FULL = os.strerror(errno.ENOSPC)  # "No space left on device": the text of Java's and Python's errors


def explain_failure(command: str, exc: Exception) -> int | None:
    """Print the one-sentence error of a failure the command explains and return its exit code;
    None for an unexpected failure (the caller re-raises it: exit 1 with a traceback)."""
    from dpspark.errors import ConfigError, DPSparkError, OutputError
    from dpspark.spark.memory import exception_text, memory_failure  # imports no pyspark: safe on any failure

    if isinstance(exc, DPSparkError):
        message, code = str(exc), exc.exit_code
    elif isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        where = f" holding {exc.filename}" if exc.filename else ""
        message, code = f"the disk{where} is full: free space or choose another --output", OutputError.exit_code
    elif DISK_FULL in exception_text(exc):  # Spark's failure of a task, or of the driver's JVM, on a full disk
        message, code = "a disk is full: free space or choose another --output", OutputError.exit_code
    elif isinstance(exc, ModuleNotFoundError) and exc.name in ("pyspark", "pandas"):
        message = (
            f"{command} runs on Spark and needs {exc.name}: pip install 'dpspark[spark]' "
            "(or run it where Spark is installed, e.g. with spark-submit or on Databricks)"
        )
        code = ConfigError.exit_code
    elif (memory := memory_failure(exc)) is not None:  # a Java heap ran out: the setting to raise
        message, code = str(memory), memory.exit_code
    else:
        return None
    print(f"dpspark {command}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    from dpspark import _blas

    kept = _blas.kept_kernel_note()
    _blas.prefer_fast_kernels()  # before numpy loads OpenBLAS (an explicit step of the command, not an import)
    args = parse_args(argv)
    command = args.pop("command")
    if command == "doctor":
        from dpspark import doctor

        return doctor.main()
    quiet = bool(args.get("quiet", False))
    # --quiet silences logs, warnings and progress (the manifest records the opt-ins); results still print.
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("dpspark").setLevel(logging.ERROR if quiet else logging.INFO)
    from dpspark import config

    try:
        model = getattr(config, COMMANDS[command].model)
        c = model.from_sources(args.pop("config", None), args)
        if c.quiet:  # quiet: true in the --config file
            logging.getLogger("dpspark").setLevel(logging.ERROR)
        if kept and command in SEARCHES and not c.quiet:  # where the search runs, once the settings are valid
            logging.getLogger("dpspark.blas").info(kept)  # "dpspark" itself logs JSON events only
        from dpspark import preflight

        preflight.check(command, c)  # a local input's path and columns, before Spark starts
        if hasattr(c, "engine"):  # a command without a local engine refuses one here, before any work
            from dpspark import local

            local.engine_for(command, c)
        with warnings.catch_warnings():
            if c.quiet:
                warnings.simplefilter("ignore")
            return COMMANDS[command].run(c)
    except Exception as exc:
        code = explain_failure(command, exc)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    sys.exit(main())


def run() -> None:
    """The console script ``dpspark``: ``main``'s exit code as the process's. A refused release
    fails the process (and so a scheduled job's run, which may ignore a returned value)."""
    code = main()
    if code:
        sys.exit(code)
