"""A leader's round (issue 18; run by the store role with ``--replica-name``): renew the Lease with
the in-sync set it proposes, and let SYNC appends wait on the right members.

Every ``retry_ms`` the leader proposes a set (:class:`~popbroker.replication.insync.InSyncSet`:
laggards out, caught-up followers in) and writes it with its renewal. Only once that write
succeeded is the proposal the recorded set; until then a SYNC append waits for the union of
the recorded and the proposed set. So a shrink is durable on the Lease before any write is
acknowledged by fewer copies, and the next leader, chosen from the recorded set, holds
every acknowledged write.
"""

from __future__ import annotations

from popbroker.replication.insync import InSyncSet
from popbroker.replicator.leases import LeaseCoordinator, Standing
from popbroker.replicator.wire import Leader, SyncAppends
from popbroker.store.local import LocalStore


class LeaderDuty:
    """The leader's Lease round and the members its SYNC appends wait for."""

    def __init__(
        self,
        store: LocalStore,
        *,
        leader: Leader,
        coordinator: LeaseCoordinator,
        insync: InSyncSet,
        appends: SyncAppends,
    ) -> None:
        self._store = store
        self._leader = leader
        self._coordinator = coordinator
        self._insync = insync
        self._appends = appends
        self.pending: frozenset[str] | None = None  # proposed, not yet on the Lease
        leader.on_ack = lambda name, end, leader_end: insync.on_ack(
            name, end, leader_end=leader_end
        )
        appends.counted = self._counted
        self._publish()

    def _followers(self, members: frozenset[str]) -> list[str]:
        return sorted(members - {self._coordinator.me})

    def _counted(self) -> list[str]:
        return self._followers(self._insync.counted(self.pending))

    def _publish(self) -> None:
        self._appends.in_sync = self._followers(self._insync.recorded)

    async def round(self) -> Standing:
        """Propose, renew with the proposal, and adopt it once the Lease recorded it."""
        epochs = self._store.epochs()
        epoch_start = epochs[-1][1] if epochs else 0
        commit = self._leader.commit_offset(self._followers(self._insync.recorded))
        proposal = self._insync.proposal(commit=commit, epoch_start=epoch_start)
        self.pending = None if proposal == self._insync.recorded else proposal
        standing = await self._coordinator.step(in_sync=proposal)
        if standing.holder == self._coordinator.me and standing.serving:
            self._insync.recorded_on_lease(proposal)
        self.pending = None
        self._publish()
        async with self._leader.ack_progress:  # waiting appends count over the new set
            self._leader.ack_progress.notify_all()
        return standing
