"""The fuzz and fault harness shared by `tests/test_fuzz.py` (a fast hypothesis subset in CI) and
`benchmarks/fuzz_campaign.py` (the full campaign): hostile values for every reader (config.json,
hardware TOML, runtime settings, search-space TOML, plan strings, plan.json, CLI numbers, file types)
run through the real command line in-process, each outcome sorted into one class.

Classes: ok (exit 0, every printed number finite and ≥ 0), refused (one `error:` line and a table
exit code), traceback, hang (past the case's bound), bad_number (NaN/inf/negative cost printed with
exit 0), accepted_bad (a value outside its stated domain accepted with exit 0), not_one_line (an error
over several lines or without `error:`), wrong_exit (an exit code not in the table), injected (a
canary command ran).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from autoplace.errors import EXIT_CODES, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("ok", "refused", "traceback", "hang", "bad_number", "accepted_bad", "not_one_line", "wrong_exit",
           "injected")
BAD = ("traceback", "hang", "bad_number", "accepted_bad", "not_one_line", "wrong_exit", "injected")

# ---- hostile values -------------------------------------------------------------------------------
BAD_NUMBERS = [-1, 0, -0.5, -1e30, 1e30, 2**63, 2**64 + 1, 10**40, float("inf"), float("-inf"), float("nan"),
               "12", "", None, [], {}, True, 1e-300]
"""Values outside any count's or size's domain (0 is outside for positive fields only)."""
NAMES = ["m\ntouch PWNED", 'm"""\nimport os', "m\x1b[31m", "x" * 5000, "", "m\u2028n", "$(touch PWNED)"]

LLAMA_CFG = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
             "num_key_value_heads": 8, "num_hidden_layers": 8, "vocab_size": 32000,
             "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": False}
POSITIVE_CFG = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size")


@dataclass
class Case:
    """One command line; `expect_error`: True when the input is outside its stated domain (must be
    refused), None when either outcome is fine."""
    kind: str
    args: list
    expect_error: bool | None = None
    bound_s: float = 30.0
    files: dict = field(default_factory=dict)      # name → text written into the case's folder first
    canary: bool = False
    note: str = ""

    def label(self) -> str:
        return f"{self.kind}{' ' + self.note if self.note else ''}: {' '.join(map(str, self.args))[:160]!r}"


@dataclass
class Outcome:
    cls: str
    case: Case
    detail: str = ""


# ---- running --------------------------------------------------------------------------------------
class _Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise _Hang()


_NUM = re.compile(r"(?<![\w.])(nan|-?inf(inity)?)(?![\w])", re.I)


