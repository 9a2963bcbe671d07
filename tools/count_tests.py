"""Sums test cases over the test.xml files Bazel left for the given targets
and prints `N passed, N failed[, N skipped]`. Exits 1 if any failed or a
target has no result."""

import pathlib
import sys
import xml.etree.ElementTree as ET


def main(targets: list[str]) -> int:
    passed = failed = skipped = 0
    for target in targets:
        package, name = target.lstrip("/").split(":")
        xml = pathlib.Path("bazel-testlogs", package, name, "test.xml")
        if not xml.is_file():
            print(f"{target}: no result", file=sys.stderr)
            failed += 1
            continue
        for case in ET.parse(xml).iter("testcase"):
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
    sys.exit(main(sys.argv[1:]))
