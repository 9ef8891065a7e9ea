"""Traffic validation: peek messages into a Parquet sample, evaluate filters on it with Spark.

Nothing here imports pyspark at module import time except the Spark-facing modules
(:mod:`session`, :mod:`impact`), which the CLI loads only for commands that need a JVM.
"""
