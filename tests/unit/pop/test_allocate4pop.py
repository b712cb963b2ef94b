"""Assignment: PULL averaged exclusive, POP allocate4Pop shared, bounded for absurd values."""

from __future__ import annotations

import time
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import assignment
from popbroker.pop.assignment import ConsumeMode, MessageQueue


def _queues(brokers: int, per_broker: int) -> list[MessageQueue]:
    return [MessageQueue(f"broker-{b}", q) for b in range(brokers) for q in range(per_broker)]


def _clients(count: int) -> list[str]:
    return [f"client-{i:03d}" for i in range(count)]


def test_pull_averages_contiguous_blocks() -> None:
    queues = _queues(1, 5)
    clients = _clients(2)
    assert assignment.allocate_pull(clients[0], queues=queues, client_ids=clients) == tuple(
        queues[:3]
    )
    assert assignment.allocate_pull(clients[1], queues=queues, client_ids=clients) == tuple(
        queues[3:]
    )


def test_pull_extra_clients_get_nothing_and_unknown_clients_nothing() -> None:
    queues = _queues(1, 2)
    clients = _clients(3)
    assert assignment.allocate_pull(clients[2], queues=queues, client_ids=clients) == ()
    assert assignment.allocate_pull("stranger", queues=queues, client_ids=clients) == ()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 16), st.integers(1, 40))
def test_pull_covers_each_queue_exactly_once(
    brokers: int, per_broker: int, client_count: int
) -> None:
    queues = _queues(brokers, per_broker)
    clients = _clients(client_count)
    owners = Counter(
        queue
        for client in clients
        for queue in assignment.assign(
            client, queues=queues, client_ids=clients, mode=ConsumeMode.PULL
        )
    )
    assert set(owners) == set(queues)
    assert set(owners.values()) == {1}


def test_pop_share_zero_or_large_gives_all_queues_on_every_broker() -> None:
    queues = _queues(2, 4)
    clients = _clients(5)
    for share in (0, -1, 4, 5, 10**6):
        got = assignment.allocate_pop(
            clients[1], queues=queues, client_ids=clients, pop_share_queue_num=share
        )
        assert got == (MessageQueue("broker-0", -1), MessageQueue("broker-1", -1))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.integers(3, 30), st.integers(1, 30))
def test_pop_each_queue_shared_by_share_plus_one_clients(
    brokers: int, per_broker: int, client_count: int, share: int
) -> None:
    queues = _queues(brokers, per_broker)
    clients = _clients(client_count)
    got = {
        client: assignment.allocate_pop(
            client, queues=queues, client_ids=clients, pop_share_queue_num=share
        )
        for client in clients
    }
    assert all(got[client] for client in clients)  # every client gets at least one queue
    owners = Counter(queue for assigned in got.values() for queue in assigned)
    if share >= client_count - 1:
        assert all(queue.queue_id == -1 for queue in owners)
    elif client_count <= len(queues):
        assert set(owners) == set(queues)
        assert set(owners.values()) == {min(share + 1, client_count)}
        assert all(len(set(assigned)) == len(assigned) for assigned in got.values())
    else:
        assert set(owners) == set(queues)
        assert all(len(assigned) == 1 for assigned in got.values())


def test_absurd_pop_share_is_bounded_work_upstream_3521() -> None:
    queues = _queues(4, 16)
    clients = _clients(500)
    started = time.perf_counter()
    for share in (10**6, 10**9, 498, 250):
        assignment.allocate_pop(
            clients[7], queues=queues, client_ids=clients, pop_share_queue_num=share
        )
    assert time.perf_counter() - started < 1.0


def test_pop_middle_branch_work_is_linear_not_share_times_queues() -> None:
    queues = _queues(1, 5_000)
    clients = _clients(4_000)
    started = time.perf_counter()
    got = assignment.allocate_pop(
        clients[0], queues=queues, client_ids=clients, pop_share_queue_num=3_000
    )
    assert time.perf_counter() - started < 1.0
    assert len(got) >= 3_001
