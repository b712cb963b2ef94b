"""Pure status: conditions (kstatus style) and the per-broker status blocks."""
