"""The decision: which pending workloads to burst, where, on what, and why not the others.

`plan()` is pure (planner.py walks its steps: triggers, placement, caps); the on-prem queue
estimate it rests on is onprem.py, and snapshot.py reads and writes the snapshots `burst plan`
takes. The reconcile loop, `burst plan`, `burst explain` and the simulator all call it the same way.
"""

from burst.decide.planner import *  # noqa: F403  (what planner.py exports, listed there once)
from burst.decide.planner import __all__ as __all__
