"""The commands' runners, with no pyspark import: each drives the pure engines over a backend.

A runner holds what a command does (its steps, its estimate of the time left, its figures, its report); the
backend (``dpspark.run.backend.Backend``, implemented by ``dpspark.spark.backend.SparkBackend``) holds how
the data is read, perturbed, counted and scored. ``dpspark.run.settings`` builds a run's settings.
"""
