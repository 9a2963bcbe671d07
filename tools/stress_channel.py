"""Stress and fault injection for jaxmg's job channel (one process per device).

Usage, from the repository root after `bazel build //xla_ext:libjaxmg_ffi.so`:

    PYTHONPATH=. .venv/bin/python tools/stress_channel.py --quick
    PYTHONPATH=. .venv/bin/python tools/stress_channel.py --minutes 10
    # On the GPU machine, ranks sharing GPU 0 (as `python -m jaxmg.launch --gpus 0,0`):
    JAXMG_LIBRARY=$PWD/.device/libjaxmg_ffi.so PYTHONPATH=. python3 tools/stress_channel.py \\
        --platform gpu --gpus 0,0 --minutes 5

Scenarios, each a job of 2 or 3 ranks solving a system with jaxmg.potrs and
checking every result against NumPy:
    calls     a healthy job: every call right
    hostile   a healthy job while this process plays a hostile local client of
              rank 0's channel (found in /proc/net/unix, as anyone can): a header
              announcing 2^40 bytes, noise, a hello then garbage, a trickled
              hello, floods of 500 half-open connections. Every call stays
              right; rank 0's threads, fds and memory stay bounded
    squatter  (root only) a process of another user (nobody) binds rank 0's
              channel name before rank 0: every rank fails at once naming it,
              and it receives nothing
    kill      kill -9 of a rank in the middle of the calls (ranks started by
              hand, and under the launcher): every rank ends within the
              timeout plus a few seconds, the survivors naming the cause
    never     a rank stops calling: the others fail at the timeout naming it,
              and the job ends within the timeout plus a few seconds
    dtype     a rank brings complex64 where the others bring float64 (the same
              bytes): every rank fails naming it and both signatures

Prints a line per scenario and a summary (calls held, faults survived, time to
fail, bad inputs tried); exits 1 if any scenario failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(os.path.abspath(__file__)).parents[1]  # runfiles keep their own tree
SCENARIOS = ("calls", "hostile", "squatter", "kill", "never", "dtype")

# The job every scenario runs. FAULT_JOB (JSON) says what each rank does; the
# results are checked on each rank's own shard (no XLA collectives: ranks
# sharing one GPU cannot run them).
JOB = r"""
import json, os, sys, time
import numpy as np
import jax
import jaxmg, jaxmg.launch
from jax.sharding import NamedSharding, PartitionSpec as P
assert jaxmg.launch.initialize()
jax.config.update("jax_enable_x64", True)
cfg = json.loads(os.environ["FAULT_JOB"])
rank, ranks = jax.process_index(), jax.process_count()
mine = {k: v for k, v in cfg.get("ranks", {}).get(str(rank), {}).items()}
mesh = jax.make_mesh((ranks,), ("x",))
n = cfg["n"]
dtype = np.dtype(mine.get("dtype", "float64"))
m = np.random.default_rng(0).standard_normal((n, n))
A = m @ m.T / n + np.eye(n)
B = np.random.default_rng(1).standard_normal((n, 2))
X = np.linalg.solve(A, B)
tol = 1e4 * np.finfo(dtype).eps

def put(x, spec):
    return jax.make_array_from_callback(x.shape, NamedSharding(mesh, spec), lambda i: x[i])

a, b = put(A.astype(dtype), P("x", None)), put(B.astype(dtype), P())
print(f"ready pid {os.getpid()}", flush=True)
time.sleep(mine.get("delay", 0))
try:
    for i in range(cfg["calls"]):
        if mine.get("stop_at") == i:
            print(f"stopping before call {i}", flush=True)
            time.sleep(3600)
        x = jaxmg.potrs(a, b, backend="jaxmg")
        shard = x.addressable_shards[0]
        err = np.abs(np.asarray(shard.data) - X[shard.index]).max()
        if not err < tol:
            print(f"WRONG call {i} error {err:.3g}", flush=True)
            sys.exit(3)
        print(f"call {i} ok at {time.time():.6f}", flush=True)
        time.sleep(cfg.get("pause", 0))
except Exception as e:
    print(f"error at {time.time():.6f}: {str(e).splitlines()[0][:600]}", flush=True)
    raise
