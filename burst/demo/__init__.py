"""`burst demo`: the whole flow on an embedded world (sandbox clusters, simulated clouds, a SQLite
ledger), with the jobs of scenario.py, summarised at the end (run.py)."""

from burst.demo.run import Demo, board, run, summarise, to_json

__all__ = ["Demo", "board", "run", "summarise", "to_json"]
