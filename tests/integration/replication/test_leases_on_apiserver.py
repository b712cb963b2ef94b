"""Leadership of a broker set on a real kube-apiserver's Lease (issue 18):
the first candidate creates it with term 1; others wait while the holder renews; when the
holder goes silent, a candidate takes over with the next term only after it has seen the
record unchanged for the lease time by its own clock; a frozen holder that wakes finds the
new term and stops serving; an ineligible candidate never takes over; candidates racing
for a free Lease get one winner (the API server's compare-and-swap)."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client

from popbroker.replicator.leases import REPLICATION_ANNOTATION, LeaseCoordinator, Standing

LEASE_MS, DEADLINE_MS, RETRY_MS = 3_000, 2_000, 1_000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _candidate(
    api: client.CoordinationV1Api, namespace: str, me: str, *, eligible: bool = True
) -> tuple[LeaseCoordinator, Clock]:
    clock = Clock()
    return (
        LeaseCoordinator(
            api,
            namespace=namespace,
            name="broker-0",
            me=me,
            lease_ms=LEASE_MS,
            renew_deadline_ms=DEADLINE_MS,
            retry_ms=RETRY_MS,
            clock_ms=clock,
            eligible=lambda: eligible,
        ),
        clock,
    )


async def test_a_silent_holder_is_replaced_with_the_next_term(
    api: client.CoordinationV1Api, testbed_namespace: str
) -> None:
    a, a_clock = _candidate(api, testbed_namespace, "a")
    b, b_clock = _candidate(api, testbed_namespace, "b")
    c, c_clock = _candidate(api, testbed_namespace, "c", eligible=False)
    assert await a.step() == Standing("a", 1, serving=True)
    assert await b.step() == Standing("a", 1, serving=False)
    for _ in range(5):  # the holder renews: nobody takes over, however long it lasts
        for clock in (a_clock, b_clock, c_clock):
            clock.ms += RETRY_MS
        assert await a.step() == Standing("a", 1, serving=True)
        assert (await b.step()).holder == "a"
        assert (await c.step()).holder == "a"

    # a freezes (its clock too); b and c see the record unchanged for the lease time
    rounds = 0
    while True:
        b_clock.ms += RETRY_MS
        c_clock.ms += RETRY_MS
        assert (await c.step()).holder == "a"  # ineligible: never takes over
        standing = await b.step()
        rounds += 1
        if standing.holder == "b":
            break
        assert rounds < 10
    assert standing == Standing("b", 2, serving=True)
    assert rounds == LEASE_MS // RETRY_MS  # not one round earlier
    assert a.may_serve()  # frozen: by its own clock it still may; the term fences it

    woke = await a.step()
    assert woke == Standing("b", 2, serving=False)
    assert not a.may_serve()


async def test_racing_candidates_get_one_winner(
    api: client.CoordinationV1Api, testbed_namespace: str
) -> None:
    candidates = [_candidate(api, testbed_namespace, name)[0] for name in "xyz"]
    standings = await asyncio.gather(*(c.step() for c in candidates))
    winners = {s.holder for s in standings if s.serving}
    assert len(winners) == 1
    # a loser names the holder it read before its write was refused: none, or the winner
    assert {s.holder for s in standings} <= {*winners, None}
    again = await asyncio.gather(*(c.step() for c in candidates))
    assert {s.holder for s in again} == winners
    assert {s.term for s in again} == {1}


async def test_only_a_member_of_the_recorded_in_sync_set_takes_over(
    api: client.CoordinationV1Api, testbed_namespace: str
) -> None:
    a, _ = _candidate(api, testbed_namespace, "a")
    b, b_clock = _candidate(api, testbed_namespace, "b")
    c, c_clock = _candidate(api, testbed_namespace, "c")
    assert (await a.step(in_sync=["b"])).serving  # a records {a, b}: c fell behind
    for _ in range(2 * LEASE_MS // RETRY_MS):  # a is silent from here on
        b_clock.ms += RETRY_MS
        c_clock.ms += RETRY_MS
        assert (await c.step()).holder != "c"  # never: it is not in the set
        if (await b.step()).holder == "b":
            break
    standing = await c.step()
    assert standing == Standing("b", 2, serving=False)
    lease_object = await api.read_namespaced_lease("broker-0", testbed_namespace)
    assert lease_object.metadata.annotations["popfleet.io/in-sync"] == "a,b"  # kept as it was


async def test_a_lease_the_operator_owns_keeps_its_owner_and_publishes_the_holders_address(
    api: client.CoordinationV1Api, pods: client.CoreV1Api, testbed_namespace: str
) -> None:
    """The operator applies each set's Lease as a skeleton with an owner reference (so it
    goes with its BrokerCluster); the stores' whole-object writes must keep that reference,
    and a follower reads the holder's replication address from the Lease."""
    owner = await pods.create_namespaced_config_map(
        testbed_namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="stand-in-cluster"))
    )
    reference = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="stand-in-cluster", uid=owner.metadata.uid,
        controller=True, block_owner_deletion=True,
    )  # fmt: skip
    skeleton = client.V1ObjectMeta(name="broker-0", owner_references=[reference])
    await api.create_namespaced_lease(testbed_namespace, client.V1Lease(metadata=skeleton))
    a_clock = Clock()
    a = LeaseCoordinator(
        api, namespace=testbed_namespace, name="broker-0", me="a", lease_ms=LEASE_MS,
        renew_deadline_ms=DEADLINE_MS, retry_ms=RETRY_MS, clock_ms=a_clock,
        annotations={REPLICATION_ANNOTATION: "10.0.0.7:9878"},
    )  # fmt: skip
    b, _ = _candidate(api, testbed_namespace, "b")
    assert await a.step() == Standing("a", 1, serving=True)  # takes the operator's skeleton
    for _ in range(3):
        a_clock.ms += RETRY_MS
        assert (await a.step()).serving
    seen = await b.step()
    assert (seen.holder, seen.replication_endpoint) == ("a", "10.0.0.7:9878")
    stored = await api.read_namespaced_lease("broker-0", testbed_namespace)
    (kept,) = stored.metadata.owner_references
    assert (kept.kind, kept.name, kept.uid, kept.controller) == (
        "ConfigMap", "stand-in-cluster", owner.metadata.uid, True,
    )  # fmt: skip
    assert await a.release()  # a graceful stop's write keeps it too
    released = await api.read_namespaced_lease("broker-0", testbed_namespace)
    assert not released.spec.holder_identity
    assert [r.uid for r in released.metadata.owner_references] == [owner.metadata.uid]


