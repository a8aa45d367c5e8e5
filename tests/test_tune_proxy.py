"""Proxies keep per-rank shapes; the anchored prediction recovers a full-size step from proxy measurements."""

from __future__ import annotations

import pytest

from autoplace.estimate import estimate
from autoplace.plan import parse_plan
from autoplace.profile.proxy import anchored_device, device_scaled, proxy_of
from autoplace.profile.report import executed_plan, train_spec
from autoplace.profile.settings import DEFAULTS
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

MODEL = get_preset("llama-tiny").with_(layers=8)


def test_proxy_keeps_per_rank_shapes_and_shrinks_dp():
    p = parse_plan("tp=2,pp=2,mbs=2,recompute=full").resolved(16)          # dp = 4
    pr = proxy_of(MODEL, p, 16, 4, layers=2, global_batch=64)
    q = pr.plan
    assert (q.tp, q.mbs, q.recompute, q.pp, q.dp) == (2, 2, "full", 1, 2)
    assert pr.world == 4 and pr.model.layers == 2 and pr.model.hidden == MODEL.hidden
    # each rank runs the full plan's micro-batches: 64 / (2 · 4) = 8
    assert pr.global_batch == q.mbs * q.dp * 8
    assert proxy_of(MODEL, p, 16, 4, layers=9, global_batch=64).layers == 4          # at most one stage
    one = proxy_of(MODEL, parse_plan("pp=2").resolved(2), 2, 2, layers=1, global_batch=8)
    assert (one.plan.dp, one.world) == (1, 1)          # pp → 1 frees a rank: DP does not grow into it
    with pytest.raises(ValueError, match="tp·cp"):
        proxy_of(MODEL, parse_plan("tp=8").resolved(16), 16, 4)


@pytest.mark.parametrize("text,world", [("zero=3", 4), ("tp=2,pp=2", 4), ("pp=2,recompute=full", 2)])
def test_anchored_recovers_a_slower_machine(text, world):
    """'Measurements' made by the model on a machine with 2.5× slower GEMMs and 4× the launch overhead:
    anchoring the nominal model on two proxies recovers the full plan's step within 2 %, where the
    nominal model is off by far more."""
    hw = load_hardware("local-cpu")
    true = hw.with_(gemm_efficiency=hw.gemm_efficiency / 2.5, kernel_overhead_s=4 * hw.kernel_overhead_s)
    s = dict(DEFAULTS, seq_len=128, global_batch=8)
    p = parse_plan(text).resolved(world)
    t = train_spec(s, "gloo", MODEL)
    full = estimate(MODEL, hw, t, executed_plan(p), world)
    truth = estimate(MODEL, true, t, executed_plan(p), world)["time"]["step_s"]
    jobs, meas = [], []
    for L in (1, 2):
        pr = proxy_of(MODEL, p, world, 2, layers=L, global_batch=8)
        tp = train_spec(dict(s, global_batch=pr.global_batch), "gloo", pr.model)
        q = executed_plan(pr.plan.resolved(pr.world))
        jobs.append((pr.model, tp, q, pr.world))
        meas.append(estimate(pr.model, true, tp, q, pr.world)["time"]["step_s"])
    jobs = {0: jobs[0], 1: jobs[1], "full": (MODEL, t, executed_plan(p), world)}

    def doc_of(which, k):
        m, tr, q, w = jobs[which]
        return estimate(m, device_scaled(hw, k), tr, q, w)
    a = anchored_device(doc_of, (0, 1), tuple(meas), (1, 2))
    assert a["analytic_s"] == pytest.approx(full["time"]["step_s"])
    assert abs(a["analytic_s"] / truth - 1) > 0.3
    assert a["anchored_s"] == pytest.approx(truth, rel=0.02)


def _storages(tmp_path):
    out = [f"sqlite:///{tmp_path / 'c.db'}", f"journal:{tmp_path / 'c.journal'}"]
    import os
    if os.environ.get("AUTOPLACE_TEST_PG_URL"):
        out.append(os.environ["AUTOPLACE_TEST_PG_URL"])
    return out


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_study_contract_every_storage(tmp_path):
    """One contract over every storage: enqueue per candidate, a dead worker's trial failed with its
    error, resume re-enqueues only what has no complete trial, up to max_attempts failures."""
    import uuid

    from optuna.trial import TrialState

    from autoplace.profile import tune as T
    for url in _storages(tmp_path):
        st = T.open_study(url, f"contract-{uuid.uuid4().hex[:6]}", 1)
        assert T.enqueue_pending(st, 2) == [0, 1]
        assert T.enqueue_pending(st, 2) == []                       # waiting trials are not doubled
        a, b = st.ask(), st.ask()                                    # two workers take the two trials
        ia, ib = (t.suggest_categorical("candidate", [0, 1]) for t in (a, b))
        assert {ia, ib} == {0, 1}
        st.tell(a, 1.5)
        T.fail_trial(st, b.number, "worker killed by SIGKILL")
        ts = st.get_trials()
        assert [t.state for t in ts] == [TrialState.COMPLETE, TrialState.FAIL], url
        assert ts[1].user_attrs["error"] == "worker killed by SIGKILL"
        assert T.enqueue_pending(st, 2, max_attempts=2) == [ib]        # resume: only the failed one
        c = st.ask()
        assert c.suggest_categorical("candidate", [0, 1]) == ib
        T.fail_trial(st, c.number, "again")
        assert T.enqueue_pending(st, 2, max_attempts=2) == []          # two failures: given up


def test_sbatch_script_is_a_job_array_of_workers(tmp_path):
    from autoplace.profile.tune import sbatch_script
    s = sbatch_script("postgresql://u:p@db/tune", "st", 3, tmp_path, heartbeat_s=5, grace_s=None, timeout_s=600,
                      partition="gpu", gpus=8)
    assert "#SBATCH --array=0-2" in s and "#SBATCH --partition=gpu" in s and "#SBATCH --gpus-per-node=8" in s
    assert "#SBATCH --time=11" in s
    assert "srun " in s and "-m autoplace.profile.tune_worker --storage postgresql://u:p@db/tune --study st" in s
