"""`autoplace tune` through real services: PostgreSQL storage (a worker killed mid-trial, then a resume)
and a single-node SLURM (sbatch job array). .ci/run starts both; each test skips without its service."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from autoplace.plan import parse_plan
from autoplace.profile.tune import pick_candidates

# small: 2 "GPUs", batch 4 of 64 tokens, one 1-layer proxy per candidate on 2 ranks
ARGS = ["--model", "llama-tiny", "--gpus", "2", "--hardware", "local-cpu", "--global-batch", "4", "--seq-len", "64",
        "--measure", "2", "--proxy-ranks", "2", "--proxy-layers", "1", "--steps", "1", "--heartbeat", "1",
        "--timeout", "300", "--json"]


def _tune(tmp_path, *extra, env=None):
    from autoplace.profile.launch import worker_env
    r = subprocess.run([os.sys.executable, "-m", "autoplace", "tune", *ARGS, "--out", str(tmp_path), *extra],
                       capture_output=True, text=True, env=worker_env(env), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def _trials(url, name):
    from autoplace.profile.tune import open_study
    return open_study(url, name, 1).get_trials()


def test_pick_candidates_fast_and_different():
    ranked = [(parse_plan(t).resolved(8), s) for t, s in
              [("tp=2", 1.0), ("tp=2,mbs=2", 1.01), ("pp=2", 1.05), ("zero=3", 1.1), ("tp=8", 3.0)]]
    picked = pick_candidates(ranked, 3, lambda p: True, slack=1.5)
    assert picked == [0, 2, 3]    # the fastest, then those differing most (ties: the faster); tp=8 too slow
    assert pick_candidates(ranked, 3, lambda p: p.tp == 1) == [2, 3]


@pytest.mark.skipif(not os.environ.get("AUTOPLACE_TEST_PG_URL"),
                    reason="no PostgreSQL server (AUTOPLACE_TEST_PG_URL unset; .ci/run starts one)")
def test_tune_postgres_killed_worker_then_resume(tmp_path):
    from optuna.trial import TrialState
    url = os.environ["AUTOPLACE_TEST_PG_URL"]
    name = f"ci-{uuid.uuid4().hex[:8]}"
    doc = _tune(tmp_path, "--storage", url, "--study", name, env={"AUTOPLACE_TUNE_FAULT": "kill:1"})
    ts = _trials(url, name)
    assert [t.state for t in ts] == [TrialState.COMPLETE, TrialState.FAIL]
    assert "SIGKILL" in ts[1].user_attrs["error"]
    assert [c["status"] for c in doc["candidates"]] == ["ok", "failed"]
    assert ts[0].value == pytest.approx(doc["candidates"][0]["anchored_s"])
    doc2 = _tune(tmp_path, "--storage", url, "--study", name)          # resumes: only candidate 1 runs
    ts = _trials(url, name)
    assert [t.state for t in ts] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert [t.params["candidate"] for t in ts] == [0, 1, 1]
    assert [c["status"] for c in doc2["candidates"]] == ["ok", "ok"]
    assert sorted(c["anchored_rank"] for c in doc2["candidates"]) == [1, 2]
    cal = json.loads((tmp_path / "calibration.json").read_text())
    assert len(cal["observations"]) == 2 and set(cal["terms"]) | set(cal["refused"]) >= {"gemm", "host"}


def _slurm_up() -> bool:
    if not shutil.which("sbatch") or not shutil.which("sinfo"):
        return False
    r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return r.returncode == 0 and "idle" in r.stdout


@pytest.mark.skipif(not _slurm_up(), reason="no SLURM cluster answering sinfo with an idle node (.ci/run starts one)")
def test_tune_slurm_job_array(tmp_path):
    from optuna.trial import TrialState
    name = "slurm"
    doc = _tune(tmp_path, "--executor", "slurm", "--study", name)
    url = doc["storage"]
    ts = _trials(url, name)
    assert [t.state for t in ts] == [TrialState.COMPLETE, TrialState.COMPLETE]
    jobs = {t.user_attrs["worker"]["slurm_job"] for t in ts}
    assert len(jobs) == 1 and None not in jobs               # one job array, a task per candidate
    assert sorted(t.user_attrs["worker"]["slurm_task"] for t in ts) == ["0", "1"]
    assert "#SBATCH --array=0-1" in (tmp_path / "work" / "tune.sbatch").read_text()
