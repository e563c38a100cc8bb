"""Where a DataFrame's rows come from: the files and tables its plan reads.

The overlap check of a release (``io.Paths``, ``tables.TableOutput``) needs every source of
the input. ``DataFrame.inputFiles()`` cannot give them: it reads the *optimized* plan, in
which Spark's cache manager has already put the cached data in place of the relation, so
once any cell ran ``spark.read.parquet(p).cache()`` (or ``CACHE TABLE``), even a fresh read
of ``p`` lists no files. The *analyzed* plan still holds the relations themselves, so its
leaves, and the leaves of every subquery in it, are read here:

- a file relation (``LogicalRelation`` over a ``HadoopFsRelation``): its root paths, and its
  catalog table when it was read as one;
- a Hive table relation: the table and its location;
- a data source v2 relation: its table and the table's ``location`` (or ``path``) property;
- ``Range``, ``OneRowRelation``, an empty ``LocalRelation``: no source at all;
- a reference to a common table expression (``WITH t AS (...)``, a ``CTERelationRef``, and a recursive
  CTE's to its own loop): nothing of its own, the CTE's definition (a child of the plan's ``WithCTE``)
  is read like the rest of the plan;
- anything else (a checkpoint's or an RDD's ``LogicalRDD``, rows built from Python or pandas,
  a v2 table without a location): unknown. A release refuses such a DataFrame unless the
  caller names its source (``input=``).

Spark Connect has no JVM on the client: there the client's own plan (protobuf) is walked,
whose ``read`` nodes name their paths and tables before the server sees any cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame

from dpspark.spark.session import is_connect


@dataclass
class Sources:
    """The sources of a DataFrame: file locations as Spark names them, and table names."""

    paths: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # what could not be traced (plan node names)

    @property
    def known(self) -> bool:
        return not self.unknown


def sources(df: DataFrame) -> Sources:
    """Every file location and table that ``df`` reads (see the module docstring)."""
    return _connect_sources(df) if is_connect(df.sparkSession) else _classic_sources(df)


def _seq(seq) -> list:  # noqa: ANN001 - a Scala Seq through py4j
    return [seq.apply(i) for i in range(seq.size())]


# A leaf that reads the rows of a node above it, not a source: its kind → (that node's kind, the leaf's
# method that names the node's id). A CTE's reference (``WITH t AS (...)``): its definition is a child of
# the plan's ``WithCTE``; a recursive CTE's reference to its own loop (``WITH RECURSIVE``, where Spark has it).
_REFERENCES = {"CTERelationRef": ("CTERelationDef", "cteId"), "UnionLoopRef": ("UnionLoop", "loopId")}
_REFERRED = {kind for kind, _ in _REFERENCES.values()}


def _leaves(plan) -> tuple[list, set[tuple[str, int]]]:  # noqa: ANN001 - a LogicalPlan through py4j
    """The leaves of ``plan`` and of every subquery in it (``IN``, ``EXISTS``, scalar, correlated, in any
    clause): ``collectLeaves`` alone stops at the expressions that hold a subquery's plan. And (kind, id) of
    the nodes that ``_REFERENCES`` leaves may refer to, met on the way: their own leaves are among these."""
    found, referred, todo = [], set(), [plan]
    while todo:
        node = todo.pop()
        children = _seq(node.children())
        todo += children + _seq(node.subqueries())
        if not children:
            found.append(node)
        elif node.getClass().getSimpleName() in _REFERRED:
            referred.add((node.getClass().getSimpleName(), int(node.id())))
    return found, referred


def _classic_sources(df: DataFrame) -> Sources:
    found = Sources()
    leaves, referred = _leaves(df._jdf.queryExecution().analyzed())
    for leaf in leaves:
        kind = leaf.getClass().getSimpleName()
        if kind in _REFERENCES:
            target, method = _REFERENCES[kind]
            if (target, int(getattr(leaf, method)())) in referred:
                continue  # the rows of a node whose leaves are read as well
        if kind in ("LogicalRelation", "LogicalRelationWithTable"):
            table = leaf.catalogTable()
            if table.isDefined():
                _add_table(found, table.get())
            relation = leaf.relation()
            if relation.getClass().getSimpleName() == "HadoopFsRelation":
                found.paths += [p.toString() for p in _seq(relation.location().rootPaths())]
            elif not table.isDefined() and "JDBC" not in relation.getClass().getSimpleName():
                found.unknown.append(relation.getClass().getSimpleName())
        elif kind == "HiveTableRelation":
            _add_table(found, leaf.tableMeta())
        elif kind == "DataSourceV2Relation":
            props = leaf.table().properties()
            where = props.get("location") or props.get("path")
            found.tables.append(str(leaf.table().name()))
            if where:
                found.paths.append(str(where))
            else:
                found.unknown.append(f"table {leaf.table().name()} (no location)")
        elif kind in ("Range", "OneRowRelation") or (kind == "LocalRelation" and leaf.data().isEmpty()):
            continue
        else:
            found.unknown.append(kind)
    return found


def _add_table(found: Sources, table) -> None:  # noqa: ANN001 - a CatalogTable through py4j
    found.tables.append(str(table.identifier().unquotedString()))
    location = table.storage().locationUri()
    if location.isDefined():
        found.paths.append(str(location.get().toString()))


def _connect_sources(df: DataFrame) -> Sources:
    from pyspark.sql.connect.proto import Relation

    found = Sources()
    plan = df._plan.plan(df.sparkSession.client)

    def walk(message) -> None:  # noqa: ANN001 - protobuf messages
        if isinstance(message, Relation):
            which = message.WhichOneof("rel_type")
            if which == "read":
                read = message.read
                if read.HasField("named_table"):
                    found.tables.append(read.named_table.unparsed_identifier)
                else:
                    found.paths += list(read.data_source.paths) or [read.data_source.options.get("path", "")]
                return
            if which == "range" or (which == "local_relation" and not message.local_relation.data):
                return
            if which in ("local_relation", "cached_local_relation", "cached_remote_relation", "sql"):
                found.unknown.append(which)
                return
        for fd, value in message.ListFields():
            if fd.message_type is None or fd.message_type.GetOptions().map_entry:
                continue
            for item in value if fd.label == fd.LABEL_REPEATED else [value]:
                walk(item)

    walk(plan)
    found.paths = [p for p in found.paths if p]
    return found
