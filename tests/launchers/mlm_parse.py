"""Parse emitted Megatron-LM flags with Megatron-LM's own `parse_args` and `validate_args` (run in a
subprocess with PYTHONPATH = a Megatron-LM checkout; no GPU needed).

    python mlm_parse.py PATH@WORLD [PATH@WORLD ...]     one JSON line per path: {"file", "ok", "error", "args"}

PATH is an export folder (the command line and environment megatron_launch.sh would give
pretrain_gpt.py: megatron_args.txt, the script's default data/training flags, megatron_env.sh's
exports) or a bare megatron_args.txt (mock data, CUDA_DEVICE_MAX_CONNECTIONS=1).

Megatron-LM HEAD needs Python 3.12's typing.override and imports some triton kernels at import time:
both are stood in (the kernels raise if called), and so are the tokenizer-only packages older releases
import at module level (six, regex: never called by parse_args). `validate_args` asks the GPU for its
compute capability (only for grouped GEMM: an H100's (9, 0) is answered) and Transformer Engine for its
version and the device its architecture (an H100; answered as the TE 2.x the runtime files name: every `is_te_min_version` check passes)."""

import contextlib
import io
import json
import sys
import traceback
import types
import typing

try:
    import typing_extensions
    typing.override = getattr(typing, "override", typing_extensions.override)
except ImportError:  # pragma: no cover
    typing.override = getattr(typing, "override", lambda f: f)


_TOKENIZER_ONLY = {"six", "regex", "sentencepiece", "tiktoken"}
KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size", "micro_batch_size",
        "global_batch_size", "seq_length", "num_layers", "hidden_size", "rotary_base", "swiglu", "moe_grouped_gemm",
        "use_distributed_optimizer", "overlap_grad_reduce", "recompute_granularity", "recompute_method",
        "recompute_num_layers", "sequence_parallel", "expert_model_parallel_size", "num_experts",
        "data_parallel_size", "fp8", "cuda_graph_impl", "moe_token_dispatcher_type")


def _import_arguments():
    for _ in range(30):
        try:
            from megatron.training import arguments
            return arguments
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("triton"):
                if (e.name or "").split(".")[0] not in _TOKENIZER_ONLY:
                    raise
                sys.modules[e.name] = types.ModuleType(e.name)
                continue
            files = [f.filename for f in traceback.extract_tb(e.__traceback__) if "/megatron/" in f.filename]
            name = "megatron/" + files[-1].split("/megatron/", 1)[1]
            name = name[:-3].replace("/", ".")
            m = types.ModuleType(name)
            m.__getattr__ = lambda k: (_ for _ in ()).throw(AttributeError(k)) if k.startswith("__") else (lambda *a, **kw: None)
            sys.modules[name] = m
            for k in [k for k in sys.modules if k.startswith("megatron") and k != name and
                      not isinstance(sys.modules[k].__dict__.get("__getattr__"), type(lambda: 0))]:
                del sys.modules[k]
    raise RuntimeError("could not import megatron.training.arguments")


def _launch_argv(folder) -> tuple[list[str], dict]:
    """The command line and environment `megatron_launch.sh` gives pretrain_gpt.py: the plan flags, the
    script's default DATA_ARGS / TRAIN_ARGS, and the exports of megatron_env.sh."""
    import re
    import shlex
    from pathlib import Path
    d = Path(folder)
    argv = [x for line in (d / "megatron_args.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#") for x in line.split()]
    launch = (d / "megatron_launch.sh").read_text()
    for var in ("DATA_ARGS", "TRAIN_ARGS"):
        m = re.search(var + r'="\$\{' + var + r':-(.*)\}"\n', launch)
        argv += shlex.split(m.group(1)) if m else []
    env = dict(re.findall(r"^export (\w+)=(\S+)$", (d / "megatron_env.sh").read_text(), re.M))
    return argv, {k: v.strip('"') for k, v in env.items()}


def check(A, path: str, world: int) -> dict:
    import os
    from pathlib import Path
    if Path(path).is_dir():
        argv, env = _launch_argv(path)
    else:
        argv = [x for line in open(path).read().splitlines() if line.strip() and not line.startswith("#")
                for x in line.split()] + ["--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000"]
        env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_FWD_LAYERNORM_SM_MARGIN", "NVTE_BWD_LAYERNORM_SM_MARGIN"):
        os.environ.pop(k, None)
    os.environ.update(env)
    sys.argv = ["pretrain_gpt.py", *argv]
    os.environ["WORLD_SIZE"], os.environ["RANK"] = str(world), "0"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            args = A.parse_args(ignore_unknown_args=False)
            A.validate_args(args, {})
    except SystemExit:
        err = [x for x in out.getvalue().splitlines() if "error" in x.lower()]
        return {"file": path, "ok": False, "error": (err[-1] if err else out.getvalue()[-300:]).strip()}
    except Exception as e:  # noqa: BLE001 — an AssertionError/ValueError of validate_args is the verdict
        return {"file": path, "ok": False, "error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    return {"file": path, "ok": True, "error": None, "args": {k: getattr(args, k, None) for k in KEYS}}


def main():
    import torch
    torch.cuda.get_device_capability = lambda *a, **kw: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **kw: types.SimpleNamespace(major=9, minor=0, name="H100")
    A = _import_arguments()
    A.is_te_min_version = lambda *a, **kw: True
    if hasattr(A, "get_device_arch_version"):
        A.get_device_arch_version = lambda: 9
    for item in sys.argv[1:]:
        path, _, world = item.rpartition("@") if "@" in item else (item, "", "1")
        print(json.dumps(check(A, path, int(world)), default=str), flush=True)


if __name__ == "__main__":
    main()
