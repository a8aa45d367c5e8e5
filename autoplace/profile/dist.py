"""The process group and device mesh of one torchrun rank (what the plan runner and the
calibration worker run on).

`Runtime` here is the torch distributed runtime of this process — rank, world, device, backend —
not a training stack of `autoplace/runtimes/`.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

MESH_AXES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""Device-mesh dimensions, outermost first; ("dp_replicate", "dp_shard") is also flattened to "dp"."""


class Runtime:
    """Rank, world, device and backend of this process (from torchrun's environment)."""

    def __init__(self, backend: str | None = None):
        self.rank = int(os.environ.get("RANK", 0))
        self.world = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if backend is None:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.backend = backend
        if backend == "nccl":
            if not torch.cuda.is_available():
                raise RuntimeError("--backend nccl needs CUDA devices")
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        self.device_type = self.device.type
        self._meshes = {}

    def init(self, timeout_s: float = 300.0) -> None:
        """Join the default process group (once)."""
        if not dist.is_initialized():
            kw = {"backend": self.backend, "timeout": datetime.timedelta(seconds=timeout_s)}
            if self.backend == "nccl":
                kw["device_id"] = self.device
            dist.init_process_group(**kw)

    def mesh(self, shape: tuple):
        """The device mesh of `shape` over MESH_AXES (cached: every rank builds each shape once)."""
        from torch.distributed.device_mesh import init_device_mesh
        if shape not in self._meshes:
            m = init_device_mesh(self.device_type, shape, mesh_dim_names=MESH_AXES)
            m["dp_replicate", "dp_shard"]._flatten("dp")
            self._meshes[shape] = m
        return self._meshes[shape]

    def sync(self) -> None:
        """Wait for the device's queued work (CUDA); a no-op on CPU."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