print("done", flush=True)
"""

JAX_GONE = "Terminating process because the JAX distributed service detected fatal errors"


@dataclass
class Result:
    scenario: str
    ok: bool
    detail: str
    seconds: float
    calls: int = 0             # calls checked against NumPy
    faults: int = 0            # faults injected and survived
    time_to_fail: list[float] = field(default_factory=list)
    bad_inputs: int = 0        # hostile connections and frames sent


class Job:
    """A job of `ranks` ranks, started under `python -m jaxmg.launch`
    ("launcher") or by hand ("direct", with the environment the launcher
    would give them). Collects each rank's lines with their arrival times."""

    def __init__(self, cfg: dict, ranks: int, *, platform: str, gpus: list[int] | None,
                 mode: str, timeout_s: float, workdir: Path):
        self.ranks, self.mode = ranks, mode
        script = workdir / f"job_{os.getpid()}_{time.monotonic_ns()}.py"
        script.write_text(textwrap.dedent(JOB))
        env = {k: v for k, v in os.environ.items() if not k.startswith("JAXMG_") or
               k in ("JAXMG_LIBRARY",)}
        env.update(FAULT_JOB=json.dumps(cfg), JAXMG_TIMEOUT_S=f"{timeout_s:g}",
                   PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
        if platform == "cpu":
            env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1")
        self.lines: list[list[tuple[float, str]]] = [[] for _ in range(ranks)]
        self.other: list[tuple[float, str]] = []  # the launcher's own lines
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.readers: list[threading.Thread] = []
        self.ended: dict[int, float] = {}
        gpus = gpus[:ranks] if gpus else None
        if mode == "launcher":
            command = [sys.executable, "-m", "jaxmg.launch", "-n", str(ranks)]
            if gpus:
                command += ["--gpus", ",".join(map(str, gpus))]
            self.procs.append(self._spawn(command + [str(script)], env, None))
        else:
            port = _free_port()
            for rank in range(ranks):
                rank_env = dict(env, JAXMG_COORDINATOR=f"127.0.0.1:{port}",
                                JAXMG_NUM_PROCESSES=str(ranks), JAXMG_PROCESS_ID=str(rank))
                if gpus:
                    rank_env["JAXMG_LOCAL_DEVICE_IDS"] = str(gpus[rank])
                    rank_env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION",
                                        f"{0.9 / gpus.count(gpus[rank]):.3f}")
                self.procs.append(self._spawn([sys.executable, str(script)], rank_env, rank))

    def _spawn(self, command, env, rank):
        p = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)
        reader = threading.Thread(target=self._read, args=(p, rank), daemon=True)
        reader.start()
        self.readers.append(reader)
        return p

    def _read(self, p, rank):
        for line in iter(p.stdout.readline, ""):
            now = time.monotonic()
            line = line.rstrip("\n")
            r = rank
            if r is None:
                match = re.match(r"\[rank (\d+)\] (.*)", line)
                r, line = (int(match.group(1)), match.group(2)) if match else (None, line)
            with self.lock:
                (self.lines[r] if r is not None else self.other).append((now, line))
        with self.lock:
            self.ended[rank if rank is not None else -1] = time.monotonic()

    def text(self, rank: int) -> str:
        with self.lock:
            return "\n".join(line for _, line in self.lines[rank])

    def first(self, rank: int, pattern: str) -> float | None:
        with self.lock:
            for t, line in self.lines[rank]:
                if re.search(pattern, line):
                    return t
        return None

    def count(self, pattern: str) -> int:
        with self.lock:
            return sum(bool(re.search(pattern, line)) for lines in self.lines for _, line in lines)

    def wait_for(self, condition, timeout: float) -> bool:
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if condition():
                return True
            if all(p.poll() is not None for p in self.procs):
                return condition()
            time.sleep(0.01)
        return False

    def pid(self, rank: int) -> int | None:
        with self.lock:
            for _, line in self.lines[rank]:
                if line.startswith("ready pid "):
                    return int(line.split()[2])
        return None

    def wait(self, timeout: float) -> bool:
        """Waits for every process; kills what is left after `timeout`."""
        until = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        finished = all(p.poll() is not None for p in self.procs)
        self.kill_all()
        return finished

    def end_time(self, rank: int) -> float | None:
        """When rank's output closed (it ended), by the monotonic clock."""
        with self.lock:
            return self.ended.get(rank if self.mode == "direct" else -1)

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.mode == "launcher":
            for rank in range(self.ranks):  # in case the launcher left any behind
                pid = self.pid(rank)
                if pid and _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        for reader in self.readers:  # every line read
            reader.join(timeout=10.0)

    def codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # gone while read: ESRCH
        return False
    return state not in ("Z", "X")


