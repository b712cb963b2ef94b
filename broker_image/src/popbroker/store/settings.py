"""Store settings: one frozen value, built by the CLI and passed down.

Defaults follow RocketMQ's where a user would expect them (4 MiB bodies, 8 revive
queues, async flush every 500 ms); segment sizes are small enough for a laptop and
can be made tiny in tests so that rolling and retention are exercised.
"""

from __future__ import annotations

from dataclasses import dataclass

from popbroker.store.api import FlushMode

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """Everything that shapes a store's files and timing."""

    cluster: str = "popfleet"
    broker_name: str = "broker-0"
    flush_mode: FlushMode = FlushMode.ASYNC
    flush_interval_ms: int = 500
    segment_bytes: int = 64 * MIB
    cq_entries_per_file: int = 300_000
    max_body_bytes: int = 4 * MIB
    max_properties_bytes: int = 32 * 1024
    revive_queue_num: int = 8
    offsets_persist_interval_ms: int = 1_000
    retention_hours: float = 72.0
    retention_max_bytes: int = 0  # 0 = no size limit
    retention_check_interval_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise ValueError("segment_bytes must be at least 4096")
        if self.max_body_bytes + self.max_properties_bytes + 1024 > self.segment_bytes:
            raise ValueError("segment_bytes must hold at least one maximal record")
        if self.cq_entries_per_file < 1:
            raise ValueError("cq_entries_per_file must be positive")
        if self.flush_interval_ms < 1:
            raise ValueError("flush_interval_ms must be positive")
        if not 1 <= self.revive_queue_num <= 64:
            raise ValueError("revive_queue_num must be in 1..64")
