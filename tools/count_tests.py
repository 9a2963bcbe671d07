"""Sums test cases over the test.xml files Bazel left for the given targets
and prints `N passed, N failed[, N skipped]`. Exits 1 if any failed or a
target has no result.

    count_tests.py --testlogs "$(bazel info bazel-testlogs)" //tests:test_smoke ...
"""

import argparse
import pathlib
import sys
import xml.etree.ElementTree as ET


def reports(directory: pathlib.Path) -> list[pathlib.Path] | None:
    """The target's test.xml, or one per shard; None when any is missing."""
    shards = sorted(directory.glob("shard_*_of_*/test.xml"))
    if not shards:
        return [directory / "test.xml"] if (directory / "test.xml").is_file() else None
    total = int(shards[0].parent.name.rsplit("_", 1)[1])
    expected = [directory / f"shard_{i}_of_{total}" / "test.xml" for i in range(1, total + 1)]
    return expected if all(xml.is_file() for xml in expected) else None


def main(testlogs: pathlib.Path, targets: list[str]) -> int:
    passed = failed = skipped = 0
    for target in targets:
        package, name = target.lstrip("/").split(":")
        xmls = reports(testlogs / package / name)
        if xmls is None:
            print(f"{target}: no result", file=sys.stderr)
            failed += 1
            continue
        for case in (case for xml in xmls for case in ET.parse(xml).iter("testcase")):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif case.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    line = f"{passed} passed, {failed} failed"
    print(line + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--testlogs", type=pathlib.Path, required=True,
                        help="Bazel's test log directory (bazel info bazel-testlogs)")
    parser.add_argument("targets", nargs="*")
    args = parser.parse_args()
    sys.exit(main(args.testlogs, args.targets))
