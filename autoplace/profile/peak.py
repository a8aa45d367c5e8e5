"""Peak memory by torch's own accounting (`PeakMemory`): FSDPMemTracker / MemTracker over one step.

Split from `autoplace.profile.measure` (state, saved-tensor and collective counters), which
re-exports it."""

from __future__ import annotations

import torch

_GROUPS = {
    # FSDPMemTracker categories (torch.distributed._tools.fsdp2_mem_tracker._FSDPRefType)
    "Sharded Param": "params", "Unsharded Param": "params", "Sharded Grad": "grads",
    "Unsharded Grad": "grads", "OptState": "optimizer", "Activation": "activations",
    "Inputs": "activations", "Temp": "temporaries", "All Gather": "temporaries",
    "Reduce Scatter": "temporaries", "Buffer": "temporaries",
    # MemTracker categories (torch.distributed._tools.mem_tracker._MemRefType)
    "Parameter": "params", "Gradient": "grads", "Optstate": "optimizer", "Other": "temporaries",
}


class PeakMemory:
    """The peak of allocated tensor memory over one training step, by torch's own tracker.

    `torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker` for FSDP2 runs, else
    `torch.distributed._tools.mem_tracker.MemTracker` with the model chunks and the optimizer
    registered. Both are TorchDispatchModes that follow every tensor storage (weak references,
    `UntypedStorage.resize_` patched, which FSDP2 uses to free unsharded parameters) on any device,
    CPU included, and keep the snapshot of the per-category bytes at the step's peak. Both refuse
    a second forward of the root module within one tracking context (they take it for the next
    iteration): `reset` is called before every micro-batch's forward to clear the per-module
    statistics only — the peak and the live storages are kept. Pipeline schedules call the stage
    modules themselves, so pp > 1 is not tracked (`supported`).

    report(): {tool, peak_bytes, by_category (the tracker's own names), grouped: params (sharded +
    unsharded), grads, optimizer, activations (+ inputs), temporaries (Temp: tensors made in
    backward, all-gather and reduce-scatter buffers, buffers)}.
    """

    def __init__(self, chunks, optimizer, fsdp: bool, device):
        self.device = torch.device(device)
        if fsdp:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
            self.tool = "FSDPMemTracker"
            self.tracker = FSDPMemTracker(chunks[0], getattr(optimizer, "opt", optimizer))
        else:
            from torch.distributed._tools.mem_tracker import MemTracker
            self.tool = "MemTracker"
            self.tracker = MemTracker()
            self.tracker.track_external(*chunks, getattr(optimizer, "opt", optimizer))

    @staticmethod
    def supported(plan) -> bool:
        return plan.pp == 1

    def reset(self, _k=None) -> None:
        self.tracker.reset_mod_stats()

    def __enter__(self):
        self.tracker.__enter__()
        return self

    def __exit__(self, *exc):
        self.tracker.__exit__(*exc)
        return False

    def report(self) -> dict:
        snap = self.tracker.get_tracker_snapshot("peak")
        dev = snap.get(self.device)
        if dev is None:
            dev = next(iter(snap.values()), {})
        by = {}
        total = 0
        for k, v in dev.items():
            name = getattr(k, "value", str(k))
            if name == "Total":
                total = int(v)
                continue
            by[name] = int(v)
        grouped = {g: 0 for g in ("params", "grads", "optimizer", "activations", "temporaries")}
        for name, v in by.items():
            grouped[_GROUPS.get(name, "temporaries")] += v
        return {"tool": self.tool, "peak_bytes": total, "by_category": by, "grouped": grouped}
