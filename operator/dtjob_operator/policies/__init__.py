"""Pure policies, one per file (failure, success, backoff, deadline, TTL, clean-up), each a
small function the lifecycle planner calls. No API access, no clock: time comes in as an
argument."""
