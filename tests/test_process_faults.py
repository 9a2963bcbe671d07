"""Faults in jobs of one process per device (CPU), through the scenarios of
tools/stress_channel.py: kill -9 of a follower and of the leader in the
middle of the calls, with ranks started by hand and under the launcher, a
rank that stops calling, hostile local clients of a running job's channel,
a squatter of another user on the leader's name (root only), and a rank
bringing another dtype. Every rank must end within the timeout plus a few
seconds naming the cause, and every result of a healthy job must be right."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

_PATH = pathlib.Path(__file__).parent.parent / "tools" / "stress_channel.py"
_spec = importlib.util.spec_from_file_location("jaxmg_stress_channel", _PATH)
stress = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stress  # dataclasses look their module up
_spec.loader.exec_module(stress)


@pytest.fixture
def settings(tmp_path):
    return stress.Settings(platform="cpu", timeout_s=10.0, workdir=tmp_path)


def check(result):
    print(result.detail)
    assert result.ok, result.detail


def test_a_follower_killed_mid_call_ends_every_rank(settings):
    result = stress.scenario_kill(settings, ranks=3, victim=2, mode="direct")
    check(result)
    assert result.time_to_fail[0] < settings.timeout_s + settings.slack_s


def test_the_leader_killed_mid_call_ends_every_rank(settings):
    check(stress.scenario_kill(settings, ranks=2, victim=0, mode="direct"))


def test_the_launcher_ends_the_job_of_a_killed_rank(settings):
    check(stress.scenario_kill(settings, ranks=2, victim=1, mode="launcher"))


def test_a_rank_that_stops_calling_under_the_launcher(settings):
    # Was: the job ended 316 s after a 10 s jaxmg timeout (JAX's exit barrier).
    result = stress.scenario_never(settings, ranks=2, idle=1, mode="launcher", stop_at=3)
    check(result)
    assert result.time_to_fail[0] < settings.timeout_s + settings.slack_s


def test_a_rank_that_stops_calling_without_the_launcher(settings):
    check(stress.scenario_never(settings, ranks=3, idle=2, mode="direct", stop_at=3))


def test_hostile_clients_change_nothing_for_a_running_job(settings):
    result = stress.scenario_hostile(settings)
    check(result)
    assert result.bad_inputs >= 1500 and result.calls > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to start a process of another user")
def test_a_squatter_of_another_user_fails_the_job_at_once_naming_it(settings):
    result = stress.scenario_squatter(settings)
    check(result)
    assert "skipped" not in result.detail, result.detail


def test_a_rank_with_another_dtype_is_refused_by_every_rank(settings):
    check(stress.scenario_dtype(settings, ranks=2, odd=1))
