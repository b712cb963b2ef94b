"""Store settings for tests: small segments and short intervals, so files roll and
flushes happen within a test's time."""

from __future__ import annotations

from dataclasses import replace

from popbroker.store.settings import StoreSettings


def small_settings(**overrides: object) -> StoreSettings:
    """Small segments and queue files, fast flushes; ``overrides`` by field name."""
    base = StoreSettings(
        segment_bytes=256 * 1024,
        cq_entries_per_file=64,
        max_body_bytes=64 * 1024,
        max_properties_bytes=16 * 1024,
        flush_interval_ms=20,
        offsets_persist_interval_ms=50,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]