async def test_a_lease_that_lost_its_history_is_not_recreated_by_a_replica_that_had_a_term(
    api: client.CoordinationV1Api, testbed_namespace: str
) -> None:
    """A Lease deleted (its cluster going) or rewound under a replica whose store has been in
    term 2: that replica neither creates it again (a Lease nobody owns, from term 1, its
    in-sync set forgotten) nor takes it, and stops serving; once the Lease records the term
    again it leads on; a new replica (term 0) creates a missing Lease as before."""
    clock = Clock()
    known = {"a": 0}
    a = LeaseCoordinator(
        api, namespace=testbed_namespace, name="broker-0", me="a", lease_ms=LEASE_MS,
        renew_deadline_ms=DEADLINE_MS, retry_ms=RETRY_MS, clock_ms=clock,
        known_term=lambda: known["a"],
    )  # fmt: skip
    assert await a.step() == Standing("a", 1, serving=True)
    known["a"] = 2  # its store has been in term 2 (say, it followed another leader's)
    await api.delete_namespaced_lease("broker-0", testbed_namespace)
    for _ in range(3):
        clock.ms += RETRY_MS
        assert await a.step() == Standing(None, 0, serving=False)
        assert not a.may_serve()
    found = await api.list_namespaced_lease(testbed_namespace)
    assert [item.metadata.name for item in found.items] == []  # not created again

    fresh, _ = _candidate(api, testbed_namespace, "b")  # a new replica: term 0
    assert await fresh.step() == Standing("b", 1, serving=True)
    clock.ms += RETRY_MS
    assert (await a.step()).holder == "b"  # term 1 < 2: a waits, whoever holds it

    restored = {  # the recovery: the term restored, the holder cleared
        "metadata": {"annotations": {"popfleet.io/term": "2"}},
        "spec": {"holderIdentity": None},
    }
    await api.patch_namespaced_lease("broker-0", testbed_namespace, restored)
    clock.ms += RETRY_MS
    assert await a.step() == Standing("a", 3, serving=True)
