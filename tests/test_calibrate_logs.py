"""`calibrate --from-log`: the frameworks' log formats, the term fit, and --calibration in estimate."""

from __future__ import annotations

import json

import pytest

from autoplace.errors import InputError
from autoplace.profile.logs import parse_log

# Megatron-LM training_log / report_memory (megatron/training/training.py, utils.py), rank 0 and last rank
MEGATRON = """\
 [2026-03-01 10:00:01] iteration       10/     100 | consumed samples:         5120 | elapsed time per iteration (ms): 15210.4 | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: 1.000000E-04 | global batch size:   512 | lm loss: 9.812E+00 | loss scale: 1.0 | grad norm: 3.100 | number of skipped iterations:   0 | number of nan iterations:   0 |
[Rank 0] (after 10 iterations) memory (MB) | allocated: 41230.5 | max allocated: 60123.25 | reserved: 63000.0 | max reserved: 63000.0
[Rank 7] (after 10 iterations) memory (MB) | allocated: 40230.5 | max allocated: 61440.0 | reserved: 64000.0 | max reserved: 64000.0
 [2026-03-01 10:02:33] iteration       20/     100 | consumed samples:        10240 | elapsed time per iteration (ms): 13190.0 | throughput per GPU (TFLOP/s/GPU): 462.8 | learning rate: 1.000000E-04 | global batch size:   512 |
 [2026-03-01 10:04:45] iteration       30/     100 | consumed samples:        15360 | elapsed time per iteration (ms): 13210.0 | throughput per GPU (TFLOP/s/GPU): 462.1 | learning rate: 1.000000E-04 | global batch size:   512 |
 [2026-03-01 10:06:57] iteration       40/     100 | consumed samples:        20480 | elapsed time per iteration (ms): 13200.0 | throughput per GPU (TFLOP/s/GPU): 462.4 | learning rate: 1.000000E-04 | global batch size:   512 |
"""

# torchtitan MetricsProcessor.log (torchtitan/components/metrics.py), with its ANSI colours
TORCHTITAN = "".join(
    f"[rank0]:[titan] 2026-03-01 10:00:{i:02d},000 - root - INFO - \x1b[31mstep: {s:2}  \x1b[32mloss: {8.1 - s / 100:8.5f}  "
    f"\x1b[33mgrad_norm: {1.2:7.4f}  \x1b[34mmemory: {mem:5.2f}GiB({mem / 0.8:.2f}%)  "
    f"\x1b[94mtps: {tps:,}  \x1b[36mtflops: {tf:,.2f}  \x1b[35mmfu: {tf / 9.89:.2f}%\x1b[39m\n"
    for i, (s, mem, tps, tf) in enumerate([(1, 30.1, 900, 40.0), (10, 52.5, 4096, 380.12),
                                           (20, 52.5, 4000, 371.2), (30, 52.5, 4096, 380.1)]))

# DeepSpeed ThroughputTimer.stop (deepspeed/utils/timer.py), steps_per_print = 10
DEEPSPEED = """\
[2026-03-01 10:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=30.1, CurrSamplesPerSec=31.2, MemAllocated=12.3GB, MaxMemAllocated=40.5GB
[2026-03-01 10:00:10,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=80/global_step=20, RunningAvgSamplesPerSec=31.0, CurrSamplesPerSec=32.0, MemAllocated=12.3GB, MaxMemAllocated=41.25GB
[2026-03-01 10:00:20,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=120/global_step=30, RunningAvgSamplesPerSec=31.3, CurrSamplesPerSec=32.0, MemAllocated=12.3GB, MaxMemAllocated=41.25GB
"""


def test_megatron_log():
    m = parse_log(MEGATRON, global_batch=512, seq_len=4096, world=64)
    assert m.framework == "megatron"
    assert m.step_s == pytest.approx(13.20)            # median of the intervals after the first
    assert m.memory_bytes == 61440.0 * 2**20 and m.memory_kind == "allocated"   # the largest rank
    assert m.tflops_per_gpu == pytest.approx(462.4)


def test_torchtitan_log():
    m = parse_log(TORCHTITAN, global_batch=64, seq_len=8192, world=128)
    assert m.framework == "torchtitan"
    assert m.step_s == pytest.approx(64 * 8192 / (4096 * 128))    # gb·seq ÷ (tps·world)
    assert m.memory_bytes == 52.5 * 2**30 and m.memory_kind == "reserved"


def test_deepspeed_log():
    m = parse_log(DEEPSPEED, global_batch=256, seq_len=2048, world=32)
    assert m.framework == "deepspeed"
    assert m.step_s == pytest.approx(256 / 32.0)        # train_batch_size ÷ CurrSamplesPerSec
    assert m.memory_bytes == 41.25 * 2**30 and m.memory_kind == "allocated"


def test_unknown_log_is_one_line_error():
    with pytest.raises(InputError, match="no step-time line"):
        parse_log("hello\nworld\n", global_batch=1, seq_len=1, world=1)


