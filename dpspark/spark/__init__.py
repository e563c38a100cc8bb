"""Spark glue: the only subpackage that imports pyspark."""
