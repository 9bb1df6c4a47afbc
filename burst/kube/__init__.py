"""Kubernetes, both sides of the burst: watch the on-prem cluster into a snapshot (watch), turn a
workload into its safe remote copy (translate, pure), carry it out (replicate), mirror the copy's
status back (sync), say so on the user's job (events), and the GPU Node shape (nodes)."""
