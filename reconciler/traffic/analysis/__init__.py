"""What a sample says: the impact of a rule change, routing health, near misses."""
