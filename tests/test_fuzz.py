"""The fast subset of the hostile-input campaign (`benchmarks/fuzz_campaign.py` runs the full one):
hypothesis draws cases from every reader's generator in `tests/fuzzlib.py` (config.json, hardware TOML,
--runtime-set, plan strings, plan.json, CLI numbers, search-space TOML, file types) and runs each
through the CLI; every outcome must be ok (finite, non-negative numbers) or one `error:` line with its
exit code — never a traceback, a hang past its bound, a printed NaN/negative cost or an out-of-domain
value accepted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))
import fuzzlib  # noqa: E402

FAST = {"config.json": 20, "hardware": 20, "runtime-set": 10, "plan": 20, "plan.json": 20, "cli": 15, "file": 10,
        "space": 6, "sweep": 8}


@pytest.mark.parametrize("kind", list(FAST))
def test_hostile_inputs_are_refused_on_one_line(kind, tmp_path_factory):
    work = tmp_path_factory.mktemp(kind.replace(".", "_"))

    @settings(max_examples=FAST[kind], deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.randoms(use_true_random=False))
    def run(rng):
        case = fuzzlib.GENERATORS[kind](rng)
        case.bound_s = min(case.bound_s, 30.0)
        out = fuzzlib.run_case(case, work)
        assert out.cls not in fuzzlib.BAD, f"{out.cls}: {case.label()} -> {out.detail}"
    run()


def test_the_classifier_catches_what_it_is_for():
    """The harness itself: printed NaN or negative costs are found, clean output is not."""
    assert fuzzlib.bad_numbers('{"time": {"step_s": -90.0}}') == [".time.step_s=-90.0"]
    assert fuzzlib.bad_numbers('{"time": {"step_s": NaN}}')
    assert fuzzlib.bad_numbers("step 12.3 s  mfu nan") == ["nan"]
    assert fuzzlib.bad_numbers('{"time": {"step_s": 1.5}, "plan": {"tp": 2}}') == []
