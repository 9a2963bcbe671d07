"""The benchmark: jaxmg's solvers timed against JAX's own and JAXMg 0.0.8.

Run it as `python3 tools/benchmark.py ...` or `python3 -m tools.bench ...` from the
repository root; docs/benchmarks.md describes the method and holds the results.
The driver (driver.py) never starts JAX itself: it plans the measurements
(plan.py), runs them in worker processes (runner.py, worker.py) and writes the
table, JSON and plot (report.py).
"""

import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]  # the checkout these tools belong to
