"""Who leads a broker set, on a Kubernetes Lease (issue 18; run by the store role with
``--replica-name``). The decisions are :mod:`popbroker.replication.lease`'s; this is their
I/O.

One ``coordination.k8s.io/v1`` Lease per broker set. ``spec.holderIdentity`` is the leader
(its pod name), the annotation ``popfleet.io/term`` our term counter. Every write carries the
``resourceVersion`` read (a replace, or a create for a missing Lease), so two candidates
racing for one term cannot both win: the API server answers the loser 409. A candidate
measures the holder's silence by its own clock (``Observer``), never by ``renewTime``.

A Lease never goes back: terms begin in Lease writes, so a replica's store never holds a
term above its Lease's. A Lease that does (deleted, its cluster going, or rewritten by
hand) has lost the set's history, the in-sync set with it; a replica that has been in a
term (``known_term``) neither creates nor takes such a Lease (it could hand leadership to
a replica without the acknowledged writes, and on a cluster's deletion it would leave a
Lease nobody owns). It waits, fenced, until the Lease records its term again (the recovery
in docs/operations.md). A new replica (term 0) creates a missing Lease as before.

:meth:`LeaseCoordinator.step` is one round of the loop a broker runs every ``retry_ms``:
read, decide, write, and report who holds which term and whether this replica may serve
(its last renewal younger than ``renew_deadline_ms``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from popbroker.replication import lease

log = logging.getLogger(__name__)

TERM_ANNOTATION = "popfleet.io/term"
IN_SYNC_ANNOTATION = "popfleet.io/in-sync"  # comma-separated replica names
# the broker set the Lease decides and the holder's client endpoint (routes name it)
SET_ANNOTATION = "popfleet.io/broker-set"
ENDPOINT_ANNOTATION = "popfleet.io/endpoint"
# where the holder serves its followers (HOST:PORT; its pod IP in a cluster, so followers
# need no DNS and always dial the current holder's current address)
REPLICATION_ANNOTATION = "popfleet.io/replication-endpoint"
CLUSTER_LABEL = "popfleet.io/cluster"
# on a released Lease: the replica its last holder handed it to (``release(successor=)``),
# the only one that takes it before the lease time; every holder's write removes it
SUCCESSOR_ANNOTATION = "popfleet.io/successor"


@dataclass(frozen=True, slots=True)
class Standing:
    """After a round: the holder and term the Lease names, and whether this replica serves."""

    holder: str | None
    term: int
    serving: bool
    # the holder's REPLICATION_ANNOTATION as read (None: not written, or not the holder's)
    replication_endpoint: str | None = field(default=None, compare=False)


class LeaseCoordinator:
    """One replica's side of a broker set's Lease (module docstring)."""

    def __init__(
        self,
        api: client.CoordinationV1Api,
        *,
        namespace: str,
        name: str,
        me: str,
        lease_ms: int,
        renew_deadline_ms: int,
        retry_ms: int,
        clock_ms: Callable[[], int],
        eligible: Callable[[], bool] = lambda: True,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        known_term: Callable[[], int] = lambda: 0,
    ) -> None:
        """``known_term``: the highest term this replica's store has seen (module
        docstring: a Lease below it is not written)."""
        lease.check_timing(
            lease_ms=lease_ms, renew_deadline_ms=renew_deadline_ms, retry_ms=retry_ms
        )
        self._api = api
        self._namespace = namespace
        self._name = name
        self.me = me
        self._lease_ms = lease_ms
        self._renew_deadline_ms = renew_deadline_ms
        self._clock_ms = clock_ms
        self._eligible = eligible
        self._known_term = known_term
        self._lost: int | None = None  # the term of a Lease found below ours, logged once
        self._labels = dict(labels or {})
        self._annotations = dict(annotations or {})  # written with every write of ours
        self._observer = lease.Observer()
        self._last_renewed_ms: int | None = None
        self._term = 0

    async def step(self, in_sync: Collection[str] | None = None) -> Standing:
        """Read, decide, write once (see the module docstring). A holder records
        ``in_sync`` with its renewal (None: keep the recorded set); a candidate outside the
        recorded set never takes over."""
        now = self._clock_ms()
        body = await self._read()
        record = _record(body)
        known = self._known_term()
        if record.term < known:  # the Lease lost the set's history: never written over
            if self._lost != record.term:
                self._lost = record.term
                log.error(
                    "Lease %s/%s %s term %d, below term %d that %s has been in: not "
                    "creating or taking it (restore its %s and %s annotations to recover)",
                    self._namespace, self._name, "is gone: no" if body is None else "records",
                    record.term, known, self.me, TERM_ANNOTATION, IN_SYNC_ANNOTATION,
                )  # fmt: skip
            self._last_renewed_ms = None
            return self._standing(record.holder, record.term, now, body=body)
        self._lost = None
        decision = lease.decide(
            self.me,
            record,
            unchanged_ms=self._observer.observe(record, now),
            lease_ms=self._lease_ms,
            eligible=self._eligible() and record.may_lead(self.me),
        )
        if isinstance(decision, lease.Wait):
            if record.holder != self.me:
                self._last_renewed_ms = None
            return self._standing(record.holder, record.term, now, body=body)
        term = decision.term
        members = record.in_sync if in_sync is None else frozenset(in_sync) | {self.me}
        if await self._write(body, term, now_ms=now, in_sync=members):
            self._last_renewed_ms = now
            self._term = term
            return self._standing(self.me, term, now)
        self._last_renewed_ms = None  # someone else moved: read again next round
        return self._standing(record.holder, record.term, now, body=body)

    async def release(self, successor: str | None = None) -> bool:
        """Give the Lease up (holder cleared; term and in-sync set kept) if this replica
        holds it, so another in-sync replica takes the next term at its next round instead
        of after the lease time: a graceful stop hands leadership over. With ``successor``,
        only that replica takes it before the lease time (an explicit hand-over). The caller
        has stopped taking writes first. False when it did not hold it, or another write
        won."""
        body = await self._read()
        if body is None or body.spec.holder_identity != self.me:
            return False
        spec = {"holderIdentity": None, "leaseDurationSeconds": max(1, self._lease_ms // 1000)}
        annotations = dict(body.metadata.annotations or {})
        annotations.pop(SUCCESSOR_ANNOTATION, None)
        if successor is not None:
            annotations[SUCCESSOR_ANNOTATION] = successor
        metadata = {
            "name": self._name,
            "resourceVersion": body.metadata.resource_version,
            "annotations": annotations,
            "labels": dict(body.metadata.labels or {}),
            **_owners(body),
        }
        self._last_renewed_ms = None
        try:
            await self._api.replace_namespaced_lease(
                self._name, self._namespace, cast(Any, _lease(metadata, spec))
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def may_serve(self) -> bool:
        return lease.may_serve(
            last_renewed_ms=self._last_renewed_ms,
            now_ms=self._clock_ms(),
            renew_deadline_ms=self._renew_deadline_ms,
        )

    def _standing(
        self, holder: str | None, term: int, now: int, *, body: Any | None = None
    ) -> Standing:
        serving = holder == self.me and lease.may_serve(
            last_renewed_ms=self._last_renewed_ms, now_ms=now,
            renew_deadline_ms=self._renew_deadline_ms,
        )  # fmt: skip
        endpoint = None
        if body is not None and holder is not None and body.spec.holder_identity == holder:
            endpoint = (body.metadata.annotations or {}).get(REPLICATION_ANNOTATION)
        return Standing(holder, term, serving, endpoint)

    async def _read(self) -> Any | None:
        try:
            return await self._api.read_namespaced_lease(self._name, self._namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def _write(
        self, body: Any | None, term: int, *, now_ms: int, in_sync: frozenset[str]
    ) -> bool:
        """Hold the Lease for ``term``; False when another write got there first (409).

        The body is written as plain JSON: the times are MicroTime, which the API server
        parses only with the microseconds written out, and the client's models would write
        a whole second without them (informational only: nobody trusts ``renewTime``).
        """
        stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec: dict[str, Any] = {
            "holderIdentity": self.me,
            "leaseDurationSeconds": max(1, self._lease_ms // 1000),
            "renewTime": stamp,
            "acquireTime": stamp,
        }
        ours = {
            **self._annotations,
            TERM_ANNOTATION: str(term),
            IN_SYNC_ANNOTATION: ",".join(sorted(in_sync)),
        }
        metadata: dict[str, Any] = {
            "name": self._name,
            "annotations": ours,
            "labels": self._labels,
        }
        try:
            if body is None:
                await self._api.create_namespaced_lease(
                    self._namespace, cast(Any, _lease(metadata, spec))
                )
                return True
            if body.spec.holder_identity == self.me and body.spec.acquire_time is not None:
                spec["acquireTime"] = body.spec.acquire_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            metadata["resourceVersion"] = body.metadata.resource_version
            metadata["annotations"] = {**(body.metadata.annotations or {}), **ours}
            metadata["annotations"].pop(SUCCESSOR_ANNOTATION, None)  # taken: no successor
            metadata["labels"] = {**(body.metadata.labels or {}), **self._labels}
            metadata.update(_owners(body))
            await self._api.replace_namespaced_lease(
                self._name, self._namespace, cast(Any, _lease(metadata, spec))
            )
            return True
        except ApiException as exc:
            if exc.status == 409:  # created meanwhile, or its resourceVersion moved on
                return False
            raise


class LeaderDirectory:
    """Every broker set's leader endpoint, from the cluster's Leases (label
    ``popfleet.io/cluster``): what each holder wrote in ``popfleet.io/endpoint``. Read by
    every replica each round, so routes follow a failover without the operator."""

    def __init__(self, api: client.CoordinationV1Api, *, namespace: str, cluster: str) -> None:
        self._api = api
        self._namespace = namespace
        self._selector = f"{CLUSTER_LABEL}={cluster}"
        self.endpoints: dict[str, str] = {}  # broker set -> its leader's client endpoint

    async def refresh(self) -> dict[str, str]:
        leases = await self._api.list_namespaced_lease(
            self._namespace, label_selector=self._selector
        )
        found: dict[str, str] = {}
        for item in leases.items:
            annotations = item.metadata.annotations or {}
            broker_set = annotations.get(SET_ANNOTATION)
            endpoint = annotations.get(ENDPOINT_ANNOTATION)
            if item.spec.holder_identity and broker_set and endpoint:
                found[broker_set] = endpoint
        self.endpoints = found
        return found


def _lease(metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
            "spec": spec}  # fmt: skip


def _owners(body: Any) -> dict[str, Any]:
    """``body``'s owner references as the API's JSON (``{}`` when none). A replace writes
    the whole object, so every write of ours carries them over: the operator owns a
    replicated cluster's set Leases, which then go with the cluster."""
    refs = []
    for ref in body.metadata.owner_references or []:
        out = {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid}
        if ref.controller is not None:
            out["controller"] = ref.controller
        if ref.block_owner_deletion is not None:
            out["blockOwnerDeletion"] = ref.block_owner_deletion
        refs.append(out)
    return {"ownerReferences": refs} if refs else {}


def _record(body: Any | None) -> lease.Record:
    if body is None:
        return lease.Record(None, 0, "")
    annotations = body.metadata.annotations or {}
    try:
        term = int(annotations.get(TERM_ANNOTATION, "0"))
    except ValueError:
        term = 0
    members = frozenset(m for m in annotations.get(IN_SYNC_ANNOTATION, "").split(",") if m)
    return lease.Record(
        body.spec.holder_identity, term, body.metadata.resource_version, members,
        successor=annotations.get(SUCCESSOR_ANNOTATION) or None,
    )  # fmt: skip
