"""Entry point of every Python test target: forces N host CPU devices, then
runs pytest on the given file."""

import os
import sys


def main() -> int:
    args = sys.argv[1:]
    devices = 8
    for arg in list(args):
        if arg.startswith("--devices="):
            devices = int(arg.split("=", 1)[1])
            args.remove(arg)
    flags = os.environ.get("XLA_FLAGS", "")
    flags += f" --xla_force_host_platform_device_count={devices}"
    # The tests compile thousands of programs on matrices of a few dozen rows:
    # LLVM's optimisations cost a third of the suite's time and buy nothing.
    if "--xla_backend_optimization_level" not in flags:
        flags += " --xla_backend_optimization_level=0"
    os.environ["XLA_FLAGS"] = flags.strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import pytest

    report = os.environ.get("XML_OUTPUT_FILE")  # set by `bazel test`
    junit = [f"--junitxml={report}"] if report else []
    return pytest.main(["-p", "no:cacheprovider", "-q", *junit, *args])


if __name__ == "__main__":
    sys.exit(main())
