"""The store role's replication (issue 18): its flags, and the replica
it runs beside the store when they are given (``popbroker store --replica-name ...``).

Without ``--replica-name`` nothing changes: the store serves itself. With it, the role
joins its broker set: a :class:`~popbroker.replicator.replica.Replica` runs a round every
``--retry-ms`` (Lease, leading or following), and the store wire serves a
:class:`~popbroker.replicator.facade.ReplicatedStore` (writes through the leader's SYNC
appends, refused on a follower). The Lease is reached with ``--kubeconfig``, or in a pod
with its service account.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from popbroker.store import api
from popbroker.store.local import LocalStore

if TYPE_CHECKING:
    from popbroker.replicator.replica import Replica

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplicationOptions:
    name: str
    peers: dict[str, tuple[str, int]]
    listen: tuple[str, int]
    lease_namespace: str
    lease_name: str
    token: bytes
    kubeconfig: Path | None
    min_in_sync: int
    lease_ms: int
    renew_deadline_ms: int
    retry_ms: int
    max_lag_ms: int
    ack_timeout_s: float
    client_endpoint: str | None
    leader_label_selector: str | None
    leader_file: Path | None
    synchronous: bool

    @staticmethod
    def add_flags(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("replication (issue 18, work in progress)")
        group.add_argument("--replica-name", help="this replica's name in its broker set")
        group.add_argument(
            "--replica-peers", default="", help="NAME=HOST:PORT,... replication addresses"
        )
        group.add_argument(
            "--replication-listen",
            help="HOST:PORT the leader serves followers on (default: its own --replica-peers "
            "address; in a pod the pod IP, while peers name each other by DNS)",
        )
        group.add_argument("--lease-namespace", default="default")
        group.add_argument("--lease-name", help="the broker set's Lease")
        group.add_argument("--replication-token-file", type=Path)
        group.add_argument(
            "--kubeconfig",
            type=Path,
            default=os.environ.get("KUBECONFIG") or None,
            help="default $KUBECONFIG; neither: the pod's service account",
        )
        group.add_argument(
            "--replication-mode",
            choices=["SYNC", "ASYNC"],
            default="SYNC",
            help="SYNC: a write is answered once the in-sync set holds it; ASYNC: after the "
            "leader's write (a failover may lose what the new leader had not received)",
        )
        group.add_argument("--min-in-sync-replicas", type=int, default=1)
        group.add_argument("--lease-ms", type=int, default=15_000)
        group.add_argument("--renew-deadline-ms", type=int, default=10_000)
        group.add_argument("--retry-ms", type=int, default=2_000)
        group.add_argument("--max-lag-ms", type=int, default=10_000)
        group.add_argument("--ack-timeout-s", type=float, default=10.0)
        group.add_argument(
            "--client-endpoint",
            help="HOST:PORT clients reach this pod at: routes name it while it leads",
        )
        group.add_argument(
            "--leader-label-selector",
            help="label the leader's pod popfleet.io/leader=true and take the label off the "
            "other pods of its set, which this label selector matches (the replica name is "
            "the pod's)",
        )
        group.add_argument(
            "--leader-file",
            type=Path,
            help="rewritten every round while this replica leads, removed otherwise "
            "(popfront -leader-file opens the leader port by it)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReplicationOptions | None:
        if not args.replica_name:
            return None
        if not args.lease_name or args.replication_token_file is None:
            raise ValueError("--replica-name needs --lease-name and --replication-token-file")
        peers: dict[str, tuple[str, int]] = {}
        for item in filter(None, args.replica_peers.split(",")):
            name, _, address = item.partition("=")
            host, _, port = address.rpartition(":")
            if not name or not host or not port.isdigit():
                raise ValueError(f"--replica-peers: {item!r} is not NAME=HOST:PORT")
            peers[name] = (host, int(port))
        if args.replica_name not in peers:
            raise ValueError(f"--replica-peers names no address for {args.replica_name!r}")
        listen = peers[args.replica_name]
        if args.replication_listen:
            host, _, port = args.replication_listen.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(
                    f"--replication-listen: {args.replication_listen!r} is not HOST:PORT"
                )
            listen = (host, int(port))
        return cls(
            name=args.replica_name, peers=peers, listen=listen,
            lease_namespace=args.lease_namespace, lease_name=args.lease_name,
            token=args.replication_token_file.read_bytes().strip(),
            kubeconfig=args.kubeconfig, min_in_sync=args.min_in_sync_replicas,
            lease_ms=args.lease_ms, renew_deadline_ms=args.renew_deadline_ms,
            retry_ms=args.retry_ms, max_lag_ms=args.max_lag_ms,
            ack_timeout_s=args.ack_timeout_s, client_endpoint=args.client_endpoint,
            leader_label_selector=args.leader_label_selector, leader_file=args.leader_file,
            synchronous=args.replication_mode == "SYNC",
        )  # fmt: skip


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@contextlib.asynccontextmanager
async def replicated(
    store: LocalStore, options: ReplicationOptions | None
) -> AsyncIterator[api.StoreApi]:
    """What the store wire serves: the store itself, or its replica (module docstring)."""
    if options is None:
        yield store
        return
    # Imported only when replication is on: the Kubernetes client's models cost a store
    # role ~70 MB and ~0.5 s at start, which a store without replication never needs.
    from kubernetes_asyncio import client, config  # noqa: PLC0415

    from popbroker.replicator.facade import ReplicatedStore  # noqa: PLC0415
    from popbroker.replicator.replica import Replica  # noqa: PLC0415

    configuration = client.Configuration()
    if options.kubeconfig is not None:
        await config.load_kube_config(
            config_file=str(options.kubeconfig), client_configuration=configuration
        )
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    async with client.ApiClient(configuration) as api_client:
        replica = Replica(
            store, name=options.name, api=client.CoordinationV1Api(api_client),
            namespace=options.lease_namespace, lease_name=options.lease_name,
            peers=options.peers, token=options.token, clock_ms=_monotonic_ms,
            lease_ms=options.lease_ms, renew_deadline_ms=options.renew_deadline_ms,
            retry_ms=options.retry_ms, max_lag_ms=options.max_lag_ms,
            min_in_sync=options.min_in_sync, ack_timeout_s=options.ack_timeout_s,
            broker_set=store.settings.broker_name, cluster=store.settings.cluster,
            client_endpoint=options.client_endpoint,
            pods=(client.CoreV1Api(api_client), options.leader_label_selector)
            if options.leader_label_selector
            else None,
            synchronous=options.synchronous, listen=options.listen,
        )  # fmt: skip
        mark_leading(options.leader_file, None)  # a file left by a crash says nothing now
        rounds = asyncio.create_task(_rounds(replica, options))
        try:
            yield cast(api.StoreApi, ReplicatedStore(replica))
        finally:
            rounds.cancel()
            await asyncio.gather(rounds, return_exceptions=True)
            mark_leading(options.leader_file, None)
            await replica.stop()


async def _rounds(replica: Replica, options: ReplicationOptions) -> None:
    while True:
        standing = await replica.bounded_round()  # never longer than the renew deadline
        log.debug("replica %s: %s", replica.name, standing)
        leader = replica.leader
        mark_leading(options.leader_file, leader.term if replica.leads_now and leader else None)
        await asyncio.sleep(options.retry_ms / 1000)


def mark_leading(path: Path | None, term: int | None) -> None:
    """The leader file (``--leader-file``): written with the term every round while this
    replica leads, so its age says the store is alive; removed when it does not lead.
    popfront serves its leader port only while the file is fresh (front/leader.go)."""
    if path is None:
        return
    if term is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{term}\n")
    os.replace(tmp, path)
