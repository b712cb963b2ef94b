"""One replica of a broker set, leading or following by the Lease (issue 18; the store
role runs one with ``--replica-name``).

Every round (the caller runs one per ``retry_ms``): the leader runs its duty round
(:class:`~popbroker.replicator.duty.LeaderDuty`: renew with the proposed in-sync set); any
other replica runs a Lease step. Then it acts on what the Lease says:

* it holds the Lease and may serve, and was not leading: it **becomes the leader** of that
  term. The term is recorded, then the epoch at its log's end (before any byte of it), the
  follower connection is closed, and its replication server starts on its own address.
* someone else holds it: it **follows** the holder (one follower connection, opened again
  after it ends, to the holder's address in ``peers``), and stops leading if it was.
* it may no longer serve (its renewal is older than the deadline): it stops leading.

A leader can also hand over on request (:meth:`Replica.hand_over`, the admin API's
``HandOver``; :mod:`popbroker.replication.handover`): it stops taking writes, waits for its
successor to hold everything, and releases the Lease naming it.

A round cannot outlast the renew deadline (:meth:`Replica.bounded_round`): an API server
that stops answering (a partition drops the packets, nothing refuses them) would otherwise
hold the round, and the leader with it, for as long as the client waits. And whatever the
rounds do, a leader refuses writes once its last renewal is older than the deadline
(:attr:`Replica.leads_now`, checked on every write): by then another replica may hold the
next term.

Only the leader's :attr:`Replica.appends` accepts writes; a follower has none.

The Lease also carries what routes need: the set's name and the holder's client endpoint
(annotations written with every renewal). With ``cluster`` given, each round ends by reading
every set's leader endpoint from the cluster's Leases (:attr:`Replica.directory`), so a
route names the new leader one round after a failover, with or without the operator.
With ``pods`` given (the pods API and a label selector of the set's pods), the leader's pod
carries the label ``popfleet.io/leader=true`` (:mod:`popbroker.replicator.podlabels`), for a
Service that always reaches the leader.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from popbroker.replication.figures import ReplicationFigures
from popbroker.replication.handover import HandOverRefused, choose_successor
from popbroker.replication.insync import InSyncSet
from popbroker.replicator.duty import LeaderDuty
from popbroker.replicator.leases import (
    CLUSTER_LABEL,
    ENDPOINT_ANNOTATION,
    REPLICATION_ANNOTATION,
    SET_ANNOTATION,
    LeaderDirectory,
    LeaseCoordinator,
    Standing,
)
from popbroker.replicator.podlabels import LeaderPodLabel
from popbroker.replicator.wire import Follower, Leader, ReplicationRefused, SyncAppends
from popbroker.store.local import LocalStore

log = logging.getLogger(__name__)


def api_failure(exc: BaseException) -> str:
    """One line for a failure to talk to the API server: its answer (status, reason and the
    Status message, which names the user and verb of a 403) or the transport's error."""
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except (ValueError, AttributeError):
            message = str(exc.body or "")[:200]
        answer = f"API server answered {exc.status} {exc.reason}"
        return f"{answer}: {message}" if message else answer
    return f"API server not reached: {type(exc).__name__}: {exc}"


