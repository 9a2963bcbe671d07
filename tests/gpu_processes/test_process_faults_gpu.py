"""Faults in jobs of one process per GPU on the GPU machine, every rank on
GPU 0 (as `python -m jaxmg.launch --gpus 0,0`): the scenarios of
tools/stress_channel.py that tests/test_process_faults.py runs on CPUs. The
leader drives cuSOLVERMg over the followers' buffers through CUDA IPC; a
killed or stalled rank must end every rank within the timeout plus a few
seconds naming the cause."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("jaxmg_stress_channel",
                                               ROOT / "tools" / "stress_channel.py")
stress = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = stress  # dataclasses look their module up
_spec.loader.exec_module(stress)


@pytest.fixture
def settings(tmp_path):
    # Starting a GPU rank (CUDA, cuSOLVERMg) and its first call take longer.
    return stress.Settings(platform="gpu", gpus=[0], timeout_s=20.0, slack_s=15.0,
                           workdir=tmp_path)


def check(result):
    print(result.detail)
    assert result.ok, result.detail


def test_every_call_right(settings):
    result = stress.scenario_calls(settings, ranks=2)
    check(result)


@pytest.mark.parametrize("ranks, victim, mode", [(2, 1, "direct"), (3, 0, "direct"),
                                                 (2, 1, "launcher")])
def test_a_rank_killed_mid_call_ends_every_rank(settings, ranks, victim, mode):
    check(stress.scenario_kill(settings, ranks=ranks, victim=victim, mode=mode))


@pytest.mark.parametrize("idle, mode", [(1, "launcher"), (1, "direct"), (0, "launcher")])
def test_a_rank_that_stops_calling(settings, idle, mode):
    check(stress.scenario_never(settings, ranks=2, idle=idle, mode=mode, stop_at=3))


def test_hostile_clients_change_nothing_for_a_running_job(settings):
    check(stress.scenario_hostile(settings))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to start a process of another user")
def test_a_squatter_of_another_user_fails_the_job_at_once_naming_it(settings):
    result = stress.scenario_squatter(settings)
    check(result)
    assert "skipped" not in result.detail, result.detail


def test_a_rank_with_another_dtype_is_refused_by_every_rank(settings):
    check(stress.scenario_dtype(settings, ranks=2, odd=1))
