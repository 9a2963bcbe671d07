"""python3 -m tools.bench: the benchmark (options: --help)."""

from .driver import main

main()
