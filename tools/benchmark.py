"""The benchmark's entry point, `python3 tools/benchmark.py --help`: the same as
`python3 -m tools.bench` (the package tools/bench/ holds it)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tools.bench.driver import main  # noqa: E402

if __name__ == "__main__":
    main()
