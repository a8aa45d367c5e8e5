"""`autoplace sweep` (autoplace.analysis.sweep) and its option parsers.

The main check: the sweep of the issue (70b, 64..4096 GPUs, 1T tokens) gives at every point exactly
the plan and step time of a separate `run_search` at that point, and its time to train, GPU-hours
and cost follow from the step time (and agree with 6·N·D / (GPUs · achieved FLOP/s))."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from autoplace.analysis import inputs as I
from autoplace.analysis.sweep import pareto_front, pick_deadline
from autoplace.cli import app
from autoplace.errors import InputError
from autoplace.io import to_jsonable
from autoplace.plan import parse_plan
from autoplace.search.space import load_space
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset

runner = CliRunner()


# ---- parsers -------------------------------------------------------------------------------------
def test_gpu_ranges_and_lists():
    assert I.parse_gpus("64..4096") == [64, 128, 256, 512, 1024, 2048, 4096]
    assert I.parse_gpus("100..1000") == [128, 256, 512]
    assert I.parse_gpus("64..4096:x4") == [64, 256, 1024, 4096]
    assert I.parse_gpus("96..384:+96") == [96, 192, 288, 384]
    assert I.parse_gpus("512,64,128,64") == [64, 128, 512]
    assert I.parse_gpus("8,64..256") == [8, 64, 128, 256]


@pytest.mark.parametrize("text", ["64-4096", "abc", "4096..64", "0..8", "64..4096:y2", "64,,128", "1.5", "65..127",
                                  "8..64:x1"])
def test_bad_gpu_syntax_is_one_input_error_naming_the_option(text):
    with pytest.raises(InputError) as e:
        I.parse_gpus(text)
    assert str(e.value).startswith("--gpus") and "64..4096" in str(e.value)


def test_tokens_durations_prices():
    assert I.parse_tokens("1T") == 1e12
    assert I.parse_tokens("300B") == 3e11
    assert I.parse_tokens("2e12") == 2e12
    assert I.parse_tokens("1.5t tokens") == 1.5e12
    assert I.parse_duration("30d") == 30 * 86400
    assert I.parse_duration("72h") == 72 * 3600
    assert I.parse_duration("2w") == 14 * 86400
    assert I.parse_price("2.5") == {None: 2.5}
    assert I.parse_price("b200=5.5,h100-sxm-80gb=3") == {"b200": 5.5, "h100-sxm-80gb": 3.0}
    for f, bad in ((I.parse_tokens, "1X"), (I.parse_duration, "30 parsecs"), (I.parse_price, "cheap")):
        with pytest.raises(InputError):
            f(bad)


def test_profile_prices_are_labelled_assumptions():
    assert load_hardware("h100-sxm-80gb").price_per_gpu_hour == 3.0
    assert load_hardware("a100-40gb").price_per_gpu_hour is None
    from autoplace.specs.hardware import PROFILE_DIR
    text = (PROFILE_DIR / "b200.toml").read_text()
    assert "[assumption" in text.split("price_per_gpu_hour")[0].rsplit("[pricing]", 1)[1]


# ---- the sweep equals separate searches ----------------------------------------------------
@pytest.fixture(scope="module")
def sweep70():
    r = runner.invoke(app, ["sweep", "--model", "70b", "--gpus", "64..4096", "--tokens", "1T", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_sweep_equals_separate_searches(sweep70):
    from autoplace import SCHEMA_VERSION
    doc = sweep70
    assert doc["schema_version"] == SCHEMA_VERSION
    rows = doc["rows"]
    assert [r["gpus"] for r in rows] == [64, 128, 256, 512, 1024, 2048, 4096]
    # the separate searches: what `autoplace search --model 70b --gpus G` runs, two at a time
    # (single-process each; the engine's result does not depend on its worker count)
    import multiprocessing as mp
    with mp.get_context("fork").Pool(2) as pool:
        results = pool.map(_separate_search, [r["gpus"] for r in rows])
    for r, res in zip(rows, results):
        assert r["status"] == "ok"
        want = json.loads(json.dumps(to_jsonable(res["plans"][0].resolved(r["gpus"]).to_dict())))
        assert r["plan"] == want, r["gpus"]
        assert r["plan_short"].split(" ")[0] == res["plans"][0].short()
        # the row's --plan string rebuilds the plan (paste it into estimate / compare)
        assert json.loads(json.dumps(to_jsonable(parse_plan(r["plan_text"]).resolved(r["gpus"]).to_dict()))) == want
        assert r["step_s"] == res["steps"][0], r["gpus"]                # exact, not approximately
        assert r["stack"] == res["stack"] and r["runtime"], r["gpus"]   # priced by the stack that runs it


def _separate_search(gpus):
    """What `autoplace search --model 70b --gpus G` runs: the union of the training-stack searches,
    each plan priced by the stack that runs it."""
    from autoplace.search.launchers import search
    out = search(get_preset("70b"), load_hardware(), gpus, space=load_space("default"), top_k=1, workers=1,
                 per_launcher=False)
    p, s, t = out.ranked[0]
    return {"plans": [p], "steps": [s], "stack": t.launcher}


def test_time_to_train_gpu_hours_cost_and_the_6nd_check(sweep70):
    N = get_preset("70b").total_params()
    D = 1e12
    for r in sweep70["rows"]:
        t = r["time_to_train_s"]
        assert math.isclose(t, D / (r["tokens_per_step"] / r["step_s"]), rel_tol=1e-12)
        assert math.isclose(r["gpu_hours"], r["gpus"] * t / 3600, rel_tol=1e-12)
        assert r["price_per_gpu_hour"] == 3.0 and r["price_source"] == "profile (assumption)"
        assert math.isclose(r["cost"], r["gpu_hours"] * 3.0, rel_tol=1e-12)
        # the model's achieved FLOP/s count attention too: 6·N·D / (GPUs · FLOP/s) is a few % less
        achieved = r["tflops_per_gpu"] * 1e12
        t6 = 6 * N * D / (r["gpus"] * achieved)
        assert 0.85 < t6 / t < 1.0, (r["gpus"], t6 / t)


def test_pareto_front_is_the_non_dominated_set(sweep70):
    rows = sweep70["rows"]
    front = set(sweep70["pareto"])
    for i, a in enumerate(rows):
        dominated = any(b["time_to_train_s"] <= a["time_to_train_s"] and b["cost"] <= a["cost"]
                        and (b["time_to_train_s"] < a["time_to_train_s"] or b["cost"] < a["cost"])
                        for j, b in enumerate(rows) if j != i)
        assert (i in front) == (not dominated), i
        assert a["pareto"] == (i in front)


def _row(g, t, price):
    return {"gpus": g, "hardware": "X", "status": "ok", "step_s": t, "tokens_per_step": 1.0, "tokens_per_s": 1 / t,
            "time_to_train_s": t * 1e6, "gpu_hours": g * t * 1e6 / 3600, "price_per_gpu_hour": price,
            "cost": None if price is None else price * g * t * 1e6 / 3600, "gpu_seconds_per_token": g * t,
            "cost_per_token": None if price is None else price * g * t / 3600}


def test_deadline_picks_the_cheapest_point_that_meets_it():
    rows = [_row(64, 8.0, 2.0), _row(128, 3.9, 2.0), _row(256, 2.1, 2.0), _row(512, 1.2, 2.0)]
    d = pick_deadline(rows, 4.0e6)          # 128, 256, 512 meet it; 128 is cheapest
    assert d["pick"] == 1 and d["metric"] == "cost" and "cheapest" in d["reason"]
    d = pick_deadline(rows, 1.0e6)
    assert d["pick"] is None and "no point meets" in d["reason"] and "512" in d["reason"]
    nop = [_row(64, 8.0, None), _row(128, 3.9, None), _row(256, 1.9, None)]
    d = pick_deadline(nop, 4.0e6)           # 128 × 3.9 = 499 GPU-s per token, 256 × 1.9 = 486: fewer
    assert d["metric"] == "gpu_hours" and d["pick"] == 2 and "no price" in d["reason"]
    assert pareto_front(nop) == [2]         # 256 is both the fastest and the cheapest
    assert pareto_front(rows) == [3, 2, 1]     # 64 GPUs: slower and dearer than 128


def test_deadline_cli_and_no_fit_rows():
    r = runner.invoke(app, ["sweep", "--model", "13b", "--gpus", "2,64", "--space", "megatron", "--gpu-memory", "24GiB",
                            "--tokens", "300B",
                            "--deadline", "60d", "--price-per-gpu-hour", "2", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    small, big = doc["rows"]
    assert small["status"] == "no fit" and "closest plan" in small["over"] and "GiB" in small["over"]
    assert big["status"] == "ok" and big["price_source"] == "--price-per-gpu-hour" and big["price_per_gpu_hour"] == 2.0
    assert doc["deadline"]["pick"] == 1 and big["time_to_train_s"] <= 60 * 86400


@pytest.mark.parametrize("args, fragment", [
    (["--gpus", "64-4096"], "--gpus"),
    (["--gpus", "64", "--deadline", "30d"], "--deadline needs --tokens"),
    (["--gpus", "64", "--tokens", "lots"], "--tokens"),
    (["--gpus", "64", "--price-per-gpu-hour", "b300=4"], "names no swept hardware"),
    (["--gpus", "64", "--hardware", "h100,h100-sxm-80gb"], "twice"),
])
def test_bad_sweep_input_is_one_line_exit_1(args, fragment):
    r = runner.invoke(app, ["sweep", "--model", "13b", *args])
    assert r.exit_code == 1, r.output
    assert fragment in r.output and "Traceback" not in r.output


def test_table_output_and_hardware_grid():
    r = runner.invoke(app, ["sweep", "--model", "7b", "--gpus", "8,16", "--hardware", "h100-sxm-80gb,a100-40gb",
                            "--tokens", "100B"])
    assert r.exit_code == 0, r.output
    assert "H100-SXM-80GB" in r.output and "A100-SXM4-40GB" in r.output and "★" in r.output
    assert "A100-SXM4-40GB — (none: give --price-per-gpu-hour)" in r.output
    assert "time vs GPU-hours" in r.output        # mixed prices: the front is taken on GPU-hours
