"""SwiGLU as one autograd function (silu(gate) · up, saving only gate and up): the dense MLP of the
plan runner (profile.model) and its MoE experts (profile.moe) share it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _SwiGLUFn(torch.autograd.Function):
    """silu(gate) · up, saving only gate and up."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, go):
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        silu = gate * sig
        d_up = go * silu
        d_gate = go * up * sig * (1 + gate * (1 - sig))
        return d_gate, d_up


def swiglu(gate, up):
    """silu(gate) · up; the backward recomputes the sigmoid from the saved inputs."""
    return _SwiGLUFn.apply(gate, up)