def _numbers(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, obj


_COST_KEYS = re.compile(r"(step_s|_bytes|bytes_per_step|tokens_per_s|mfu|hfu|tflops|breakdown_s|\.total$|"
                        r"\.time\.|\.memory\.|step_time)")


def bad_numbers(stdout: str) -> list[str]:
    """Non-finite numbers anywhere, and negative cost numbers, in a command's output (JSON or text)."""
    out = []
    try:
        doc = json.loads(stdout)
    except (json.JSONDecodeError, ValueError):
        doc = None
    if doc is not None:
        for p, v in _numbers(doc):
            if isinstance(v, float) and not math.isfinite(v):
                out.append(f"{p}={v}")
            elif v < -1e-9 and _COST_KEYS.search(p):
                out.append(f"{p}={v}")
    else:
        out += [m.group(0) for m in _NUM.finditer(stdout)]
    if "NaN" in stdout or "Infinity" in stdout:
        out.append("NaN/Infinity in output")
    return out


def run_case(case: Case, workdir: Path) -> Outcome:
    """Run `case` in-process through the CLI (typer's CliRunner) under a SIGALRM bound."""
    from typer.testing import CliRunner

    from autoplace.cli import app
    d = Path(tempfile.mkdtemp(dir=workdir))
    for name, text in case.files.items():
        (d / name).write_text(text)
    prepare(case, d)
    args = [str(a).replace("{dir}", str(d)) for a in case.args]
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, case.bound_s)
    cwd = os.getcwd()
    try:
        os.chdir(d)
        r = CliRunner().invoke(app, args)
    except _Hang:
        return Outcome("hang", case, f"> {case.bound_s:g} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    if isinstance(r.exception, _Hang):
        return Outcome("hang", case, f"> {case.bound_s:g} s")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        return Outcome("traceback", case, f"{type(r.exception).__name__}: {str(r.exception)[:200]}")
    if "Traceback (most recent call last)" in r.output:
        return Outcome("traceback", case, r.output[-300:])
    if case.canary and (d / "PWNED").exists():
        return Outcome("injected", case)
    if case.canary:
        hit = _run_emitted(d)
        if hit:
            return Outcome("injected", case, hit)
    code = r.exit_code
    if code not in EXIT_CODES:
        return Outcome("wrong_exit", case, f"exit {code}: {r.stderr[-200:]}")
    if code == 0:
        bad = bad_numbers(r.stdout)
        if bad:
            return Outcome("bad_number", case, "; ".join(bad[:3]))
        if case.expect_error:
            return Outcome("accepted_bad", case, r.stdout[-200:])
        return Outcome("ok", case)
    err = r.stderr.strip()
    if not err and "--json" in args:          # a --json document instead of the line (e.g. does not fit)
        try:
            json.loads(r.stdout)
            bad = bad_numbers(r.stdout)
            return Outcome("bad_number", case, "; ".join(bad[:3])) if bad else Outcome("refused", case)
        except ValueError:
            pass
    if code != EXIT_USAGE and (err.count("\n") or not err.startswith("error:")):
        return Outcome("not_one_line", case, err[:300])
    if re.search(r"\x1b|[\x00-\x08\x0b-\x1f]", err):
        return Outcome("not_one_line", case, "control characters in the error line")
    return Outcome("refused", case)


def _run_emitted(folder: Path) -> str:
    """Run every script an --emit wrote (stub launchers); the name of one that ran the canary."""
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    from test_input_safety import _run_everything
    for sub in folder.rglob("export_manifest.json"):
        hits = _run_everything(sub.parent, Path(tempfile.mkdtemp(dir=folder)))
        if hits:
            return ", ".join(hits)
    return ""


# ---- case generators (each takes a random.Random; used by hypothesis and by the campaign) ----------
EST = ["estimate", "--gpus", "8", "--plan", "tp=2,zero=1", "--json"]


def cfg_case(rng) -> Case:
    cfg = copy.deepcopy(LLAMA_CFG)
    key = rng.choice(list(cfg) + ["_name_or_path", "num_experts", "head_dim", "sliding_window"])
    val = rng.choice(BAD_NUMBERS + NAMES + [rng.randint(-5, 5), rng.randint(1, 2**70)])
    cfg[key] = val
    expect = None
    if key in POSITIVE_CFG and (not isinstance(val, int) or isinstance(val, bool) or val < 1 or val > 2**27):
        expect = True
    text = json.dumps(cfg, allow_nan=True)
    return Case("config.json", EST + ["--model", "{dir}/m.json"], expect, files={"m.json": text},
                note=f"{key}={str(val)[:40]!r}")


HW_KEYS = {"memory": ["memory_gib", "hbm_bw_gbps"], "peak_tflops": ["bf16", "fp32"],
           "compute": ["sustained_factor", "gemm_efficiency", "gemm_tile", "sm_count", "kernel_overhead_us"],
           "network": ["intra_bw_gbps", "inter_bw_gbps", "intra_latency_us", "inter_latency_us"],
           "overheads": ["step_overhead_ms", "cuda_context_gib", "comm_buffer_gib"]}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if v is None or isinstance(v, (list, dict)):
        return "[]" if isinstance(v, list) or v is None else "{}"
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


def hw_case(rng) -> Case:
    base = (ROOT / "hardware_profiles" / "h100-sxm-80gb.toml").read_text()
    sec = rng.choice(list(HW_KEYS))
    key = rng.choice(HW_KEYS[sec])
    val = rng.choice(BAD_NUMBERS)
    lines, out, cur, done = base.splitlines(), [], "", False
    for ln in lines:
        m = re.match(r"^\[(\w+)\]", ln)
        if m:
            cur = m.group(1)
        if cur == sec and re.match(rf"^{key}\s*=", ln):
            ln, done = f"{key} = {_toml_value(val)}", True
        out.append(ln)
    if not done:
        out.append(f"\n[{sec}]\n{key} = {_toml_value(val)}")
    expect = not (isinstance(val, float) and val == 1e-300 and key not in ("gemm_tile", "sm_count"))
    if val == 0 and key in ("step_overhead_ms", "cuda_context_gib", "comm_buffer_gib", "intra_latency_us",
                            "inter_latency_us", "kernel_overhead_us"):
        expect = None
    if val == 1e30 and key.endswith("_gib"):
        expect = True
    return Case("hardware", ["estimate", "--model", "llama-tiny", "--gpus", "8", "--plan", "tp=2,zero=1", "--json",
                             "--hardware", "{dir}/hw.toml"], expect or None, files={"hw.toml": "\n".join(out)},
                note=f"[{sec}] {key}={str(val)[:40]!r}")


RUNTIME_KEYS = ["comm.a2a_efficiency", "memory.reserve_frac", "kernels.rmsnorm_passes", "comm.dp_comm_sms",
                "defaults.micro_batch", "memory.fsdp_prefetch_units"]


def runtime_case(rng) -> Case:
    key = rng.choice(RUNTIME_KEYS)
    val = rng.choice(["-1", "nan", "inf", "-inf", "1e400", "'x'", "[]", "-0.5", str(2**70), "0", "1"])
    expect = True if val not in ("0", "1") else None
    if val == "0" and key not in ("comm.a2a_efficiency", "defaults.micro_batch"):
        expect = None
    return Case("runtime-set", ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--plan", "tp=2,ep=8,zero=1",
                                "--json", "--runtime-set", f"{key}={val}"], expect)


