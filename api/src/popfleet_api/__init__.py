"""popfleet admin API."""