def channel_names(pid: int | None) -> set[str]:
    """The names of jaxmg channel sockets that process `pid` holds, as any
    local user sees them (/proc/net/unix, matched to its fds by inode), so
    that another job running on the machine meanwhile is never taken for
    this one. None (a rank not started yet): none."""
    if pid is None:
        return set()
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    except OSError:
        return set()
    names = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[7].startswith("@jaxmg-") and parts[6] in inodes:
            names.add(parts[7][1:])
    return names


def _proc_status(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return -1


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---- hostile local clients --------------------------------------------------

MAGIC, VERSION = 0x6A786D67, 2


def _connect(name: str, blocking: bool = True) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(blocking)
    try:
        s.connect("\0" + name)
    except OSError:
        s.close()
        return None
    if blocking:
        s.settimeout(5.0)
    return s


def _closed_after(s: socket.socket, within: float) -> tuple[bool, int]:
    """(whether the peer closed the connection within `within` s, bytes it sent)."""
    got, until = 0, time.monotonic() + within
    s.settimeout(0.05)
    while time.monotonic() < until:
        try:
            data = s.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return True, got
        if not data:
            return True, got
        got += len(data)
    return False, got


def attack(name: str, flood_rounds: int) -> tuple[int, list[str]]:
    """Hostile clients against the channel `name`; returns the bad inputs
    sent and what went against expectations."""
    sent, wrong = 0, []

    def expect_closed(what, s, max_bytes=0, within=3.5):
        nonlocal sent
        sent += 1
        closed, got = _closed_after(s, within)
        s.close()
        if not closed or got > max_bytes:
            wrong.append(f"{what}: {'closed' if closed else 'left open'} after {got} bytes")

    header = struct.pack("<IIqqiiQ", MAGIC, 1, 0, 0, 1, 1, 1 << 40)
    hello = struct.pack("<IIii", MAGIC, VERSION, 1, 0) + os.urandom(32)
    for what, payload, max_bytes in (
        ("a header announcing 2^40 bytes", header, 0),
        ("4 KiB of noise", os.urandom(4096), 0),
        ("a hello and 1 MiB of garbage", hello + b"x" * (1 << 20), 80),
        ("a hello of version 1", hello[:4] + struct.pack("<I", 1) + hello[8:], 0),
        ("a hello to rank 7", hello[:12] + struct.pack("<i", 7) + hello[16:], 0),
    ):
        s = _connect(name)
        if s is None:
            wrong.append(f"{what}: could not connect")
            continue
        try:
            s.sendall(payload)
        except OSError:
            pass  # closed before all of it went: as it should
        expect_closed(what, s, max_bytes)
    s = _connect(name)
    if s is not None:
        start = time.monotonic()
        for byte in hello:
            try:
                s.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        if time.monotonic() - start > 3.0:
            wrong.append("a trickled hello was not cut at the 2 s deadline")
        expect_closed("a trickled hello", s, 0, within=1.0)
    for _ in range(flood_rounds):
        # 500 half-open connections at once (a full backlog refuses some for
        # a moment: those are tried again).
        held, until = [], time.monotonic() + 5.0
        while len(held) < 500 and time.monotonic() < until:
            c = _connect(name, blocking=False)
            if c is None:
                time.sleep(0.001)
            else:
                held.append(c)
        sent += len(held)
        if len(held) < 500:
            wrong.append(f"only {len(held)} of 500 flood connections got through in 5 s")
        time.sleep(0.3)
        for c in held:
            c.close()
    return sent, wrong


class Squatter:
    """A child of another user (nobody) that binds `name` and counts what it
    is sent."""

    def __init__(self, name: str):
        self.read, write = os.pipe()
        self.stop_read, self.stop_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.read)
            os.close(self.stop_write)
            self._run(name, write)
        os.close(write)
        os.close(self.stop_read)
        self.ready = os.read(self.read, 64).decode()

    def _run(self, name, write):
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind("\0" + name)
            listener.listen(16)
        except OSError as e:
            os.write(write, f"refused {e}".encode())
            os._exit(0)
        os.write(write, b"bound")
        listener.settimeout(0.05)
        connections = received = 0
        import select
        while not select.select([self.stop_read], [], [], 0)[0]:
            try:
                c, _ = listener.accept()
            except socket.timeout:
                continue
            connections += 1
            closed, got = _closed_after(c, 3.0)
            received += got
            c.close()
        os.write(write, f"{connections} {received}".encode())
        os._exit(0)

    def finish(self) -> tuple[int, int]:
        os.write(self.stop_write, b"x")
        counts = os.read(self.read, 64).decode().split()
        os.waitpid(self.pid, 0)
        return int(counts[0]), int(counts[1])