PLAN_KEYS = ["tp", "pp", "vpp", "cp", "ep", "etp", "dp", "mbs", "zero", "recompute_layers", "offload_fraction",
             "dp_bucket_mb", "pp_flushes", "layer_split", "recompute_modules", "dp_modes"]


def plan_string_case(rng) -> Case:
    key = rng.choice(PLAN_KEYS)
    val = rng.choice(["-1", "0", "nan", "inf", "1e400", str(2**64), str(10**30), "x", "", "1:2:-3", "\x1b[31m",
                      "core_attn+bogus", "2"])
    return Case("plan", ["estimate", "--model", "llama-tiny", "--gpus", "8", "--json", "--plan", f"{key}={val}"])


def plan_json_case(rng) -> Case:
    from autoplace.export import plan_document
    from autoplace.plan import parse_plan
    from autoplace.specs.hardware import load_hardware
    from autoplace.specs.presets import get_preset
    from autoplace.specs.training import TrainingSpec
    doc = json.loads(json.dumps(plan_document(get_preset("llama-tiny"), load_hardware("h100-sxm-80gb"),
                                              TrainingSpec(seq_len=512, global_batch=16),
                                              parse_plan("tp=2,zero=1"), 8)))
    sec = rng.choice(["model", "plan", "training", "cluster", "hardware"])
    tgt = doc["cluster"]["hardware"] if sec == "hardware" else doc[sec]
    key = rng.choice([k for k in tgt if k not in ("source", "notes")])
    val = rng.choice(BAD_NUMBERS + NAMES + [["core_attn", "bogus"], [[[[1]]]]])
    tgt[key] = val
    expect = None
    if isinstance(val, float) and not math.isfinite(val):
        expect = True
    if isinstance(val, str) and key == "name" and re.search(r"[\x00-\x1f\u2028\x1b]", val):
        expect = True
    text = json.dumps(doc, allow_nan=True)
    cmd = rng.choice([["estimate", "--json", "--plan-file", "{dir}/plan.json"],
                      ["export", "--plan-file", "{dir}/plan.json", "--out", "{dir}/out"]])
    return Case("plan.json", cmd, expect, files={"plan.json": text}, canary="export" in cmd,
                note=f"{sec}.{key}={str(val)[:40]!r}")


CLI_OPTS = {
    "search": (["search", "--model", "llama-tiny", "--gpus", "8"],
               ["--gpus", "--top-k", "--memory-headroom", "--trials", "--seq-len", "--global-batch",
                "--global-batch-tokens", "--gpus-per-node", "--workers"]),
    "estimate": (["estimate", "--model", "llama-tiny", "--gpus", "8", "--plan", "tp=2"],
                 ["--gpus", "--memory-headroom", "--seq-len", "--global-batch", "--largest-layer"]),
    "profile": (["profile", "--model", "llama-tiny", "--plan", "tp=1"],
                ["--gpus", "--timeout", "--steps", "--warmup", "--lr", "--seq-len", "--global-batch"]),
}
CLI_BAD = ["-1", "0", "nan", "inf", "-inf", "1e400", str(2**64), str(10**12), "1e9", "2000000000", "-0.5", "x"]


def _in_domain(cmd: str, opt: str, val: str) -> bool:
    """Whether `val` lies in the stated domain of `opt` (the table on the input-safety page)."""
    from autoplace.safe import CLI_NUMBERS, CLI_OVERRIDES
    dom = next((d for (c, k), d in CLI_OVERRIDES.items() if c == cmd and d[0] == opt), None) \
        or next(d for d in CLI_NUMBERS.values() if d[0] == opt)
    _, lo, hi, is_int, lo_open = dom
    try:
        x = float(val)
    except ValueError:
        return False
    if not math.isfinite(x) or (is_int and (x != int(x) or not re.fullmatch(r"-?\d+", val))):
        return False
    return (x > lo if lo_open else x >= lo) and x <= hi


