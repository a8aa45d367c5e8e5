"""Training logs of the frameworks, read in their own formats: measured step time and memory.

Each reader takes the text of a log and returns a `LogMeasurement` (median step time of the
iterations after the first logged one, peak memory per GPU as the framework prints it). The formats
and where each framework writes them:

* Megatron-LM / Megatron-Bridge — `training_log` in megatron/training/training.py (Bridge:
  megatron/bridge/training/utils/train_utils.py) prints one line per `--log-interval`:
  ``iteration 20/ 100 | consumed samples: ... | elapsed time per iteration (ms): 1234.5 |
  throughput per GPU (TFLOP/s/GPU): 456.7 | ...``; the elapsed time is the mean over the interval.
  `report_memory` in megatron/training/utils.py prints, after the first interval,
  ``[Rank 0] (after 20 iterations) memory (MB) | allocated: ... | max allocated: ... |
  reserved: ... | max reserved: ...`` (MB = 2**20 bytes).
* torchtitan — `MetricsProcessor.log` in torchtitan/components/metrics.py:
  ``step: 10  loss: 7.1  grad_norm: 1.2  memory: 14.85GiB(18.69%)  tps: 1,234  tflops: 56.78
  mfu: 5.74%`` (ANSI colours around the fields). tps = tokens per second per device:
  local tokens ÷ (time · non-data-parallel size), so step time = global_batch · seq ÷ (tps · world).
  memory = torch.cuda.max_memory_reserved in GiB.
* DeepSpeed — `ThroughputTimer.stop` in deepspeed/utils/timer.py (every `steps_per_print`):
  ``epoch=0/micro_step=80/global_step=10, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...,
  MemAllocated=1.23GB, MaxMemAllocated=4.56GB``; the timer's batch is `train_batch_size()` (the
  global batch, deepspeed/runtime/engine.py), so step time = global batch ÷ CurrSamplesPerSec;
  memory in GiB (÷ 1024**3, rounded to 2 decimals). `see_memory_usage` (deepspeed/runtime/utils.py)
  lines ``MA 1.2 GB  Max_MA 3.4 GB  CA ... Max_CA ...`` are read as a fallback.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from autoplace.errors import InputError

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NUM = r"([0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?)"

_MEG_ITER = re.compile(r"iteration\s+(\d+)\s*/\s*\d+.*?elapsed time per iteration \(ms\):\s*" + _NUM)
_MEG_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*" + _NUM)
_MEG_MEM = re.compile(r"memory \(MB\)\s*\|\s*allocated:\s*" + _NUM + r"\s*\|\s*max allocated:\s*" + _NUM
                      + r"(?:\s*\|\s*reserved:\s*" + _NUM + r"\s*\|\s*max reserved:\s*" + _NUM + ")?")
_TT_STEP = re.compile(r"step:\s*(\d+)\s+loss:.*?memory:\s*" + _NUM + r"\s*GiB.*?tps:\s*" + _NUM
                      + r"(?:.*?tflops:\s*" + _NUM + r")?(?:.*?mfu:\s*" + _NUM + "%)?")
_DS_TPUT = re.compile(r"global_step=(\d+),\s*RunningAvgSamplesPerSec=" + _NUM + r",\s*CurrSamplesPerSec="
                      + _NUM + r"(?:,\s*MemAllocated=" + _NUM + r"GB,\s*MaxMemAllocated=" + _NUM + "GB)?")
_DS_MEM = re.compile(r"\bMA\s+" + _NUM + r"\s*GB\s+Max_MA\s+" + _NUM + r"\s*GB(?:\s+CA\s+" + _NUM
                     + r"\s*GB\s+Max_CA\s+" + _NUM + r"\s*GB)?")


def _f(s: str | None) -> float | None:
    return None if s is None else float(s.replace(",", ""))


@dataclass
class LogMeasurement:
    """What a training log says about one run."""
    framework: str
    """megatron | torchtitan | deepspeed (the format it was read in)."""
    step_s: float
    """Median step time over the logged intervals after the first (s)."""
    step_s_samples: list = field(default_factory=list)
    """Every logged interval's step time (s), first one included."""
    memory_bytes: float | None = None
    """Peak memory per GPU as the log states it (bytes)."""
    memory_kind: str | None = None
    """'allocated' (torch.cuda.max_memory_allocated) or 'reserved' (max_memory_reserved)."""
    tflops_per_gpu: float | None = None
    """The framework's own TFLOP/s per GPU (its FLOP convention), median; informational."""
    lines: int = 0
    """Log lines that were read."""

    def to_dict(self) -> dict:
        return {"framework": self.framework, "step_s": self.step_s, "step_s_samples": self.step_s_samples,
                "memory_bytes": self.memory_bytes, "memory_kind": self.memory_kind,
                "tflops_per_gpu": self.tflops_per_gpu, "lines": self.lines}


