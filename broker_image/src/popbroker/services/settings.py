"""Settings of the popack and revive roles, and the injected clock.

Every service takes ``clock: Clock`` (milliseconds since the epoch) so tests
drive time explicitly; production passes :func:`wall_clock_ms`. Defaults follow
RocketMQ's proxy where a client would notice (4 MiB bodies, 20 s long polling,
receive batches of 32, 17 delivery attempts) and the design card where it is
ours (revive lateness ≤ 1 s, bounded parked requests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from popbroker.pop.checkpointbuffer import BufferSettings
from popbroker.pop.reviving import ReviveSettings

Clock = Callable[[], int]

MIB = 1024 * 1024


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, from the system clock."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class PopackSettings:
    """Everything that shapes the popack role's behaviour."""

    cluster: str = "popfleet"
    broker_name: str = "broker-0"
    revive_queue_num: int = 8
    max_body_bytes: int = 4 * MIB
    max_user_properties_bytes: int = 16 * 1024
    max_user_properties: int = 128
    max_delay_ms: int = 40 * 24 * 3600 * 1000  # RocketMQ's timerMaxDelaySec is 3 days; we allow 40
    default_invisible_ms: int = 60_000
    max_long_polling_ms: int = 20_000
    long_polling_margin_ms: int = 800  # answer this long before the client's deadline
    max_parked_requests: int = 10_000
    pop_inflight_threshold: int = 10_000  # un-acked messages per queue before pops skip it; 0: off
    receive_batch_size: int = 32
    send_dedup_window_ms: int = 10 * 60 * 1000
    send_dedup_max_entries: int = 200_000
    flush_interval_ms: int = 50
    config_ttl_ms: int = 1_000
    client_expiry_ms: int = 120_000
    buffer: BufferSettings = field(default_factory=BufferSettings)


@dataclass(frozen=True, slots=True)
class ReviveRoleSettings:
    """Knobs of the revive role."""

    cluster: str = "popfleet"
    broker_name: str = "broker-0"
    scan_batch: int = 256
    idle_tick_ms: int = 100  # how often an idle revive queue re-checks its deadlines
    max_tasks_per_round: int = 256
    ledger: ReviveSettings = field(default_factory=ReviveSettings)