def cli_case(rng) -> Case:
    cmd = rng.choice(list(CLI_OPTS))
    base, opts = CLI_OPTS[cmd]
    opt = rng.choice(opts)
    val = rng.choice(CLI_BAD)
    args = [a for a in base]
    if opt in args:
        i = args.index(opt)
        del args[i:i + 2]
    args += [opt, val]
    expect = None if _in_domain(cmd, opt, val) else True
    if cmd == "profile" and expect is None:
        return cli_case(rng)          # never launch real runs from the fuzzer
    return Case("cli", args + (["--json"] if cmd != "profile" else []), expect, bound_s=60.0)


def space_case(rng) -> Case:
    knob = rng.choice(["tp", "pp", "mbs", "vpp", "zero", "offload_fraction", "recompute_layers", "vpp_group"])
    val = rng.choice(["-1", "0", "[1e400]", str(2**64), "[1, 2, 999999999]", "{ min = 1, max = 99999999999 }",
                      "nan", "'x'", "[]", "[" + ", ".join(["2"] * 20000) + "]", "{ min = 0 }"])
    text = f'[knobs]\n{knob} = {val}\n'
    return Case("space", ["search", "--model", "llama-tiny", "--gpus", "8", "--json", "--space", "{dir}/s.toml"],
                None if (knob, val) == ("zero", "0") else True, files={"s.toml": text}, bound_s=60.0, note=f"{knob}={val[:40]}")


def file_case(rng) -> Case:
    opt, kind = rng.choice([("--model", "cfg"), ("--hardware", "toml"), ("--space", "toml"), ("--plan-file", "json")])
    what = rng.choice(["fifo", "devzero", "dir", "huge", "deep", "longpath", "binary", "missing"])
    files: dict = {}
    target = {"fifo": "{dir}/fifo", "devzero": "/dev/zero", "dir": "{dir}", "longpath": "/" + "a/" * 3000 + "x.json",
              "missing": "{dir}/nope.json"}.get(what, "{dir}/f." + ("toml" if kind == "toml" else "json"))
    if what == "huge":
        files["f.json" if kind != "toml" else "f.toml"] = " " * (17 << 20) + "{}"
    elif what == "deep":
        files["f.json" if kind != "toml" else "f.toml"] = "[" * 100_000 + "]" * 100_000
    elif what == "binary":
        files["f.json" if kind != "toml" else "f.toml"] = "\x00\x01\x02\xff"
    base = {"--model": ["estimate", "--gpus", "8", "--plan", "tp=1", "--json"],
            "--hardware": ["estimate", "--model", "llama-tiny", "--gpus", "8", "--plan", "tp=1", "--json"],
            "--space": ["search", "--model", "llama-tiny", "--gpus", "8", "--json"],
            "--plan-file": ["estimate", "--json"]}[opt]
    c = Case("file", base + [opt, target], True, files=files, bound_s=20.0)
    if what == "fifo":
        c.files = {}
        c.args = c.args[:-1] + ["{dir}/fifo"]
        c.kind = "file-fifo"
    return c


def name_case(rng) -> Case:
    name = rng.choice(NAMES)
    cfg = dict(LLAMA_CFG, _name_or_path=name)
    return Case("injection", ["search", "--model", "{dir}/cfg.json", "--gpus", "8", "--top-k", "1", "--emit",
                              "{dir}/emit"], None, files={"cfg.json": json.dumps(cfg)}, canary=True, bound_s=120.0)


def sweep_case(rng) -> Case:
    opt = rng.choice(["--gpus", "--seq-len", "--global-batch", "--tokens", "--price-per-gpu-hour", "--deadline"])
    val = rng.choice(["nan", "inf", "1e400", "-1", "0", "64..100000000000", "1..1000000:+1", "64,-8", "x", "",
                      str(2**70), "1e9"])
    args = ["sweep", "--model", "llama-tiny", "--json"] + (["--gpus", "8"] if opt != "--gpus" else []) + [opt, val]
    valid = (opt == "--price-per-gpu-hour" and val in ("0", "1e9")) or (opt == "--tokens" and val == "1e9")
    return Case("sweep", args, None if valid else True, bound_s=60.0, note=f"{opt}={val}")


GENERATORS = {"config.json": cfg_case, "hardware": hw_case, "runtime-set": runtime_case, "plan": plan_string_case,
              "plan.json": plan_json_case, "cli": cli_case, "space": space_case, "file": file_case, "sweep": sweep_case,
              "injection": name_case}


def prepare(case: Case, d: Path) -> None:
    """Special files a case needs (a FIFO) in its folder."""
    if case.kind == "file-fifo":
        os.mkfifo(d / "fifo")
