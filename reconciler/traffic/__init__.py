"""Traffic validation: peek messages into a Parquet sample, evaluate filters on it with Spark.

``pyspark`` is imported only inside this package, and only when a command runs Spark: the
modules that import it at import time (:mod:`reconciler.traffic.spark`) are loaded from the
functions that start a Spark job.
"""