# ---- scenarios --------------------------------------------------------------

@dataclass
class Settings:
    platform: str = "cpu"
    gpus: list[int] | None = None
    timeout_s: float = 10.0     # JAXMG_TIMEOUT_S of the jobs
    slack_s: float = 8.0        # what "a few seconds" past it may take
    start_s: float = 240.0      # what starting a job (JAX's import and set-up) may take
    workdir: Path = Path(tempfile.gettempdir())

    def n(self, ranks: int) -> int:
        # A multiple of the ranks, a share of at most one tile each: padding
        # would move rows between ranks, an XLA collective that ranks sharing
        # a GPU cannot run.
        return 256 * ranks if self.platform == "gpu" else 48


def _job(s: Settings, ranks: int, mode: str, calls: int, per_rank=None, **extra) -> Job:
    cfg = {"n": s.n(ranks), "calls": calls, "ranks": per_rank or {}, **extra}
    return Job(cfg, ranks, platform=s.platform, gpus=s.gpus and s.gpus * ranks, mode=mode,
               timeout_s=s.timeout_s, workdir=s.workdir)


def _started(job: Job, s: Settings) -> bool:
    return job.wait_for(lambda: all(job.pid(r) for r in range(job.ranks)), s.start_s)


def scenario_calls(s: Settings, ranks: int = 2) -> Result:
    job = _job(s, ranks, "launcher", calls=40)
    finished = job.wait(s.start_s + 120)
    calls = job.count(r"^call \d+ ok")
    ok = finished and job.codes() == [0] and calls == 40 * ranks
    return Result("calls", ok, f"{ranks} ranks, {calls} calls right, status {job.codes()}",
                  0.0, calls=calls)


def scenario_hostile(s: Settings) -> Result:
    job = _job(s, 2, "launcher", calls=100000, pause=0.01)
    if not _started(job, s) or not job.wait_for(lambda: job.count(r"^call 2 ok") == 2, 120):
        job.kill_all()
        return Result("hostile", False, "the job did not start: " + job.text(0)[-600:], 0.0)
    names = sorted(n for n in channel_names(job.pid(0)) if n.endswith("-0"))
    if not names:
        job.kill_all()
        return Result("hostile", False, "rank 0's channel is not in /proc/net/unix", 0.0)
    leader = job.pid(0)
    base = (_proc_status(leader, "Threads"), _fds(leader), _proc_status(leader, "VmRSS"))
    peak = list(base)
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                now = (_proc_status(leader, "Threads"), _fds(leader), _proc_status(leader, "VmRSS"))
            except (FileNotFoundError, ProcessLookupError):
                return
            for i in range(3):
                peak[i] = max(peak[i], now[i])
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    calls_before = job.count(r"^call \d+ ok")
    sent, wrong = attack(names[0], flood_rounds=3)
    time.sleep(0.5)
    calls_during = job.count(r"^call \d+ ok") - calls_before
    stop.set()
    sampler.join()
    job.kill_all()
    wrong_results = job.count(r"^WRONG|^error")
    problems = list(wrong)
    if wrong_results:
        problems.append(f"{wrong_results} wrong or failed calls")
    if calls_during < 2:
        problems.append(f"only {calls_during} calls during the attack")
    # Thread pools of XLA may start a thread or two meanwhile; the channel
    # itself adds none for an unauthenticated peer.
    if peak[0] - base[0] > 4 or peak[1] - base[1] > 16 + 4 or peak[2] - base[2] > 64 * 1024:
        problems.append(f"rank 0 grew: threads {base[0]}->{peak[0]}, fds {base[1]}->{peak[1]}, "
                        f"rss {base[2]}->{peak[2]} kB")
    detail = (f"{sent} hostile inputs; {calls_during} right calls meanwhile; rank 0 threads "
              f"{base[0]}->{peak[0]}, fds {base[1]}->{peak[1]}, rss {base[2] // 1024}->"
              f"{peak[2] // 1024} MB")
    return Result("hostile", not problems, "; ".join(problems) or detail, 0.0,
                  calls=job.count(r"^call \d+ ok"), bad_inputs=sent)