def _steady(samples: list[float]) -> float:
    """Median after dropping the first interval (it holds warm-up: allocator, NCCL init, compile)."""
    use = samples[1:] if len(samples) > 1 else samples
    return float(statistics.median(use))


def detect(text: str) -> str | None:
    t = _ANSI.sub("", text)
    if _MEG_ITER.search(t):
        return "megatron"
    if _TT_STEP.search(t):
        return "torchtitan"
    if _DS_TPUT.search(t):
        return "deepspeed"
    return None


def parse_log(text: str, *, global_batch: int, seq_len: int, world: int,
              framework: str | None = None, where: str = "--from-log") -> LogMeasurement:
    """Read one training log. global_batch (sequences), seq_len and world come from the plan: the
    torchtitan and DeepSpeed lines state throughput, which is turned into a step time with them."""
    t = _ANSI.sub("", text)
    fw = framework or detect(t)
    if fw is None:
        raise InputError(f"{where}: no step-time line of Megatron-LM ('elapsed time per iteration (ms)'), "
                         "torchtitan ('step: … tps: …') or DeepSpeed ('CurrSamplesPerSec=') found; "
                         "pass the rank-0 / last-rank training log")
    if fw not in FRAMEWORKS:
        raise InputError(f"{where}: unknown log format '{fw}'; one of {', '.join(FRAMEWORKS)}")
    return {"megatron": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed}[fw](
        t, global_batch, seq_len, world, where)


def _need(samples, what, where):
    if not samples:
        raise InputError(f"{where}: no {what} line in the log")


def _megatron(t, gb, seq, world, where) -> LogMeasurement:
    samples = [_f(m.group(2)) / 1e3 for m in _MEG_ITER.finditer(t)]
    _need(samples, "'elapsed time per iteration (ms)'", where)
    tf = [_f(m.group(1)) for m in _MEG_TFLOPS.finditer(t)]
    mem, kind = None, None
    mems = list(_MEG_MEM.finditer(t))
    if mems:
        # the largest over ranks: Megatron prints one line per pipeline stage (DP rank 0 of each)
        alloc = max(_f(m.group(2)) for m in mems)
        mem, kind = alloc * 2**20, "allocated"
    return LogMeasurement("megatron", _steady(samples), samples, mem, kind,
                          float(statistics.median(tf[1:] or tf)) if tf else None, len(samples) + len(mems))


def _torchtitan(t, gb, seq, world, where) -> LogMeasurement:
    ms = list(_TT_STEP.finditer(t))
    _need(ms, "'step: … memory: …GiB … tps: …'", where)
    samples = [gb * seq / (_f(m.group(3)) * world) for m in ms]
    mem = max(_f(m.group(2)) for m in ms[1:] or ms) * 2**30
    tf = [_f(m.group(4)) for m in ms if m.group(4)]
    return LogMeasurement("torchtitan", _steady(samples), samples, mem, "reserved",
                          float(statistics.median(tf[1:] or tf)) if tf else None, len(ms))


def _deepspeed(t, gb, seq, world, where) -> LogMeasurement:
    ms = list(_DS_TPUT.finditer(t))
    _need(ms, "'CurrSamplesPerSec='", where)
    samples = [gb / _f(m.group(3)) for m in ms]
    peaks = [_f(m.group(5)) for m in ms if m.group(5)]
    if not peaks:
        peaks = [_f(m.group(2)) for m in _DS_MEM.finditer(t)]
    mem = max(peaks) * 2**30 if peaks else None
    return LogMeasurement("deepspeed", _steady(samples), samples, mem, "allocated" if mem else None,
                          None, len(ms))
