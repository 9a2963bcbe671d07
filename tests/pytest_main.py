"""Entry point of every Python test target: forces N host CPU devices, then
runs pytest on the given file (its share of the tests, when Bazel shards it)."""

import os
import pathlib
import sys


class BazelShard:
    """Keeps every `total`-th collected test from `index` on: the cases of one
    parametrized (and often equally slow) test spread over the shards."""

    def __init__(self, index: int, total: int):
        self.index, self.total = index, total

    def pytest_collection_modifyitems(self, config, items):
        others = [t for i, t in enumerate(items) if i % self.total != self.index]
        config.hook.pytest_deselected(items=others)
        items[:] = items[self.index::self.total]


def bazel_shard() -> list[BazelShard]:
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1"))
    if total <= 1:
        return []
    # Tells Bazel this runner shards; otherwise every shard would run everything.
    status = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status:
        pathlib.Path(status).touch()
    return [BazelShard(int(os.environ["TEST_SHARD_INDEX"]), total)]


def jaxlib_version() -> tuple[int, ...]:
    from importlib import metadata

    return tuple(int(part) for part in metadata.version("jaxlib").split(".")[:2])


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
    # XLA's CPU fusion emitters took half of a sharded mixed solve's compile time
    # (a test of one: 7.9 s of CPU without them, 14.7 s with). jaxlib 0.11 and
    # later have no such flag, and XLA stops at a flag it does not know.
    if "--xla_cpu_use_fusion_emitters" not in flags and jaxlib_version() < (0, 11):
        flags += " --xla_cpu_use_fusion_emitters=false"
    os.environ["XLA_FLAGS"] = flags.strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import pytest

    report = os.environ.get("XML_OUTPUT_FILE")  # set by `bazel test`
    junit = [f"--junitxml={report}"] if report else []
    return pytest.main(["-p", "no:cacheprovider", "-q", *junit, *args], plugins=bazel_shard())


if __name__ == "__main__":
    sys.exit(main())
