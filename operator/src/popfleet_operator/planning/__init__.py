"""Pure decisions: what to write to a broker, how many replicas, who owns a name."""
