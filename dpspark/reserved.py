"""The names dpspark gives its own files and tables beside and inside an output, kept off users' outputs.

Every such name begins with ``_dpspark_``: the commit lock ``_dpspark_lock_<name>`` and the temporaries
``_dpspark_tmp_<name>_…`` and ``_dpspark_old_<name>_…`` beside an output, the ledger ``_dpspark_ledger/``
and the manifest inside it; a table's ledger is the table ``<name>__dpspark_ledger``. An output given one
of these names is taken for dpspark's own: as a lock it blocks every release to its neighbour, as a
temporary the next release there removes it as stale, inside a ledger it makes that ledger unreadable.
So an output path with a part named so, or such a table, is refused with the settings (before Spark).

Pure Python: ``dpspark.config`` checks the settings with it, ``dpspark.spark.io`` names the files.
"""

from __future__ import annotations

from dpspark.ledger import LEDGER_DIR

PREFIX = "_dpspark_"
TMP_PREFIX = "_dpspark_tmp_"
OLD_PREFIX = "_dpspark_old_"
LOCK_PREFIX = "_dpspark_lock_"
TABLE_LEDGER_SUFFIX = "__dpspark_ledger"
MANIFEST = "_dpspark_manifest.json"  # every output's manifest, written last


def _role(part: str) -> str:
    """What dpspark keeps the path part ``part`` (which begins with PREFIX) for."""
    if part.startswith(LOCK_PREFIX):
        neighbour = part[len(LOCK_PREFIX) :]
        return (
            f"the commit lock of the output {neighbour} beside it, and a directory there is one no release "
            f"removes, so every release to {neighbour} would fail (an output must not be named {LOCK_PREFIX}...)"
        )
    if part.startswith((TMP_PREFIX, OLD_PREFIX)):
        return "a release's temporary, which a later release beside it removes as stale"
    if part == LEDGER_DIR:
        return "the ε ledger of the release that holds it, which a directory of other data would make unreadable"
    return "its own files (manifests, ledgers, locks, temporaries)"


def output_path_problem(path: str) -> str | None:
    """Why ``path`` may not be an output (a part of it is a name dpspark keeps), or None."""
    for part in path.replace("\\", "/").split("/"):
        if part.startswith(PREFIX):
            return (
                f"{part} is a name dpspark keeps for {_role(part)}: choose an --output with no part beginning "
                f"with {PREFIX}"
            )
    return None


def output_table_problem(name: str) -> str | None:
    """Why the table ``name`` (catalog.schema.table) may not be an output, or None."""
    table = name.rsplit(".", 1)[-1].strip("`").lower()
    if table.endswith(TABLE_LEDGER_SUFFIX):
        return (
            f"{table} is the ledger table of the output table {table[: -len(TABLE_LEDGER_SUFFIX)]}: choose an "
            f"--output-table whose name does not end with {TABLE_LEDGER_SUFFIX}"
        )
    if table.startswith(PREFIX):
        return (
            f"{table} is a name dpspark keeps for its staging tables, which a later release beside it drops as "
            f"stale: choose an --output-table whose name does not begin with {PREFIX}"
        )
    return None