def scenario_squatter(s: Settings) -> Result:
    if os.geteuid() != 0:
        return Result("squatter", True, "skipped: needs root, to start a process of another "
                      "user (nobody)", 0.0)
    delay = 6.0
    job = _job(s, 2, "direct", calls=3, per_rank={"0": {"delay": delay}})
    # Rank 1 opens its channel first; rank 0's name follows from it.
    if not job.wait_for(lambda: any(n.endswith("-1") for n in channel_names(job.pid(1))),
                        s.start_s + delay):
        job.kill_all()
        return Result("squatter", False, "rank 1's channel never appeared", 0.0)
    one = next(n for n in channel_names(job.pid(1)) if n.endswith("-1"))
    squatter = Squatter(one[:-1] + "0")
    if squatter.ready.startswith("refused"):
        job.kill_all()
        squatter.finish()
        return Result("squatter", True, f"skipped: {squatter.ready}", 0.0)
    squatted = time.monotonic()
    finished = job.wait(delay + s.timeout_s + s.slack_s + 30)
    connections, received = squatter.finish()
    ended = max(job.end_time(r) or float("inf") for r in range(2)) - squatted
    problems = []
    if f"is held by process {squatter.pid} of user nobody" not in job.text(0):
        problems.append(f"rank 0 did not name the squatter: {job.text(0)[-400:]}")
    # Rank 1 names it too, unless JAX ended it first (its coordinator, rank 0, left).
    if f"it is process {squatter.pid} of user nobody" not in job.text(1) and \
            JAX_GONE not in job.text(1):
        problems.append(f"rank 1 did not name the squatter: {job.text(1)[-400:]}")
    if "same rank" in job.text(0):
        problems.append("rank 0 blamed a rank of its own job")
    if received:
        problems.append(f"the squatter received {received} bytes")
    if not finished or ended > delay + s.slack_s:
        problems.append(f"the job took {ended:.1f} s after the squat (rank 0 waits {delay:g} s)")
    return Result("squatter", not problems, "; ".join(problems) or
                  f"both ranks named process {squatter.pid} (nobody) and ended {ended:.1f} s "
                  f"after the squat ({delay:g} s of it rank 0's own delay); it saw "
                  f"{connections} connections, {received} bytes", 0.0, faults=1,
                  time_to_fail=[ended - delay], bad_inputs=1)


