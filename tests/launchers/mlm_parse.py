"""Parse emitted Megatron-LM flags with Megatron-LM's own `parse_args` (run in a subprocess with
PYTHONPATH = a Megatron-LM checkout). Megatron-LM HEAD needs Python 3.12's typing.override and imports
some triton kernels at import time: both are stood in (the kernels raise if called)."""

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


def _import_arguments():
    for _ in range(30):
        try:
            from megatron.training import arguments
            return arguments
        except ModuleNotFoundError as e:
            if not (e.name or "").startswith("triton"):
                raise
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


A = _import_arguments()
argv = [x for line in open(sys.argv[1]).read().splitlines() if line.strip() and not line.startswith("#")
        for x in line.split()]
sys.argv = ["pretrain_gpt.py", *argv, "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000"]
args = A.parse_args(ignore_unknown_args=False)
print(json.dumps({k: getattr(args, k, None) for k in (
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size", "micro_batch_size",
    "global_batch_size", "seq_length", "num_layers", "hidden_size", "rotary_base", "swiglu", "moe_grouped_gemm",
    "use_distributed_optimizer", "overlap_grad_reduce", "recompute_granularity", "recompute_method",
    "recompute_num_layers", "sequence_parallel", "expert_model_parallel_size", "num_experts")}, default=str))
