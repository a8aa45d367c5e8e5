"""Fault tests: `autoplace sweep` and `autoplace profile` killed in the middle of a run.

Each run is a real subprocess (`python -m autoplace …`) signalled once its workers exist: the sweep's
forked worker pool, or profile's torchrun and its torch workers inside the training loop. Asserted: one
`error:` line and 128 + the signal number as exit code, no traceback from the command or any worker,
no worker left alive, no half-written or temp file, earlier outputs untouched, and no result appended
after the kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _children(pid: int) -> set[int]:
    """Every descendant of `pid` (Linux /proc): the walk `profile` itself uses to find its workers."""
    from autoplace.safe import descendants
    return descendants(pid)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids, seconds: float) -> set[int]:
    t0 = time.time()
    left = set(pids)
    while left and time.time() - t0 < seconds:
        left = {p for p in left if _alive(p)}
        time.sleep(0.05)
    return left


def _kill_all(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _temps(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.startswith(".") or p.name.endswith(".tmp"))


EXPECT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129, "SIGKILL": -9}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_sweep_killed_mid_run_leaves_old_outputs_and_no_worker(tmp_path, sig):
    report, plots = tmp_path / "r.html", tmp_path / "plots"
    report.write_text("old report")
    plots.mkdir()
    (plots / "sweep_throughput.png").write_bytes(b"old png")
    argv = [sys.executable, "-m", "autoplace", "sweep", "--model", "70b", "--gpus", "64..4096",
            "--seq-len", "4096,8192", "--workers", "2", "--json", "--report", str(report), "--plot", str(plots)]
    p = subprocess.Popen(argv, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    t0, kids = time.time(), set()
    while len(kids) < 2 and time.time() - t0 < 60 and p.poll() is None:
        kids = _children(p.pid)
        time.sleep(0.02)
    assert len(kids) == 2, f"the sweep's 2 pool workers never started: {p.communicate()[1].decode()[-500:]}"
    if sig == "SIGINT":
        os.killpg(p.pid, signal.SIGINT)          # Ctrl-C reaches the whole foreground group
    else:
        p.send_signal(getattr(signal, sig))
    out, err = p.communicate(timeout=30)
    err = err.decode()
    left = _wait_gone(kids, 5)
    _kill_all(left)
    assert p.returncode == EXPECT[sig], err
    assert not left, f"sweep workers outlived {sig}"
    assert "Traceback" not in err and "Error" not in err, err
    if sig != "SIGKILL":
        assert err.strip().count("\n") == 0 and err.startswith("error: sweep "), err
        assert sig in err or "Ctrl-C" in err
    assert out == b""                                   # no half JSON document
    assert report.read_text() == "old report"
    assert sorted(x.name for x in plots.iterdir()) == ["sweep_throughput.png"]
    assert (plots / "sweep_throughput.png").read_bytes() == b"old png"
    assert _temps(tmp_path) == []


def test_sigterm_while_the_report_is_written_removes_the_temp_file(tmp_path, monkeypatch):
    """A real SIGTERM delivered inside the atomic write (temp file written, not yet renamed)."""
    from typer.testing import CliRunner

    import autoplace.io as io
    from autoplace.cli import app
    report = tmp_path / "r.html"
    report.write_text("old report")
    real_replace, seen = os.replace, []

    def replace(src, dst):
        seen.append(Path(src).exists())
        os.kill(os.getpid(), signal.SIGTERM)
        return real_replace(src, dst)
    monkeypatch.setattr(io.os, "replace", replace)
    r = CliRunner().invoke(app, ["sweep", "--model", "7b", "--gpus", "8", "--workers", "1",
                                 "--report", str(report)])
    assert seen == [True]
    assert r.exit_code == 143, r.output
    assert "error: sweep stopped by SIGTERM" in r.output and "Traceback" not in r.output
    assert report.read_text() == "old report"
    assert _temps(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL      # the command restored the handler


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _pgroup(pgid: int) -> set[int]:
    """Live processes whose process group is `pgid`."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(f[2]) == pgid and f[0] != "Z":
                out.add(int(d))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig,when", [("SIGTERM", "training"), ("SIGINT", "starting")])
