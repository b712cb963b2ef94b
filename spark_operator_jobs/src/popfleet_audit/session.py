"""The SparkSession of an audit run: built only by entry points (``main``, tests, bench).

Local masters (``local``, ``local[N]``) run their Python workers with this
interpreter and bind to loopback; a Kubernetes master (spark-submit) brings its
own settings. Every session has the ``popfleet`` data source registered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from pyspark.sql import SparkSession

from popfleet_audit import datasource, identity

LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def build(
    master: str | None,
    *,
    conf: Sequence[tuple[str, str]] = (),
    app_name: str = "popfleet-audit",
) -> SparkSession:
    """A session for ``master`` (None: whatever spark-submit configured); ``conf`` (the
    user's ``spec.audit.spark.conf``) is applied last, so it wins over the defaults here."""
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # Workers must import pyspark and popfleet_audit: run them with this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
    else:
        # spark-submit (None) configured the master and the driver's address; nothing here
        # may override them (a loopback driver host would strand every executor pod).
        builder = builder.config("spark.sql.session.timeZone", "UTC")
    for key, value in conf:
        builder = builder.config(key, value)
    identity.ensure_user_entry()  # the JVM needs a passwd entry for this UID (random UIDs)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    spark.dataSource.register(datasource.PopfleetDataSource)
