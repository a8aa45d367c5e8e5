"""Search over presets × GPU counts × hardware ends in a plan or a one-line refusal, never a traceback.

`search --model gpt-oss-20b --gpus 1024` used to crash in the TPE seeding (`Decoder.encode` read an
un-varied extra Plan field, stored as a scalar, as a column). CI runs a deterministic subset on the
coarse space with a few TPE trials (the bayes path, seeding included); the whole grid on the default
space is `benchmarks/search_grid.py`."""

import math

import numpy as np
import pytest

from autoplace.search.grid_check import GPUS, HARDWARE, run_cell
from autoplace.specs.presets import PRESETS, get_preset


def _cells():
    """Every second preset once, at a (GPUs, hardware) cell chosen by its index (so every GPU count and
    both cards appear), MoE presets at ≤ 64 GPUs (cost), plus the two reported crash cells."""
    out = []
    for i, name in enumerate(list(PRESETS)[::2]):       # every second preset (CI time); all in the benchmark
        g = GPUS[i % len(GPUS)]
        if get_preset(name).is_moe and g > 64:
            g = 64
        out.append((name, g, HARDWARE[(i // len(GPUS)) % 2]))
    out += [("gpt-oss-20b", 1024, "h100-sxm-80gb"), ("mixtral-8x7b", 1024, "b200")]
    return out


@pytest.fixture(scope="module")
def coarse():
    from autoplace.search.bayes import _coarse
    from autoplace.search.space import load_space
    return _coarse(load_space("default"))


@pytest.mark.parametrize("preset,gpus,hardware", _cells())
def test_search_ends_in_plan_or_refusal(preset, gpus, hardware, coarse):
    outcome, step, msg = run_cell(preset, gpus, hardware, space=coarse, method="bayes", trials=3)
    if outcome == "plan":
        assert math.isfinite(step) and step > 0
    else:
        assert outcome in ("NoFeasiblePlanError", "InputError", "LauncherRefusedError"), (outcome, msg)
        assert msg and "\n" not in msg


def test_decoder_encodes_plan_with_scalar_extra_field():
    """A batch built from one plan keeps an extra field at its default as a scalar; encode reads it."""
    from autoplace.plan import Plan
    from autoplace.search.batch import EXTRA, PlanBatch
    from autoplace.search.bayes import _first
    b = PlanBatch.from_plans([Plan(dp=8)])
    k = next(c for c, (dt, d) in EXTRA.items() if dt is bool)
    assert not isinstance(getattr(b, k), np.ndarray)
    assert _first(b, k) == EXTRA[k][1]
    assert _first(b, "dp") == 8