def test_profile_killed_with_real_torch_workers_leaves_nothing_running(tmp_path, sig, when):
    """SIGTERM once the torch workers are in the training loop; Ctrl-C while they are still starting
    (both worker processes exist, importing torch / joining the gloo group)."""
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "autoplace", "profile", "--model", "llama-tiny", "--gpus", "2",
            "--plan", "zero=3", "--plan", "zero=1", "--backend", "gloo", "--steps", "100000", "--warmup", "0",
            "--no-equivalence", "--out", str(out)]
    p = subprocess.Popen(argv, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    progress = out / "work" / "launch1.progress.jsonl"
    t0 = time.time()
    while time.time() - t0 < 90 and p.poll() is None:
        if when == "training" and progress.exists() and '"start"' in progress.read_text():
            break                                        # the torch workers are in the training loop
        if when == "starting" and len(_children(p.pid)) >= 3:
            break                                        # torchrun and its 2 workers exist
        time.sleep(0.05)
    else:
        p.kill()
        raise AssertionError(f"the workers never started: {p.communicate()[1].decode()[-800:]}")
    kids = _children(p.pid)
    torchrun = [k for k in kids if _ppid(k) == p.pid]
    assert len(torchrun) == 1 and os.getpgid(torchrun[0]) == torchrun[0], kids   # torchrun leads a group
    workers = _children(torchrun[0])
    assert len(workers) >= 2, kids                  # torch elastic gives each worker a session of its own
    groups = {torchrun[0]} | {os.getpgid(w) for w in workers}
    group = set().union(*(_pgroup(g) for g in groups)) | kids
    results = out / "results.jsonl"
    before = results.read_bytes() if results.exists() else b""
    p.send_signal(getattr(signal, sig))
    try:
        _, err = p.communicate(timeout=15)
    finally:
        left = _wait_gone(group | kids, 5)
        _kill_all(left)
    err = err.decode()
    assert not left, f"{sorted(left)} of the profile run outlived {sig}"
    assert not set().union(*(_pgroup(g) for g in groups))
    assert p.returncode == EXPECT[sig], err
    assert err.strip().splitlines()[-1].startswith("error: profile "), err
    assert "Traceback" not in err, err
    time.sleep(0.5)
    after = results.read_bytes() if results.exists() else b""
    assert after == before                             # nothing appended after the kill
    assert all(json.loads(x)["index"] != 1 for x in after.decode().splitlines())


def test_kill_ends_a_worker_in_its_own_session_that_ignores_sigterm(tmp_path):
    """torch elastic starts each worker with a session of its own, outside torchrun's group: a worker
    (and a torchrun) that ignores SIGTERM is still killed after the grace period."""
    from autoplace.profile.launch import _kill, _start
    script = "trap '' TERM; setsid sh -c \"trap '' TERM; sleep 300\" & wait"
    with open(tmp_path / "err.txt", "w") as errf:
        proc = _start(["sh", "-c", script], errf, dict(os.environ))
        t0, kids = time.time(), set()
        while not kids and time.time() - t0 < 10:
            kids = _children(proc.pid)
            time.sleep(0.02)
        worker = [k for k in kids if os.getpgid(k) != proc.pid]
        assert worker, kids                              # a worker outside torchrun's process group
        t0 = time.time()
        _kill(proc, grace_s=0.5)
    left = _wait_gone(kids, 3)
    _kill_all(left)
    assert not left and proc.returncode == -9
    assert time.time() - t0 < 5


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_search_workers_end_with_the_command(tmp_path, sig):
    """`search --workers 2`: the exhaustive search's pool ends with the command, silently."""
    argv = [sys.executable, "-m", "autoplace", "search", "--model", "70b", "--gpus", "4096", "--workers", "2",
            "--method", "exhaustive", "--json"]
    p = subprocess.Popen(argv, env=ENV, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    t0, kids = time.time(), set()
    while len(kids) < 2 and time.time() - t0 < 60 and p.poll() is None:
        kids = _children(p.pid)
        time.sleep(0.02)
    assert len(kids) == 2, p.communicate()[1].decode()[-500:]
    if sig == "SIGINT":
        os.killpg(p.pid, signal.SIGINT)
    else:
        p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    left = _wait_gone(kids, 5)
    _kill_all(left)
    assert not left and p.returncode == EXPECT[sig] and out == b""
    assert err.decode().startswith("error: search ") and err.decode().strip().count("\n") == 0, err
