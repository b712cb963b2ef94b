"""``popfleet-audit``: run the lag and/or revive backlog audit once, then publish the results.

    popfleet-audit {lag,revive,all} --brokers H:P[,H:P...] [--admin-token-file F]
                   --output DIR [--history DIR] [--master local[2]]
                   [--namespace NS --cluster NAME] [--no-patch-status] [--kubeconfig F]
                   [--conf spark.KEY=VALUE ...]

Also runnable as a file, ``spark-submit <site-packages>/popfleet_audit/main.py all ...``
(the Kubernetes master), hence the absolute imports and the ``__main__`` guard.

Steps: parse and validate the command line (exit 2 on bad input, nothing
touched); build the SparkSession; run each job's extract -> transform -> load
(reports under ``--output``); stop Spark; then, with ``--namespace``/``--cluster``
and without ``--no-patch-status``, patch each ConsumerGroup's ``status.audit``
and emit Events for changed statuses. Exit 0 on success, 1 when an audit or
the publishing failed (the reports written so far stay).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).parent:
    # Run as a file (spark-submit .../main.py): this directory is sys.path[0], which would make
    # every module of the package importable under a bare name (config, metrics, session...).
    del sys.path[0]

from popfleet_audit import config as configuration

log = logging.getLogger("popfleet_audit")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = configuration.parse_args(sys.argv[1:] if argv is None else argv)
        token = configuration.read_token(config)
    except configuration.ConfigError as exc:
        print(f"popfleet-audit: {exc}", file=sys.stderr)
        return 2
    # Imported here: `--help` and bad input answer without loading Spark.
    from popfleet_audit import jobs, kube, session  # noqa: PLC0415

    spark = session.build(config.master, conf=config.spark_conf)
    try:
        summary = jobs.run(spark, config, token=token)
    except Exception:  # the edge: whatever failed inside Spark or a broker, log it and exit 1
        log.exception("audit %s failed", config.run_id)
        return 1
    finally:
        spark.stop()
    log.info("audit %s written to %s", config.run_id, config.output_dir)
    if not config.patches_status:
        return 0
    try:
        kube.publish(config, summary)
    except (kube.PublishError, OSError) as exc:
        log.error("audit %s: publishing failed: %s", config.run_id, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
