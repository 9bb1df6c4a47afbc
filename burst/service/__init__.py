"""The running service: the reconcile loop (loop), leader election and the schedule (leader),
the read-only HTTP API (api) and log lines (logs)."""
