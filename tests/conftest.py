"""Shared test fixtures. Area-specific fixtures live in each tests/<area>/conftest.py."""

import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