def _records():
    from pathlib import Path
    p = Path(__file__).resolve().parents[1] / "benchmarks" / "configs" / "calibration_siblings.json"
    return json.loads(p.read_text())


def _doc(rec):
    from autoplace.export.planfile import plan_document
    from autoplace.validate.mapping import map_shaped
    mp = map_shaped(rec)
    return plan_document(mp.model, mp.hw, mp.train, mp.plan, mp.world), mp


def _measured(rec, mp):
    return mp.train.global_batch * mp.train.seq_len / (rec["measured"]["tokens_per_sec_per_gpu"] * mp.world)


def test_from_log_fit_moves_sibling_toward_its_measurement(tmp_path):
    """A Megatron-Bridge log of one published run (DeepSeek-V3 on 256 GB200) calibrates the model; the
    prediction of a sibling run (gpt-oss-120b, same GPUs and runtime) moves toward its measurement."""
    from typer.testing import CliRunner

    from autoplace.cli import app
    from autoplace.estimate import estimate
    from autoplace.profile.corrections import load_calibration
    recs = {r["id"]: r for r in _records()}
    src = recs["mbridge2606-gb200-deepseekv3-mxfp8-256gpu-gbs4096"]
    sib = recs["mbridge2606-gb200-gptoss120b-mxfp8-64gpu-gbs1280"]
    doc, mp = _doc(src)
    t = _measured(src, mp)
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    lines = [f" iteration {10 * i:8d}/     100 | consumed samples: {4096 * 10 * i} | elapsed time per iteration (ms): "
             f"{1e3 * t * f:.1f} | throughput per GPU (TFLOP/s/GPU): 500.0 | global batch size:  4096 |"
             for i, f in ((1, 1.3), (2, 1.0), (3, 1.0), (4, 1.0))]
    lines.insert(1, "[Rank 0] (after 10 iterations) memory (MB) | allocated: 90000.0 | max allocated: 150000.0 | "
                    "reserved: 160000.0 | max reserved: 160000.0")
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(app, ["calibrate", "--from-log", str(tmp_path / "train.log"), "--plan",
                                 str(tmp_path / "plan.json"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    cal = load_calibration(out)
    assert cal.observations[0].step_s == pytest.approx(t, rel=1e-3)
    assert cal.observations[0].memory_bytes == 150000.0 * 2**20
    # one run identifies the dominant term only; the rest are refused by name
    assert set(cal.terms) | set(cal.refused) == {"gemm", "attention", "host", "bw_intra", "bw_inter"}
    assert len(cal.terms) >= 1 and cal.refused
    assert all("identify" in why or "exercises" in why for why in cal.refused.values())
    f = cal.fit["runs"][0]
    assert abs(f["after_s"] / t - 1) < abs(f["before_s"] / t - 1) / 2
    # the calibrated run's memory is reproduced by the fitted overhead
    cal_hw = cal.apply(mp.hw)
    d_src = estimate(mp.model, cal_hw, mp.train, mp.plan, mp.world)
    assert d_src["memory"]["peak_bytes"] - estimate(mp.model, mp.hw, mp.train, mp.plan, mp.world)["memory"][
        "peak_bytes"] == pytest.approx(cal.memory_overhead["bytes"])
    # the sibling
    sdoc, smp = _doc(sib)
    ts = _measured(sib, smp)
    before = estimate(smp.model, smp.hw, smp.train, smp.plan, smp.world)["time"]["step_s"]
    after = estimate(smp.model, cal.apply(smp.hw), smp.train, smp.plan, smp.world)["time"]["step_s"]
    assert abs(after / ts - 1) < abs(before / ts - 1)
    # --show prints the change; estimate --calibration reads the file
    r = CliRunner().invoke(app, ["calibrate", "--show", str(out)])
    assert r.exit_code == 0 and "unchanged" in r.output and "×" in r.output, r.output
    (tmp_path / "sib.json").write_text(json.dumps(sdoc))
    r = CliRunner().invoke(app, ["estimate", "--plan-file", str(tmp_path / "sib.json"), "--calibration", str(out),
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["time"]["step_s"] == pytest.approx(after, rel=1e-9)


def test_calibration_for_other_hardware_refused(tmp_path):
    from typer.testing import CliRunner

    from autoplace.cli import app
    from autoplace.profile.corrections import Calibration, save_calibration
    save_calibration(Calibration("GB200-NVL72", "megatron-core", {"gemm": {"x": 1.1, "sigma_log": 0.02}}), tmp_path / "c.json")
    r = CliRunner().invoke(app, ["estimate", "--model", "7b", "--gpus", "8", "--plan", "tp=2", "--calibration",
                                 str(tmp_path / "c.json")])
    assert r.exit_code == 1 and "fitted on hardware 'GB200-NVL72'" in r.output
