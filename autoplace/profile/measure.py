"""What a rank holds and sends: state bytes, activations saved for backward, collective bytes.

* `state_bytes(model, optimizer)`: parameters, gradients and optimizer state as the sum of LOCAL
  shard sizes (`DTensor.to_local()`), counting each byte of memory once: tensors are grouped by
  storage and the union of their [offset, offset+numel) ranges is counted (DDP gradient bucket views,
  ZeRO-1/2 shard views into the full parameters/gradients are not double-counted). Optimizer state
  is every tensor in `optimizer.state` except Adam's per-tensor `step` counters (one scalar each).
* `SavedTensorCounter`: a `torch.autograd.graph.saved_tensors_hooks` pair. pack() registers the
  tensor's storage (unique storages, reference counted; DTensors are unwrapped to their local
  tensor; tensors whose root is a leaf requiring grad — parameters, FSDP's unsharded parameters —
  are not activations and are skipped); the holder it returns releases the storage when autograd
  frees the saved variable. The counter reports the PEAK of live saved bytes over the step, so a
  pipeline schedule's in-flight micro-batches are counted as they really overlap. Regions (`region`)
  split the total into per-layer activations and the head (final norm, logits, loss). Outputs kept
  by op-level selective checkpointing live in torch's SAC cache, not in autograd's saved variables:
  the policy reports them (`note_cached`) and they count until their storage is freed.
* `CommCounter`: a TorchDispatchMode that sees every c10d op (`torch.ops.c10d.*`: what
  `torch.distributed.*`, DDP's C++ reducer, FSDP2 and pipelining's P2P issue) and every functional
  collective (`torch.ops._c10d_functional.*`: DTensor redistributions, loss_parallel), like
  `CommDebugMode` (it returns NotImplemented for DTensor arguments so DTensor first desugars into
  collectives). Each is attributed to a mesh axis by its process group name and converted to
  bytes sent per rank with the bus-bandwidth factors of autoplace.cost.comm: AR 2(n−1)/n·S,
  AG/RS/A2A (n−1)/n·S (S = the full buffer), P2P send S.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover - torch without DTensor
    DTensor = ()


try:
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
except ImportError:  # pragma: no cover
    AsyncCollectiveTensor = ()


def _local(t):
    """The plain tensor holding a DTensor's local shard / an async collective's result."""
    for _ in range(4):
        if DTensor and isinstance(t, DTensor):
            t = t._local_tensor
        elif AsyncCollectiveTensor and isinstance(t, AsyncCollectiveTensor):
            t = t.elem
        else:
            break
    return t


# ---- state bytes -------------------------------------------------------------------------------
class _ByteUnion:
    """Bytes of memory covered by a set of tensors, each byte once (grouped by storage)."""

    def __init__(self):
        self.ranges = defaultdict(list)   # storage ptr → [(start_byte, end_byte)]

    def add(self, t):
        if t is None:
            return
        t = _local(t)
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            return
        try:
            st = t.untyped_storage()
            key = (str(t.device), st.data_ptr())
        except (RuntimeError, NotImplementedError):  # a wrapper subclass without its own storage
            key = ("id", id(t))
        es = t.element_size()
        start = t.storage_offset() * es
        if t.is_contiguous():
            end = start + t.numel() * es
        else:  # strided view: span of the addressed elements
            span = 1 + sum((s - 1) * st_ for s, st_ in zip(t.shape, t.stride()))
            end = start + span * es
        self.ranges[key].append((start, end))

    def total(self) -> int:
        n = 0
        for rs in self.ranges.values():
            rs.sort()
            cur_s, cur_e = rs[0]
            for s, e in rs[1:]:
                if s > cur_e:
                    n += cur_e - cur_s
                    cur_s, cur_e = s, e
                else:
                    cur_e = max(cur_e, e)
            n += cur_e - cur_s
        return n


def state_bytes(modules, optimizers, extra_grads=(), device_only: str | None = None,
                params=None) -> dict:
    """{params, grads, optimizer} bytes held by this rank (local shards, each byte once).

    modules: iterable of nn.Module (pipeline chunks); optimizers: iterable of optimizers (their
    param_groups' params and .grad are included, so ZeRO shard parameters/gradients are counted).
    device_only: count only tensors on this device type (e.g. "cuda" when state is offloaded).
    """
    held_p, held_g, held_o = _ByteUnion(), _ByteUnion(), _ByteUnion()

    def keep(t):
        if t is None:
            return False
        if device_only is None:
            return True
        return _local(t).device.type == device_only

    plist = list(params) if params is not None else [p for m in modules for p in m.parameters()]
    for p in plist:
        if keep(p):
            held_p.add(p)
        if keep(p.grad):
            held_g.add(p.grad)
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                if keep(p):
                    held_p.add(p)
                if keep(p.grad):
                    held_g.add(p.grad)
        for st in opt.state.values():
            for k, v in st.items():
                if k == "step" or not isinstance(v, torch.Tensor):
                    continue
                if keep(v):
                    held_o.add(v)
    for g in extra_grads:
        if keep(g):
            held_g.add(g)
    return {"params": held_p.total(), "grads": held_g.total(), "optimizer": held_o.total()}


# ---- saved tensors -----------------------------------------------------------------------------
def _storage_key(t):
    t = _local(t)
    try:
        return (str(t.device), t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a wrapper subclass without its own storage
        return None


def _is_param_like(t, excluded=()) -> bool:
    """A parameter (or a view of one, or a tensor sharing a parameter's or buffer's storage)."""
    import torch.nn as nn
    for x in (t, _local(t)):
        base = x._base if x._base is not None else x
        if isinstance(base, nn.Parameter) or isinstance(x, nn.Parameter):
            return True
    if excluded:
        k = _storage_key(t)
        if k is not None and k in excluded:
            return True
    return False


class _Holder:
    __slots__ = ("t", "key", "counter", "region")

    def __init__(self, t, key, counter, region):
        self.t, self.key, self.counter, self.region = t, key, counter, region

    def __del__(self):
        c = self.counter
        if c is not None and self.key is not None:
            c._release(self.key, self.region)


class SavedTensorCounter:
    """Peak bytes of activations saved for backward (unique storages), optionally by region."""

    def __init__(self):
        self.live = defaultdict(lambda: [0, 0])    # (region, storage key) → [refcount, nbytes]
        self.live_bytes = defaultdict(int)          # region → bytes
        self.peak = defaultdict(int)                 # region → peak bytes
        self.peak_total = 0
        self.total_live = 0
        self._region = threading.local()
        self.n_saved = 0
        self.active = False
        self.excluded = set()      # storages of parameters and buffers (not activations)

    def exclude_module_state(self, modules, tensors=()) -> None:
        """Storages of the modules' parameters and buffers (DTensor local shards included), and of
        `tensors`, are never activations: weights saved by linear layers, RoPE tables, etc."""
        ts = list(tensors)
        for m in modules:
            ts += list(m.parameters()) + list(m.buffers())
        for t in ts:
            k = _storage_key(t)
            if k is not None:
                self.excluded.add(k)

    # regions ---------------------------------------------------------------------------------
    @property
    def region_name(self) -> str:
        return getattr(self._region, "name", "body")

    @contextlib.contextmanager
    def region(self, name: str):
        old = self.region_name
        self._region.name = name
        try:
            yield
        finally:
            self._region.name = old

    # hooks -----------------------------------------------------------------------------------
    def _register(self, t):
        """Count t's storage as live in the current region; (key, region, storage or None)."""
        lt = _local(t)
        try:
            st = lt.untyped_storage()
            key = (str(lt.device), st.data_ptr())
            nbytes = st.nbytes()
        except (RuntimeError, NotImplementedError):  # a wrapper subclass without its own storage
            st, key, nbytes = None, ("id", id(lt)), lt.numel() * lt.element_size()
        region = self.region_name
        k = (region, key)
        ent = self.live[k]
        if ent[0] == 0:
            ent[1] = nbytes
            self.live_bytes[region] += nbytes
            self.total_live += nbytes
            self.peak[region] = max(self.peak[region], self.live_bytes[region])
            self.peak_total = max(self.peak_total, self.total_live)
        ent[0] += 1
        self.n_saved += 1
        return k, region, st

    def _pack(self, t):
        if not self.active or not isinstance(t, torch.Tensor) or _is_param_like(t, self.excluded):
            return _Holder(t, None, None, None)
        k, region, _ = self._register(t)
        return _Holder(t, k, self, region)

    def note_cached(self, out) -> None:
        """Tensors kept by selective activation checkpointing (op-level SAC keeps an op's output in
        its own cache, which saved-tensor hooks never see): counted from now until their storage is
        freed (after the backward has consumed the cached value)."""
        if not self.active:
            return
        import weakref
        for t in _tensors(out):
            if _is_param_like(t, self.excluded):
                continue
            k, region, st = self._register(t)
            if st is not None:      # without a storage object to watch it counts to the step's end
                weakref.finalize(st, self._release, k, region)

    @staticmethod
    def _unpack(h):
        return h.t

    def _release(self, k, region):
        ent = self.live.get(k)
        if ent is None:
            return
        ent[0] -= 1
        if ent[0] == 0:
            self.live_bytes[region] -= ent[1]
            self.total_live -= ent[1]
            del self.live[k]

    @contextlib.contextmanager
    def hooks(self):
        self.active = True
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield self
        finally:
            self.active = False

    def report(self) -> dict:
        return {"peak_total": int(self.peak_total),
                "peak_by_region": {k: int(v) for k, v in self.peak.items()},
                "n_saved": self.n_saved}


_ACTIVE: list = []


@contextlib.contextmanager
def use_counter(counter):
    """Make `counter` the one `region()` talks to (the model marks its head region)."""
    _ACTIVE.append(counter)
    try:
        yield counter
    finally:
        _ACTIVE.remove(counter)


def note_cached(out) -> None:
    """Report tensors kept by selective activation checkpointing to the active counter (no-op when
    nothing is counting)."""
    if _ACTIVE:
        _ACTIVE[-1].note_cached(out)


@contextlib.contextmanager
def region(name: str):
    """Attribute tensors saved inside to region `name` (no-op when nothing is counting)."""
    if not _ACTIVE:
        yield
        return
    with _ACTIVE[-1].region(name):
        yield


# ---- collectives -------------------------------------------------------------------------------
_AR = {"allreduce_", "allreduce_coalesced_", "all_reduce", "all_reduce_", "all_reduce_coalesced",
       "all_reduce_coalesced_"}
_AG = {"allgather_", "_allgather_base_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
       "all_gather_into_tensor", "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced"}
_RS = {"reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
       "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "reduce_scatter_tensor_out"}
_A2A = {"alltoall_", "alltoall_base_", "all_to_all_single"}
_BCAST = {"broadcast_", "broadcast"}
_SEND = {"send"}
_RECV = {"recv_", "recv_any_source_"}


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        out = []
        for y in x:
            out += _tensors(y)
        return out
    return []


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _group_name(args, kwargs):
    """The process group of a c10d op (ScriptObject) or functional collective (group_name str)."""
    import torch.distributed as dist
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.ScriptObject):
            try:
                pg = dist.ProcessGroup.unbox(a)
                return pg.group_name, pg.size()
            except (RuntimeError, TypeError):  # a script object that is not a ProcessGroup
                continue
    return None, None


class CommCounter(TorchDispatchMode):
    """Count collectives per mesh axis (bytes sent per rank, bus-bandwidth convention)."""

    def __init__(self, axis_of_group: dict, group_sizes: dict | None = None,
                 axis_of_ranks: dict | None = None):
        super().__init__()
        self.axis_of_group = dict(axis_of_group)      # group_name → axis
        self.axis_of_ranks = dict(axis_of_ranks or {})  # frozenset(global ranks) → axis
        self.group_sizes = dict(group_sizes or {})     # group_name → size
        self.bytes = defaultdict(float)                # axis → bytes sent (bus convention)
        self.ops = defaultdict(lambda: defaultdict(lambda: [0, 0]))  # axis → op → [count, S bytes]
        self.recv_bytes = defaultdict(float)
        self.log = None            # set to a list to record (axis, kind, S, n) per collective

    def _axis(self, name):
        if name is None:
            return "unknown"
        ax = self.axis_of_group.get(str(name))
        if ax is not None:
            return ax
        # a group created elsewhere (a sub-mesh, a library) with the same members as a mesh axis
        try:
            import torch.distributed as dist
            from torch.distributed.distributed_c10d import _resolve_process_group
            ranks = frozenset(dist.get_process_group_ranks(_resolve_process_group(str(name))))
            ax = self.axis_of_ranks.get(ranks)
        except (RuntimeError, TypeError, ValueError):  # not a registered group name
            ax = None
        ax = ax or f"group:{name}"
        self.axis_of_group[str(name)] = ax
        return ax

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **kwargs)
        if DTensor and any(t is DTensor or (isinstance(t, type) and issubclass(t, DTensor))
                           for t in types):
            return NotImplemented
        ns = getattr(func, "namespace", "")
        if ns in ("c10d", "_c10d_functional"):
            try:
                self._record(ns, func, args, kwargs)
            except Exception:  # noqa: BLE001 - deliberate, see below
                # Accounting runs inside the training step's own collective call: an op it cannot
                # parse must not break the run being measured. It is counted under "unknown" in the
                # record's `collectives`, and the exact-bytes checks (tests/test_profile_dist.py)
                # fail when counting goes wrong.
                self.ops["unknown"][str(func)][0] += 1
        return func(*args, **kwargs)

    def _record(self, ns, func, args, kwargs):
        op = func._schema.name.split("::")[-1]
        if ns == "_c10d_functional":
            gname = None
            gsize = None
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, str) and a in self.axis_of_group:
                    gname = a
            if gname is None:  # last str argument is the group name
                strs = [a for a in args if isinstance(a, str)]
                gname = strs[-1] if strs else None
            gsize = self.group_sizes.get(gname)
            if gsize is None:
                import torch.distributed as dist
                try:
                    from torch.distributed.distributed_c10d import _resolve_process_group
                    gsize = dist.get_world_size(_resolve_process_group(gname))
                except (RuntimeError, TypeError, ValueError):  # not a registered group name
                    gsize = 1
        else:
            gname, gsize = _group_name(args, kwargs)
        n = max(int(gsize or 1), 1)
        axis = self._axis(gname)
        ts = _tensors(args[0]) if args else []
        if op in _AR:
            S = _nbytes(ts)
            sent = 2.0 * (n - 1) / n * S
            kind = "all_reduce"
        elif op in _AG:
            # c10d: (output(s), input(s), ...); functional: (input, group_size, group_name)
            if ns == "c10d":
                S = _nbytes(ts)
            else:
                S = _nbytes(ts) * n
            sent = (n - 1) / n * S
            kind = "all_gather"
        elif op in _RS:
            if ns == "c10d":
                S = _nbytes(_tensors(args[1])) if len(args) > 1 else 0
            else:
                S = _nbytes(ts)
            sent = (n - 1) / n * S
            kind = "reduce_scatter"
        elif op in _A2A:
            S = _nbytes(_tensors(args[1])) if (ns == "c10d" and len(args) > 1) else _nbytes(ts)
            sent = (n - 1) / n * S
            kind = "all_to_all"
        elif op in _BCAST:
            S = _nbytes(ts)
            sent = S
            kind = "broadcast"
        elif op in _SEND:
            S = _nbytes(ts)
            sent = S
            kind = "send"
        elif op in _RECV:
            S = _nbytes(ts)
            self.recv_bytes[axis] += S
            self.ops[axis]["recv"][0] += 1
            self.ops[axis]["recv"][1] += S
            return
        else:
            if op not in ("wait_tensor", "barrier", "monitored_barrier_", "_wrap_tensor_autograd"):
                self.ops[axis][op][0] += 1
            return
        if self.log is not None:
            self.log.append((axis, kind, S, n))
        if n > 1 or kind in ("send",):
            self.bytes[axis] += sent
        self.ops[axis][kind][0] += 1
        self.ops[axis][kind][1] += S

    def report(self) -> dict:
        return {"bytes": {k: float(v) for k, v in self.bytes.items()},
                "ops": {ax: {op: {"count": c, "bytes": b} for op, (c, b) in d.items()}
                        for ax, d in self.ops.items()},
                "recv_bytes": {k: float(v) for k, v in self.recv_bytes.items()}}
