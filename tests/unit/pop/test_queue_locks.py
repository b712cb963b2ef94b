"""Queue locks: non-blocking, token-checked, stale locks taken over after 60 s."""

from __future__ import annotations

from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.queuelocks import QueueLocks

KEY = QueueKey("orders", "billing", 0)


def test_contended_lock_is_refused_without_waiting() -> None:
    locks = QueueLocks()
    token = locks.try_lock(KEY, 0)
    assert token is not None
    assert locks.try_lock(KEY, 10) is None
    assert locks.try_lock(QueueKey("orders", "billing", 1), 10) is not None
    assert locks.unlock(KEY, token)
    assert locks.try_lock(KEY, 20) is not None


def test_keys_are_tuples_so_at_signs_cannot_collide() -> None:
    locks = QueueLocks()
    assert locks.try_lock(QueueKey("a@b", "c", 0), 0) is not None
    assert locks.try_lock(QueueKey("a", "b@c", 0), 0) is not None


def test_leaked_lock_is_taken_over_and_the_old_token_cannot_unlock() -> None:
    locks = QueueLocks(stale_after_ms=60_000)
    leaked = locks.try_lock(KEY, 0)
    assert leaked is not None
    assert locks.try_lock(KEY, 59_999) is None
    fresh = locks.try_lock(KEY, 60_000)
    assert fresh is not None
    assert locks.takeovers == 1
    assert not locks.unlock(KEY, leaked)  # the late holder cannot release the new lock
    assert locks.try_lock(KEY, 60_001) is None  # the new holder's lock holds
    assert locks.unlock(KEY, fresh)
    assert locks.try_lock(KEY, 60_001) is not None


def test_a_stale_entry_is_replaced_not_added_to() -> None:
    locks = QueueLocks(stale_after_ms=100)
    locks.try_lock(KEY, 0)
    locks.try_lock(QueueKey("t", "g", 1), 50)
    assert locks.try_lock(KEY, 120) is not None  # taken over in place
    assert len(locks) == 2


def test_unlocked_entries_are_forgotten() -> None:
    locks = QueueLocks()
    for queue_id in range(100):
        key = QueueKey("t", "g", queue_id)
        token = locks.try_lock(key, 0)
        assert token is not None
        locks.unlock(key, token)
    assert len(locks) == 0
