"""Every flag autoplace writes for Megatron-LM, checked in CI against the argument tables of Megatron-LM's
own parser at the pinned megatron-core's release and the current one (tests/data/megatron_lm_flags,
extracted from each release's ArgumentParser by tests/launchers/mlm_flags.py). Where a checkout exists,
test_megatron_lm_args.py runs the parser itself with validate_args."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoplace import api
from autoplace.export import megatron


def _version(tag: str) -> tuple:
    return tuple(int(x) for x in tag.removeprefix("core_v").split("."))

sys.path.insert(0, str(Path(__file__).parent))
from launchers import MEGATRON_LM_TAGS  # noqa: E402
from launchers.mlm_flags import check_argv, load_table  # noqa: E402
from launchers.mlm_parse import _launch_argv  # noqa: E402

# the pinned megatron-core's release, the current one, and each release that added a flag autoplace writes
# (the megatron-core runtime file's supports.flags_since)
TAGS = sorted({*MEGATRON_LM_TAGS, *dict(megatron.LAUNCHER.runtime_for(None).supports.flags_since).values()},
              key=lambda t: _version(t))
TABLES = {t: load_table(t) for t in TAGS}

# (model, gpus, runtime switches): dense and MoE, small and large, the switches the Megatron runtime takes
CELLS = [
    ("13b", 64, ()),
    ("llama3-8b", 8, ("cuda_graphs=full_iteration",)),
    ("llama3-70b", 256, ("fp8_attention=true",)),
    ("mixtral-8x7b", 64, ("moe_dispatch=allgather",)),
    ("deepseek-v3", 256, ("moe_dispatch=deepep",)),
    ("qwen3-30b-a3b", 64, ("cuda_graphs=false",)),
    ("qwen3-235b-a22b", 128, ("moe_fused_mlp=true",)),
]


def _exported_argvs(tmp_path, model, gpus, switches, top_k=2):
    res = api.search(api.SearchRequest(model=model, gpus=gpus, launchers=("megatron",), runtime_set=switches,
                                       top_k=top_k))
    for i, p in enumerate(res.plans):
        out = tmp_path / f"{model}-{gpus}-{i}"
        api.export(p.document["plan_file"], ("megatron",), out)
        folder = out / "megatron" if (out / "megatron").is_dir() else out
        first = (folder / "megatron_args.txt").read_text().splitlines()[0]
        since = first.split()[3] if first.startswith("# needs Megatron-LM ") else None
        yield p.plan, since, _launch_argv(folder)[0]


@pytest.mark.parametrize("model,gpus,switches", CELLS, ids=[f"{m}-{g}" for m, g, _ in CELLS])
def test_searched_megatron_exports_parse_under_both_releases(tmp_path, model, gpus, switches):
    n = 0
    for plan, since, argv in _exported_argvs(tmp_path, model, gpus, switches):
        for tag, table in TABLES.items():
            errors = check_argv(argv, table)
            if since and _version(tag) < _version(since):
                # the file says it needs a newer release: the older parser must indeed refuse it
                assert errors, f"{model}/{gpus} {plan}: says it needs {since}, yet {tag} parses it"
            else:
                assert errors == [], f"{model}/{gpus} {plan} under Megatron-LM {tag}"
        n += 1
    assert n >= 1


def test_table_check_refuses_what_the_parser_refuses():
    new, old = TABLES[MEGATRON_LM_TAGS[-1]], TABLES[MEGATRON_LM_TAGS[0]]
    # a flag no release has (autoplace once wrote it), a typo, and allow_abbrev=False
    assert check_argv(["--fp8-dot-product-attention"], new) == ["unrecognized argument --fp8-dot-product-attention"]
    assert check_argv(["--tensor-model-paralel-size", "2"], new)
    assert new["allow_abbrev"] is False and check_argv(["--tensor-model-parallel", "2"], new)
    # arity, type and choices
    assert check_argv(["--tensor-model-parallel-size"], new) == ["--tensor-model-parallel-size takes nargs=None, got []"]
    assert check_argv(["--tensor-model-parallel-size", "two"], new) == [
        "--tensor-model-parallel-size: invalid int value 'two'"]
    assert check_argv(["--sequence-parallel", "1"], new) == ["--sequence-parallel takes no value, got ['1']"]
    assert check_argv(["--moe-token-dispatcher-type", "flex"], new) == []
    assert check_argv(["--moe-token-dispatcher-type", "alltoall_seq"], new)
    # the releases differ where Megatron-LM changed: full_iteration became a cuda_graph_impl after 0.16
    assert check_argv(["--cuda-graph-impl", "full_iteration"], new) == []
    assert check_argv(["--cuda-graph-impl", "full_iteration"], old) != []