class Replica:
    """One replica (module docstring)."""

    def __init__(
        self,
        store: LocalStore,
        *,
        name: str,
        api: client.CoordinationV1Api,
        namespace: str,
        lease_name: str,
        peers: Mapping[str, tuple[str, int]],
        token: bytes,
        clock_ms: Callable[[], int],
        lease_ms: int,
        renew_deadline_ms: int,
        retry_ms: int,
        max_lag_ms: int,
        min_in_sync: int,
        ack_timeout_s: float,
        heartbeat_s: float = 0.05,
        broker_set: str | None = None,
        client_endpoint: str | None = None,
        cluster: str | None = None,
        pods: tuple[client.CoreV1Api, str] | None = None,
        synchronous: bool = True,
        listen: tuple[str, int] | None = None,
        round_timeout_s: float | None = None,
    ) -> None:
        """``listen``: where this replica serves followers while it leads, published on
        the Lease for them (no DNS); None: its own ``peers`` address, not published.
        ``round_timeout_s``: the real-time bound of :meth:`bounded_round` (default the renew
        deadline: a round slower than that could not have kept the Lease anyway)."""
        self._round_timeout_s = round_timeout_s or renew_deadline_ms / 1000
        self.store = store
        self.name = name
        self._peers = dict(peers)
        self._listen = listen or self._peers[name]  # where this replica serves when leading
        self._token = token
        self._clock_ms = clock_ms
        self._max_lag_ms = max_lag_ms
        self._min_in_sync = min_in_sync
        self._ack_timeout_s = ack_timeout_s
        self._synchronous = synchronous
        self._heartbeat_s = heartbeat_s
        self.broker_set = broker_set or lease_name
        annotations = {SET_ANNOTATION: self.broker_set}
        if client_endpoint:
            annotations[ENDPOINT_ANNOTATION] = client_endpoint
        if listen is not None:
            annotations[REPLICATION_ANNOTATION] = f"{listen[0]}:{listen[1]}"
        self.coordinator = LeaseCoordinator(
            api, namespace=namespace, name=lease_name, me=name, lease_ms=lease_ms,
            renew_deadline_ms=renew_deadline_ms, retry_ms=retry_ms, clock_ms=clock_ms,
            labels={CLUSTER_LABEL: cluster} if cluster else None, annotations=annotations,
            known_term=store.term,
        )  # fmt: skip
        # the leader label on the leader's pod (None: no label; podlabels)
        self.pod_label = (
            LeaderPodLabel(pods[0], namespace=namespace, set_selector=pods[1], me=name)
            if pods is not None
            else None
        )
        self._labelled = True  # not known at start: a follower takes a stale label off once
        # every set's leader endpoint (None: routes keep the pushed members' endpoints)
        self.directory = (
            LeaderDirectory(api, namespace=namespace, cluster=cluster) if cluster else None
        )
        self.leader: Leader | None = None
        self.appends: SyncAppends | None = None
        self._duty: LeaderDuty | None = None
        self._following: tuple[tuple[str, tuple[str, int]], asyncio.Task[None]] | None = None
        self._insync: InSyncSet | None = None
        self._last_term = 0
        self.term_changes = 0  # terms seen begin since this replica started (metrics)
        self.fenced_writes = 0  # writes refused because it did not lead (metrics)
        self.hand_overs = 0  # planned hand-overs done (metrics)
        self._handing_over = False  # writes stopped for a hand-over under way
        self._round_lock = asyncio.Lock()  # a round never runs between step-down and release

    @property
    def leads_now(self) -> bool:
        """Leading, and renewed within the renew deadline by this replica's clock: only then
        may a write be taken (a leader cut off from the API server stops here, before its
        round notices)."""
        return self.leader is not None and not self._handing_over and self.coordinator.may_serve()

    async def bounded_round(self) -> Standing | None:
        """:meth:`round`, given at most ``round_timeout_s``; None when it failed or timed out
        (logged). Either way a leader whose renewal is past the deadline steps down here, so
        a hung or failing API server cannot keep it leading."""
        try:
            return await asyncio.wait_for(self.round(), self._round_timeout_s)
        except TimeoutError:
            log.warning(
                "replica %s: round timed out after %.1fs (API server unreachable?)",
                self.name, self._round_timeout_s,
            )  # fmt: skip
            return None
        except (ApiException, aiohttp.ClientError, OSError) as exc:  # expected: one line
            log.warning("replica %s: round failed: %s", self.name, api_failure(exc))
            return None
        except Exception:  # anything else is a bug: its traceback is kept
            log.warning("replica %s: round failed", self.name, exc_info=True)
            return None
        finally:
            if self.leader is not None and not self.coordinator.may_serve():
                log.warning(
                    "%s: no renewal within the renew deadline: stops leading term %d",
                    self.name, self.leader.term,
                )  # fmt: skip
                await self._step_down()

    async def round(self) -> Standing:
        async with self._round_lock:
            return await self._round()

    async def _round(self) -> Standing:
        standing = await (self._duty.round() if self._duty else self.coordinator.step())
        if standing.term > self._last_term:
            if self._last_term:
                self.term_changes += 1
            self._last_term = standing.term
        if standing.holder == self.name and standing.serving:
            if self.leader is None:
                await self._lead(standing.term)
        else:
            if self.leader is not None:
                await self._step_down()
            if standing.holder not in (None, self.name):
                self._follow(standing.holder, standing.replication_endpoint)
        await self._label()
        if self.directory is not None:  # after acting: a failed read delays only routes
            await self.directory.refresh()
        return standing

    async def _label(self) -> None:
        if self.pod_label is None:
            return
        try:
            if self.leader is not None:
                await self.pod_label.lead()
                self._labelled = True
            elif self._labelled:
                await self.pod_label.follow()
                self._labelled = False
        except ApiException as exc:  # the label waits for the next round; the data path not
            log.warning("%s: leader label not updated: %s", self.name, exc.reason)

    def figures(self) -> ReplicationFigures:
        """What this replica reports (read by the store role's /metrics on each scrape)."""
        leader, insync = self.leader, self._insync
        if leader is None or insync is None:
            return ReplicationFigures(
                term=self.store.term(), leading=False, term_changes=self.term_changes,
                fenced_writes=self.fenced_writes, hand_overs=self.hand_overs,
            )  # fmt: skip
        end = self.store.commitlog.end
        return ReplicationFigures(
            term=self.store.term(),
            leading=True,
            in_sync=tuple(sorted(insync.recorded)),
            lag_bytes={name: max(0, end - acked) for name, acked in leader.acked.items()},
            lag_ms=insync.lag_ms(),
            term_changes=self.term_changes,
            fenced_writes=self.fenced_writes,
            hand_overs=self.hand_overs,
        )

    async def stop(self, *, release: bool = True) -> None:
        """Stop; a leader stops taking writes, then releases the Lease (a hand-over: with
        ``release`` False the others wait for the lease time, as after a crash)."""
        leading = self.leader is not None and release
        await self._step_down()
        await self._stop_following()
        if leading:
            try:
                if await self.coordinator.release():
                    log.info("%s released the Lease: the next term goes to another", self.name)
            except ApiException as exc:  # the others take over after the lease time
                log.warning("%s: the Lease was not released: %s", self.name, exc.reason)

    async def hand_over(
        self, successor: str | None = None, *, timeout_s: float = 10.0
    ) -> tuple[str, int]:
        """Hand leadership to ``successor`` (None: the in-sync follower furthest along);
        returns it and the term handed over. Writes stop first (every write is refused
        ``NotLeader`` from here); once the successor holds the log to its end, the config
        and the committed offsets, this replica steps down and releases the Lease naming
        it. ``HandOverRefused`` when this replica does not lead, the successor is not an
        in-sync follower, or it did not catch up within ``timeout_s`` (writes resume then:
        nothing changed)."""
        leader, insync = self.leader, self._insync
        if leader is None or insync is None or not self.leads_now:
            raise HandOverRefused(f"{self.name} does not lead its broker set now",
                                  reason="NOT_LEADER")  # fmt: skip
        chosen = choose_successor(
            self.name, in_sync=insync.recorded, acked=leader.acked, wanted=successor
        )
        term = leader.term
        self._handing_over = True
        try:
            await self._until_caught_up(leader, chosen, timeout_s=timeout_s)
            async with self._round_lock:
                if self.leader is not leader:  # stepped down meanwhile (deadline, a round)
                    raise HandOverRefused(f"{self.name} stopped leading term {term} meanwhile",
                                          reason="NOT_LEADER")  # fmt: skip
                await self._step_down()
                try:
                    released = await self.coordinator.release(chosen)
                except (ApiException, aiohttp.ClientError, OSError) as exc:
                    released, why = False, api_failure(exc)
                else:
                    why = "the Lease moved meanwhile"
                if not released:
                    raise HandOverRefused(
                        f"{self.name} could not release the Lease to {chosen}: {why} (it "
                        "leads again at its next round)",
                        reason="HAND_OVER_FAILED", retriable=True,
                    )  # fmt: skip
        finally:
            self._handing_over = False
        self.hand_overs += 1
        log.info("%s handed term %d over to %s", self.name, term, chosen)
        return chosen, term

    async def _until_caught_up(self, leader: Leader, successor: str, *, timeout_s: float) -> None:
        """Until ``successor`` holds this leader's log end, config and offsets as they are
        (asked again at every acknowledgement: a follower acknowledges each frame, and an
        idle leader sends one every heartbeat)."""

        def caught_up() -> bool:
            config, offsets = self.store.state_version()
            return (
                leader.acked.get(successor, -1) >= self.store.commitlog.end
                and leader.config_acked.get(successor, -1) >= config
                and leader.offsets_acked.get(successor, -1) >= offsets
            )

        async def waiting() -> None:
            async with leader.ack_progress:
                await leader.ack_progress.wait_for(caught_up)

        leader.poke()
        try:
            await asyncio.wait_for(waiting(), timeout_s)
        except TimeoutError:
            raise HandOverRefused(
                f"{successor} did not catch up with {self.name} within {timeout_s:g}s (it "
                f"holds {leader.acked.get(successor, -1)} of {self.store.commitlog.end}); "
                "writes resume",
                reason="HAND_OVER_TIMEOUT",
                retriable=True,
            ) from None

    async def _lead(self, term: int) -> None:
        await self._stop_following()
        self.store.record_term(term)
        epochs = self.store.epochs()
        if not epochs or epochs[-1][0] < term:  # a term led again after a pause has its epoch
            self.store.record_epoch(term, self.store.commitlog.end)
        for row in self.store.clamp_offsets():
            log.warning("%s leads with %s moved back to its queue's end", self.name, row)
        leader = Leader(self.store, term=term, token=self._token, heartbeat_s=self._heartbeat_s)
        await leader.start(*self._listen)
        insync = InSyncSet(leader=self.name, max_lag_ms=self._max_lag_ms, clock_ms=self._clock_ms)
        appends = SyncAppends(
            self.store, leader, min_in_sync=self._min_in_sync, timeout_s=self._ack_timeout_s,
            synchronous=self._synchronous,
        )  # fmt: skip
        self._duty = LeaderDuty(
            self.store, leader=leader, coordinator=self.coordinator, insync=insync,
            appends=appends,
        )  # fmt: skip
        self.leader, self.appends, self._insync = leader, appends, insync
        log.info("%s leads term %d", self.name, term)

    async def _step_down(self) -> None:
        if self.leader is not None:
            await self.leader.stop()
            log.info("%s stops leading term %d", self.name, self.leader.term)
        self.leader, self.appends, self._duty, self._insync = None, None, None, None

    def _follow(self, holder: str, published: str | None) -> None:
        """Follow ``holder`` at the address its Lease publishes, else at its ``peers``
        address; a new address (the holder's pod came back elsewhere) is a new connection."""
        address = self._peers.get(holder)
        host, _, port = (published or "").rpartition(":")
        if host and port.isdigit():
            address = (host, int(port))
        if address is None:
            log.warning("%s: the leader %s has no known address", self.name, holder)
            return
        if self._following is not None:
            current, task = self._following
            if current == (holder, address) and not task.done():
                return
            task.cancel()
            if task.done() and not task.cancelled() and (error := task.exception()):
                log.error("%s: following ended: %r", self.name, error, exc_info=error)
        follower = Follower(self.store, name=self.name, token=self._token)
        self._following = (
            (holder, address),
            asyncio.create_task(self._run_follower(follower, *address)),
        )

    async def _run_follower(self, follower: Follower, host: str, port: int) -> None:
        """Follow until the connection ends; the next round connects again. Every network
        error is an ``OSError`` (a leader cut off by policy: ``EHOSTUNREACH`` or a time-out,
        neither a ``ConnectionError``): an unretrieved one would only be logged by asyncio."""
        try:
            await follower.run(host, port)
        except (OSError, ReplicationRefused, asyncio.IncompleteReadError) as exc:
            log.info("%s: following %s:%d ended: %r", self.name, host, port, exc)

    async def _stop_following(self) -> None:
        if self._following is not None:
            _, task = self._following
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._following = None
