"""CI subset of benchmarks/launcher_matrix.py: `autoplace search -l L --emit` files accepted by every
version's own code — megatron-core 0.16.1 (pinned) and Megatron-LM's parse_args + validate_args at the
pinned megatron-core's release and the current one, DeepSpeedConfig, torchtitan 0.2.2 and 0.3,
accelerate. Every launcher, version and runtime switch appears at least once; each validator that is
not installed skips its version (the rest still run). The full grid is the benchmark."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
import launcher_matrix as LM  # noqa: E402

# (launcher, preset, GPUs, switch): every switch of launcher_matrix.SWITCHES at least once, every launcher
POINTS = [
    ("megatron", "13b", 64, "bf16"),
    ("megatron", "llama3-8b", 8, "fp8"),
    ("megatron", "llama3-70b", 256, "fp8-attention"),
    ("megatron", "70b", 64, "cuda-graphs"),
    ("megatron", "13b", 256, "cuda-graphs-full"),
    ("megatron", "mixtral-8x7b", 64, "allgather"),
    ("megatron", "mixtral-8x7b", 256, "deepep"),
    ("megatron", "qwen3-30b-a3b", 256, "hybridep"),
    ("megatron", "gpt-oss-20b", 64, "fused-moe-mlp"),
    ("deepspeed", "13b", 64, "bf16"),
    ("deepspeed", "llama3-8b", 8, "cuda-graphs"),
    ("torchtitan", "13b", 64, "bf16"),                 # Llama-2 shape (custom flavor / llama3 layer builder)
    ("torchtitan", "llama3-8b", 64, "fp8"),            # float8 converters
    ("torchtitan", "llama3-70b", 64, "bf16"),          # built-in flavor
    ("torchtitan", "qwen3-30b-a3b", 64, "deepep"),     # registered MoE model, DeepEP backend
    ("accelerate", "llama3-8b", 64, "bf16"),
    ("accelerate", "13b", 256, "fp8"),
]


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    warnings.filterwarnings("ignore")
    pts = [LM.Point(*p) for p in POINTS]
    return LM.run(pts, tmp_path_factory.mktemp("matrix"), progress=False)


def test_matrix_covers_every_launcher_and_switch():
    assert {p[0] for p in POINTS} == set(LM.LAUNCHERS)
    assert {p[3] for p in POINTS} == {s[0] for s in LM.SWITCHES}


@pytest.mark.parametrize("i", range(len(POINTS)), ids=["-".join(map(str, p)) for p in POINTS])
def test_exported_files_are_accepted_by_each_version(points, i):
    p = points[i]
    if not p.folder:                       # autoplace refused the search: one line, a reason
        assert p.exit in (1, 3, 4) and p.refused and "\n" not in p.refused, (p.exit, p.refused)
        return
    versions = {"megatron": {"megatron-core 0.16.1", *(f"Megatron-LM {t}" for t in LM_TAGS)},
                "deepspeed": {"DeepSpeedConfig"}, "torchtitan": {"torchtitan 0.2.2", "torchtitan 0.3"},
                "accelerate": {"accelerate"}}[p.launcher]
    assert set(p.verdicts) == versions
    bad = {k: v for k, v in p.verdicts.items() if not (v == "ok" or v.startswith(("skipped", "refused")))}
    assert not bad, bad
    for k, v in p.verdicts.items():
        if v.startswith("refused"):          # only the exporter's one-line reason for a version it cannot say
            assert k in ("torchtitan 0.3", "Megatron-LM core_v0.16.1") and "\n" not in v


def test_matrix_writes_files_for_most_points(points):
    """The subset is chosen from plans the stacks run: most searches write files (a refusal is the exception)."""
    assert sum(1 for p in points if p.folder) >= len(POINTS) - 3


from launchers import MEGATRON_LM_TAGS as LM_TAGS  # noqa: E402