def scenario_kill(s: Settings, ranks: int = 2, victim: int = 1, mode: str = "direct",
                  delay: float = 0.1) -> Result:
    job = _job(s, ranks, mode, calls=100000)
    name = f"kill rank {victim} of {ranks} ({mode})"
    if not _started(job, s) or not job.wait_for(lambda: job.count(r"^call 3 ok") == ranks, 120):
        job.kill_all()
        return Result("kill", False, f"{name}: the job did not start: {job.text(0)[-600:]}", 0.0)
    time.sleep(delay)
    os.kill(job.pid(victim), signal.SIGKILL)
    killed = time.monotonic()
    finished = job.wait(s.timeout_s + s.slack_s + 20)
    problems = []
    if mode == "launcher":
        ended = (job.end_time(0) or float("inf")) - killed
        launcher = "\n".join(line for _, line in job.other)
        if f"rank {victim} was killed by SIGKILL" not in launcher:
            problems.append(f"the launcher did not name rank {victim}: {launcher[-300:]}")
        if job.codes() != [128 + signal.SIGKILL]:
            problems.append(f"the launcher's status is {job.codes()}")
    else:
        ended = max((job.end_time(r) or float("inf")) for r in range(ranks) if r != victim) - killed
        for r in range(ranks):
            if r == victim:
                continue
            text = job.text(r)
            # The victim anywhere in the list: a slow rank may be missing beside it.
            named = bool(re.search(rf"participants? \[?(?:[^\]]*, )?{victim} \(process {victim}", text)
                         and "killed" in text) or \
                (victim == 0 and "process 0 (the leader of call" in text) or \
                (r != 0 and JAX_GONE in text)
            if not named:
                problems.append(f"rank {r} did not name the cause: {text[-500:]}")
    if not finished or ended > s.timeout_s + s.slack_s:
        problems.append(f"the job ended {ended:.1f} s after the kill")
    wrong = job.count(r"^WRONG")
    if wrong:
        problems.append(f"{wrong} wrong results")
    return Result("kill", not problems, f"{name}: " + ("; ".join(problems) or
                  f"every rank ended {ended:.2f} s after the kill"), 0.0,
                  calls=job.count(r"^call \d+ ok"), faults=1, time_to_fail=[ended])


def scenario_never(s: Settings, ranks: int = 2, idle: int = 1, mode: str = "launcher",
                   stop_at: int = 3) -> Result:
    job = _job(s, ranks, mode, calls=8, per_rank={str(idle): {"stop_at": stop_at}})
    name = f"rank {idle} of {ranks} stops before call {stop_at} ({mode})"
    if not job.wait_for(lambda: job.first(idle, "^stopping") is not None, s.start_s + 60):
        job.kill_all()
        return Result("never", False, f"{name}: the job did not start: {job.text(0)[-600:]}", 0.0)
    stopped = job.first(idle, "^stopping")
    finished = job.wait(s.timeout_s + s.slack_s + 30)
    if mode == "launcher":
        ended = (job.end_time(0) or float("inf")) - stopped
    else:
        ended = max((job.end_time(r) or float("inf")) for r in range(ranks)) - stopped
    problems = []
    others = [r for r in range(ranks) if r != idle]
    said = "\n".join(job.text(r) for r in others)
    if idle != 0 and f"participants [{idle} (process {idle})] of {ranks} did not reach" not in said \
            and f"process {idle} did not join jaxmg's job channel" not in said:
        problems.append(f"no rank named participant {idle}: {said[-500:]}")
    if idle == 0 and not re.search(r"\[0 \(process 0, the leader\)\]|its leader, process 0, does "
                                   r"not answer|could not reach process 0|process 0 did not join",
                                   said):
        problems.append(f"no rank named the leader: {said[-500:]}")
    # The others wait the timeout for it (a few seconds more while it traces).
    if not finished or ended > s.timeout_s + s.slack_s:
        problems.append(f"the job ended {ended:.1f} s after the rank stopped")
    return Result("never", not problems, f"{name}: " + ("; ".join(problems) or
                  f"the job ended {ended:.2f} s after it stopped (timeout {s.timeout_s:g} s)"),
                  0.0, calls=job.count(r"^call \d+ ok"), faults=1, time_to_fail=[ended])


def scenario_dtype(s: Settings, ranks: int = 2, odd: int = 1) -> Result:
    job = _job(s, ranks, "direct", calls=2, per_rank={str(odd): {"dtype": "complex64"}})
    name = f"rank {odd} of {ranks} brings complex64"
    if not _started(job, s):
        job.kill_all()
        return Result("dtype", False, f"{name}: the job did not start", 0.0)
    started = max(job.first(r, "^ready") for r in range(ranks))
    finished = job.wait(s.timeout_s + s.slack_s + 60)
    ended = max((job.end_time(r) or float("inf")) for r in range(ranks)) - started
    problems = []
    if job.count(r"^call \d+ ok|^WRONG"):
        problems.append(f"not refused: {job.count('^call')} calls ran with mismatched dtypes "
                        f"({job.count('^WRONG')} wrong); do the FFI handlers pass a signature to "
                        "processes::Meet?")
    if not finished:  # a refusal that leaves a rank waiting is a hang
        problems.append(f"the job had not ended {s.timeout_s + s.slack_s + 60:.0f} s after the start")
    for r in range(ranks):
        text = job.text(r)
        if f"participant {odd} (process {odd}) brought another call" not in text:
            problems.append(f"rank {r} was not told: {text[-300:]}")
        elif "complex64" not in text:
            problems.append(f"rank {r} was not told which dtype differs: {text[-300:]}")
    return Result("dtype", not problems, f"{name}: " + ("; ".join(problems[:2]) or
                  f"every rank refused it; ended {ended:.1f} s after the start"), 0.0,
                  faults=1, time_to_fail=[ended] if not problems else [])


