"""The ``popfleet-audit`` command line, parsed into a validated :class:`AuditConfig`.

The operator creates audit Jobs and SparkApplications with exactly this command
line (issue 7)::

    popfleet-audit {lag,revive,all} --brokers H:P[,H:P...] [--admin-token-file F]
                   --output DIR [--history DIR] [--master local[2]]
                   [--namespace NS --cluster NAME] [--no-patch-status] [--kubeconfig F]
                   [--conf spark.KEY=VALUE ...]

so options are only ever added, never renamed. Bad input raises
:class:`ConfigError` (exit status 2) before anything is read or written.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

JOBS = ("lag", "revive", "all")
DEFAULT_WINDOW_AUDITS = 10
DEFAULT_OVERDUE_GRACE_MS = 5_000
_ENDPOINT = re.compile(r"^[A-Za-z0-9_.\-]+:[0-9]{1,5}$|^\[[0-9a-fA-F:]+\]:[0-9]{1,5}$")


class ConfigError(ValueError):
    """The command line is unusable; nothing was read or written."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    job: str
    brokers: tuple[str, ...]
    admin_token_file: Path | None
    output_dir: Path
    history_dir: Path
    master: str | None
    namespace: str | None
    cluster: str | None
    patch_status: bool
    kubeconfig: Path | None
    window_audits: int
    overdue_grace_ms: int
    run_id: str
    spark_conf: tuple[tuple[str, str], ...] = ()  # --conf: spark.* settings for the session

    @property
    def runs_lag(self) -> bool:
        return self.job in ("lag", "all")

    @property
    def runs_revive(self) -> bool:
        return self.job in ("revive", "all")

    @property
    def patches_status(self) -> bool:
        """Status patches go out with --namespace/--cluster unless --no-patch-status."""
        return self.patch_status and self.namespace is not None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="popfleet-audit", description="Audit a popfleet broker fleet on Spark."
    )
    parser.add_argument("job", choices=JOBS, help="lag, revive (backlog) or all")
    parser.add_argument("--brokers", required=True, help="admin endpoints H:P[,H:P...]")
    parser.add_argument("--admin-token-file", type=Path, help="file holding the admin token")
    parser.add_argument("--output", type=Path, required=True, help="report directory")
    parser.add_argument("--history", type=Path, help="lag history table (default OUTPUT/history)")
    parser.add_argument("--master", help="Spark master, e.g. local[2] (default: spark-submit's)")
    parser.add_argument("--namespace", help="namespace of the ConsumerGroups to patch")
    parser.add_argument("--cluster", help="BrokerCluster the audited brokers belong to")
    parser.add_argument(
        "--no-patch-status",
        dest="patch_status",
        action="store_false",
        help="write reports only; leave ConsumerGroup status and Events alone",
    )
    parser.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster)")
    parser.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW_AUDITS,
        help="audits in the Burrow evaluation window (default %(default)s)",
    )
    parser.add_argument(
        "--overdue-grace-ms",
        type=int,
        default=DEFAULT_OVERDUE_GRACE_MS,
        help="a checkpoint this long past its revive time is overdue (default %(default)s)",
    )
    parser.add_argument("--run-id", help="name of this run (default: audit-<epoch ms>)")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="spark.KEY=VALUE",
        help="a Spark setting for the session (repeatable; spec.audit.spark.conf)",
    )
    return parser


def parse_conf(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``spark.KEY=VALUE`` pairs, in order; anything else is a ConfigError."""
    parsed = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("spark.") or key != key.strip():
            raise ConfigError(f"--conf: {pair!r} is not spark.KEY=VALUE")
        parsed.append((key, value))
    return tuple(parsed)


def parse_brokers(text: str) -> tuple[str, ...]:
    brokers = tuple(part.strip() for part in text.split(",") if part.strip())
    if not brokers:
        raise ConfigError("--brokers: no endpoint given (want H:P[,H:P...])")
    for endpoint in brokers:
        if not _ENDPOINT.match(endpoint) or not 0 < int(endpoint.rsplit(":", 1)[1]) < 65536:
            raise ConfigError(f"--brokers: {endpoint!r} is not HOST:PORT")
    if len(set(brokers)) != len(brokers):
        raise ConfigError("--brokers: an endpoint is listed twice")
    return brokers


def parse_args(argv: Sequence[str], *, now_ms: int | None = None) -> AuditConfig:
    """Parse and validate; argparse usage errors exit 2, semantic ones raise ConfigError."""
    args = build_parser().parse_args(list(argv))
    if (args.namespace is None) != (args.cluster is None):
        raise ConfigError("--namespace and --cluster go together")
    if args.window < 2:
        raise ConfigError("--window: at least 2 audits are needed to see a trend")
    if args.overdue_grace_ms < 0:
        raise ConfigError("--overdue-grace-ms must not be negative")
    if args.admin_token_file is not None and not args.admin_token_file.is_file():
        raise ConfigError(f"--admin-token-file: {args.admin_token_file} is not a file")
    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise ConfigError(f"--kubeconfig: {args.kubeconfig} is not a file")
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    run_id = args.run_id or f"audit-{stamp}"
    if not re.match(r"^[A-Za-z0-9._-]{1,128}$", run_id):
        raise ConfigError(f"--run-id: {run_id!r} (letters, digits, '.', '_', '-')")
    return AuditConfig(
        job=args.job,
        brokers=parse_brokers(args.brokers),
        admin_token_file=args.admin_token_file,
        output_dir=args.output,
        history_dir=args.history if args.history is not None else args.output / "history",
        master=args.master,
        namespace=args.namespace,
        cluster=args.cluster,
        patch_status=args.patch_status,
        kubeconfig=args.kubeconfig,
        window_audits=args.window,
        overdue_grace_ms=args.overdue_grace_ms,
        run_id=run_id,
        spark_conf=parse_conf(args.conf),
    )


def read_token(config: AuditConfig) -> str | None:
    if config.admin_token_file is None:
        return None
    token = config.admin_token_file.read_text().strip()
    if not token:
        raise ConfigError(f"--admin-token-file: {config.admin_token_file} is empty")
    return token
