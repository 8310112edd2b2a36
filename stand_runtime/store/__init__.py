"""The logit n-gram store: per context the target's top-k next-token distribution (STAND paper §3.1)."""