def _random_kill(s: Settings, rng: random.Random) -> Result:
    ranks = rng.choice([2, 3])
    return scenario_kill(s, ranks, rng.randrange(ranks), rng.choice(["direct", "launcher"]),
                         rng.uniform(0.0, 0.3))


def _random_never(s: Settings, rng: random.Random) -> Result:
    ranks = rng.choice([2, 3])
    idle = rng.randrange(ranks)
    # Outside the launcher a process 0 that never calls lives on until JAX's
    # heartbeat timeout (see jaxmg/_src/processes.py); the launcher ends it.
    mode = "launcher" if idle == 0 else rng.choice(["direct", "launcher"])
    return scenario_never(s, ranks, idle, mode, rng.choice([0, 3]))


RUNNERS = {
    "calls": lambda s, rng: scenario_calls(s, rng.choice([2, 3])),
    "hostile": lambda s, rng: scenario_hostile(s),
    "squatter": lambda s, rng: scenario_squatter(s),
    "kill": _random_kill,
    "never": _random_never,
    "dtype": lambda s, rng: scenario_dtype(s, 2, rng.randrange(2)),
}


def timed(scenario, *args, **kwargs) -> Result:
    start = time.monotonic()
    result = scenario(*args, **kwargs)
    result.seconds = time.monotonic() - start
    return result


def summary(results: list[Result]) -> str:
    times = sorted(t for r in results for t in r.time_to_fail)
    failed = [r for r in results if not r.ok]
    lines = [
        f"scenarios run: {len(results)}, failed: {len(failed)}",
        f"calls held (checked against NumPy): {sum(r.calls for r in results)}",
        f"faults survived: {sum(r.faults for r in results if r.ok)} of "
        f"{sum(r.faults for r in results)}",
        "time to fail (fault -> every rank ended): " + (
            f"median {times[len(times) // 2]:.2f} s, max {times[-1]:.2f} s over {len(times)}"
            if times else "none measured"),
        f"bad inputs tried: {sum(r.bad_inputs for r in results)}",
    ]
    lines += [f"FAILED {r.scenario}: {r.detail}" for r in failed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/stress_channel.py", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=None,
                        help="run scenarios round-robin for this long (default: --quick)")
    parser.add_argument("--quick", action="store_true", help="each scenario once")
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--skip", nargs="+", choices=SCENARIOS, default=[])
    parser.add_argument("--platform", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--gpus", type=lambda t: [int(g) for g in t.split(",")], default=None,
                        help="GPU of each rank, e.g. 0,0 (GPU runs; repeated for 3 ranks)")
    parser.add_argument("--timeout", type=float, default=10.0, help="JAXMG_TIMEOUT_S of the jobs")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.platform == "gpu" and not args.gpus:
        args.gpus = [0]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    settings = Settings(platform=args.platform, gpus=args.gpus, timeout_s=args.timeout)
    names = [n for n in args.only if n not in args.skip]
    print(f"stress_channel: seed {seed}, {args.platform}, scenarios {' '.join(names)}", flush=True)
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as work:
        settings.workdir = Path(work)
        while True:
            for name in names:
                result = timed(RUNNERS[name], settings, rng)
                results.append(result)
                print(f"[{len(results):3d}] {'ok  ' if result.ok else 'FAIL'} {name:8s} "
                      f"{result.seconds:6.1f} s  {result.detail}", flush=True)
                if deadline and time.monotonic() > deadline:
                    break
            if not deadline or time.monotonic() > deadline:
                break
    print(summary(results), flush=True)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
