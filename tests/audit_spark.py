"""The one SparkSession of a test session (local[2], no UI, few shuffle partitions).

Imported by the audit test packages' conftests. Starting a JVM costs tens of
seconds on a loaded machine, so every audit test shares it: ``getOrCreate``
hands both packages the same session, and it is stopped once, at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from popfleet_audit import session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    spark_session = session.build("local[2]", app_name="popfleet-audit-tests")
    spark_session.conf.set("spark.sql.shuffle.partitions", "2")
    yield spark_session
    spark_session.stop()
    # py4j closes its gateway connections from __del__ at interpreter exit and logs that at
    # INFO, after pytest has closed the streams its handlers write to ("--- Logging error
    # --- ValueError: I/O operation on closed file" in every run's output): say nothing.
    logging.getLogger("py4j").setLevel(logging.WARNING)
