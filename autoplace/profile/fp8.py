"""FP8 training in the plan runner through NVIDIA Transformer Engine (only where it is installed and a
CUDA device has FP8 GEMMs: `capabilities.fp8_refusal` says why not otherwise).

The transformer blocks' linears (attention wq/wk/wv/wo, MLP and expert w1/w3/w2) become
`transformer_engine.pytorch.Linear` with the same weights (fp32 parameters, Adam state fp32), and the
forward runs under `te.fp8_autocast` with TE's `DelayedScaling` recipe (E4M3 forward, E5M2 gradients:
`Format.HYBRID`), as Megatron-Core's `--fp8-format hybrid`. Embedding, norms, attention core and the
output head stay in the autocast dtype (bf16), as in Megatron / torchtitan FP8 training.
"""

from __future__ import annotations

import contextlib


def swap_linears(module) -> int:
    """Replace every `nn.Linear` inside the transformer blocks of `module` by a TE Linear holding the
    same weights; returns how many were swapped."""
    import torch
    import torch.nn as nn
    import transformer_engine.pytorch as te
    n = 0
    for block in module.layers.values():
        for name, child in list(block.named_modules()):
            for cname, lin in list(child.named_children()):
                if type(lin) is nn.Linear:
                    new = te.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None,
                                    params_dtype=lin.weight.dtype, device=lin.weight.device)
                    with torch.no_grad():
                        new.weight.copy_(lin.weight)
                        if lin.bias is not None:
                            new.bias.copy_(lin.bias)
                    setattr(child, cname, new)
                    n += 1
    return n


def fp8_ctx():
    """TE's FP8 autocast (delayed scaling, hybrid E4M3/E5M2) inside bf16 autocast."""
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling, Format
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cuda", dtype=torch.bfloat16))
    stack.enter_context(te.fp8_autocast(enabled=True, fp8_recipe=DelayedScaling(fp8_format=Format.HYBRID)))
    return stack
