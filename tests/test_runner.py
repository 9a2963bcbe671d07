"""The test runner's own parts: the share of a pytest file each Bazel shard runs
(pytest_main.py) and the count of test cases over the shards' reports
(tools/count_tests.py), which `.ci/run`'s last line comes from."""

import types

import pytest

import pytest_main
from tools import count_tests


def report(path, passed=0, failed=0, skipped=0):
    cases = (["<testcase name='p'/>"] * passed
             + ["<testcase name='f'><failure message='x'/></testcase>"] * failed
             + ["<testcase name='s'><skipped message='x'/></testcase>"] * skipped)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>")


def test_counts_sum_over_targets_and_shards(tmp_path, capsys):
    report(tmp_path / "tests" / "plain" / "test.xml", passed=2, skipped=1)
    for i, (p, s) in enumerate([(3, 0), (4, 2), (1, 0)], start=1):
        report(tmp_path / "tests" / "sharded" / f"shard_{i}_of_3" / "test.xml", passed=p, skipped=s)
    assert count_tests.main(tmp_path, ["//tests:plain", "//tests:sharded"]) == 0
    assert capsys.readouterr().out.strip() == "10 passed, 0 failed, 3 skipped"


def test_a_failure_in_any_shard_fails_the_count(tmp_path, capsys):
    report(tmp_path / "tests" / "t" / "shard_1_of_2" / "test.xml", passed=5)
    report(tmp_path / "tests" / "t" / "shard_2_of_2" / "test.xml", passed=1, failed=1)
    assert count_tests.main(tmp_path, ["//tests:t"]) == 1
    assert capsys.readouterr().out.strip() == "6 passed, 1 failed"


@pytest.mark.parametrize("layout", ["no report", "a shard missing"])
def test_a_target_without_every_report_counts_as_failed(tmp_path, capsys, layout):
    if layout == "a shard missing":
        report(tmp_path / "tests" / "t" / "shard_1_of_2" / "test.xml", passed=5)
    assert count_tests.main(tmp_path, ["//tests:t"]) == 1
    out = capsys.readouterr()
    assert "//tests:t: no result" in out.err
    assert out.out.strip().endswith("1 failed")


class Hook:
    def __init__(self):
        self.deselected = []

    def pytest_deselected(self, items):
        self.deselected.extend(items)


@pytest.mark.parametrize("total", [1, 2, 3, 7])
def test_shards_run_every_test_once(total):
    items = list(range(20))
    shares = []
    for index in range(total):
        hook = Hook()
        mine = list(items)
        pytest_main.BazelShard(index, total).pytest_collection_modifyitems(
            types.SimpleNamespace(hook=hook), mine)
        assert sorted(mine + hook.deselected) == items
        shares.append(mine)
    assert sorted(sum(shares, [])) == items
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_a_sharded_run_tells_bazel_it_shards(tmp_path, monkeypatch):
    status = tmp_path / "shard_status"
    monkeypatch.setenv("TEST_SHARD_STATUS_FILE", str(status))
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "1")
    monkeypatch.setenv("TEST_SHARD_INDEX", "0")
    assert pytest_main.bazel_shard() == [] and not status.exists()
    monkeypatch.setenv("TEST_TOTAL_SHARDS", "3")
    monkeypatch.setenv("TEST_SHARD_INDEX", "2")
    (shard,) = pytest_main.bazel_shard()
    assert (shard.index, shard.total) == (2, 3) and status.exists()
