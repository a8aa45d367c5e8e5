"""Every file `autoplace search --launcher L --emit DIR` writes, fed to L's own parser / config classes.

The grid: presets × {8, 64, 256, 1024} GPUs × the runtime switches × launchers. Each point is the CLI
search itself (run in-process: `autoplace search --model M --gpus N -l L --emit DIR --json [switch]`);
a non-zero exit is autoplace refusing the point (the one-line reason is kept); the files of a zero
exit go to each version's own code:

  megatron     megatron-core 0.16.1 (the pinned one) TransformerConfig / DDP config / rank grid
               (tests/test_export_launchers.py::_check_megatron), and Megatron-LM's own
               `parse_args` + `validate_args` at each tag of launchers.MEGATRON_LM_TAGS (the pinned
               megatron-core's release and the current one) on the folder (flags, the launch script's
               default data/training flags, megatron_env.sh)
  deepspeed    DeepSpeedConfig (what `deepspeed.initialize` builds from the file; the engine itself on
               a tiny model is tests/test_deepspeed_initialize.py)
  torchtitan   0.2.2: ConfigManager on the TOML + overrides, ParallelDims; 0.3: ConfigManager on the
               Python job module (or the exporter's one-line refusal for 0.3)
  accelerate   its config loader + ParallelismConfig + the FSDP plugin

    PYTHONPATH=. .venv/bin/python benchmarks/launcher_matrix.py [--quick] [--rows]

A search that runs past SEARCH_LIMIT_S is counted as not finished (llama3-405b on 64 GPUs under
Megatron takes minutes: a search-speed matter, reported apart from the files).

Prints a markdown table per launcher and version: files checked, accepted, refused by autoplace
(with reasons), rejected by the launcher (with the error). tests/test_launcher_matrix.py runs a
subset in CI (every launcher, version and switch at least once).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

PRESETS = ("13b", "70b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3",
           "gpt-oss-20b")
QUICK = ("13b", "llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b")
WORLDS = (8, 64, 256, 1024)
SEARCH_LIMIT_S = 60      # a search still running after this is counted "did not finish" (not a file)
LAUNCHERS = ("megatron", "deepspeed", "torchtitan", "accelerate")
# (label, extra CLI words, MoE models only): the runtime switches (autoplace.runtimes.switches) and FP8
SWITCHES = (
    ("bf16", (), False),
    ("fp8", ("--precision", "fp8"), False),
    ("fp8-attention", ("--precision", "fp8", "--runtime-set", "fp8_attention=true"), False),
    ("cuda-graphs", ("--runtime-set", "cuda_graphs=true"), False),
    ("cuda-graphs-full", ("--runtime-set", "cuda_graphs=full_iteration"), False),
    ("allgather", ("--runtime-set", "moe_dispatch=allgather"), True),
    ("deepep", ("--runtime-set", "moe_dispatch=deepep"), True),
    ("hybridep", ("--runtime-set", "moe_dispatch=hybridep"), True),
    ("fused-moe-mlp", ("--runtime-set", "moe_fused_mlp=true"), True),
)
MOE = {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "mixtral-8x22b", "qwen3-235b-a22b",
       "kimi-k2", "gpt-oss-120b"}


@dataclass
class Point:
    launcher: str
    model: str
    world: int
    switch: str
    exit: int = -1
    plan: str = ""
    refused: str = ""                       # autoplace's one-line reason (non-zero exit)
    verdicts: dict = field(default_factory=dict)   # version → "ok" | "refused: …" | "rejected: …"
    folder: str = ""


def grid(quick=False):
    presets = QUICK if quick else PRESETS
    for L in LAUNCHERS:
        for m in presets:
            for W in WORLDS:
                for label, _, moe_only in SWITCHES:
                    if moe_only and m not in MOE:
                        continue
                    yield Point(L, m, W, label)


def search(p: Point, root: Path) -> Point:
    """`autoplace search -l L --emit DIR --json` in-process (typer's runner: the CLI's own code path)."""
    from typer.testing import CliRunner

    from autoplace.cli import app
    words = dict((s[0], s[1]) for s in SWITCHES)[p.switch]
    out = root / f"{p.launcher}-{p.model}-{p.world}-{p.switch}"
    import signal

    def _late(*_):
        raise TimeoutError(f"search did not finish in {SEARCH_LIMIT_S} s")
    old = signal.signal(signal.SIGALRM, _late)
    signal.alarm(SEARCH_LIMIT_S)
    try:
        r = CliRunner().invoke(app, ["search", "--model", p.model, "--gpus", str(p.world), "--launcher", p.launcher,
                                     "--emit", str(out), "--json", "--workers", "1", *words])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    p.exit = r.exit_code
    if isinstance(r.exception, TimeoutError):
        p.refused = str(r.exception)
        return p
    if r.exit_code != 0:
        err = (r.stderr if r.stderr_bytes is not None else r.output).strip().splitlines()
        p.refused = (err[-1] if err else repr(r.exception))[:200]
        return p
    plan = json.loads(r.stdout[:r.stdout.rindex("}") + 1])["plans"][0]["plan"]
    p.plan = (f"tp{plan['tp']} pp{plan['pp']} cp{plan['cp']} ep{plan['ep']} z{plan['zero']} "
              f"{plan['recompute']}" + (" split" if plan.get("layer_split") else ""))
    p.folder = str(out)
    return p


def _job(folder: Path):
    from autoplace.export.common import ExportJob
    from autoplace.export.planfile import read_plan_file
    m, hw, t, plan, w, _ = read_plan_file(folder / "plan.json")
    return ExportJob(m, hw, t, plan, w)


def _same_files(launcher_mod, job, folder: Path) -> None:
    """The validators re-derive the files from plan.json: they must be the files on disk (but for the
    header's `# predicted:` line, which only the search writes)."""
    def body(text):
        return [x for x in text.splitlines() if not x.lstrip("# ").startswith("predicted:")]
    for name, text in launcher_mod.emit(job).items():
        disk = (folder / name).read_text()
        if body(disk) != body(text):
            raise AssertionError(f"{name} on disk differs from the export of plan.json")


def validate_inprocess(p: Point) -> None:
    """The validators that run in this process (pinned megatron-core, DeepSpeed, torchtitan 0.2.2, accelerate)."""
    import pytest
    import test_export_launchers as V

    from autoplace.export import accelerate, deepspeed, megatron, torchtitan
    folder = Path(p.folder)
    job = _job(folder)
    mp = pytest.MonkeyPatch()
    key, check = {
        "megatron": ("megatron-core 0.16.1", lambda: (_same_files(megatron, job, folder), V._check_megatron(job))),
        "deepspeed": ("DeepSpeedConfig", lambda: (_same_files(deepspeed, job, folder), V._check_deepspeed(job, mp))),
        "torchtitan": ("torchtitan 0.2.2", lambda: (_same_files(torchtitan, job, folder),
                                                    V._check_torchtitan(job, Path(tempfile.mkdtemp())))),
        "accelerate": ("accelerate", lambda: (_same_files(accelerate, job, folder),
                                              V._check_accelerate(job, Path(tempfile.mkdtemp())))),
    }[p.launcher]
    try:
        check()
        p.verdicts[key] = "ok"
    except pytest.skip.Exception as e:
        p.verdicts[key] = f"skipped: {e}"
    except Exception as e:  # noqa: BLE001 — the launcher's verdict
        p.verdicts[key] = f"rejected: {type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
    finally:
        mp.undo()
    if p.launcher == "torchtitan":
        from autoplace.export.torchtitan import JOB_MODULE, v03_refusal
        if not (folder / f"{JOB_MODULE}.py").exists():
            p.verdicts["torchtitan 0.3"] = f"refused: {v03_refusal(job)}"


def validate_batched(points: list[Point]) -> None:
    """Megatron-LM at each tag and torchtitan 0.3: one subprocess per version over every folder."""
    from launchers import MEGATRON_LM_TAGS, tt03_pythonpath
    mlm = [p for p in points if p.launcher == "megatron" and p.folder]
    for tag in MEGATRON_LM_TAGS:
        d = ROOT / ".venv-mlm" / tag
        key = f"Megatron-LM {tag}"
        if not (d / "megatron" / "training" / "arguments.py").exists():
            for p in mlm:
                p.verdicts[key] = f"skipped: no checkout in {d}"
            continue
        run, too_old = [], {}
        for p in mlm:
            from autoplace.export.megatron import flags_need
            need = {f: t for f, t in flags_need(_job(Path(p.folder))).items() if _tag(t) > _tag(tag)}
            if need:
                too_old[p.folder] = "; ".join(f"{f} needs Megatron-LM {t} or later" for f, t in need.items())
            else:
                run.append(p)
        got = _run_lines([sys.executable, str(ROOT / "tests/launchers/mlm_parse.py"),
                          *[f"{p.folder}@{p.world}" for p in run]], dict(os.environ, PYTHONPATH=str(d)), "file")
        for p in mlm:
            if p.folder in too_old:             # the export notes say which release the file needs
                p.verdicts[key] = f"refused: {too_old[p.folder]}"
                continue
            r = got.get(p.folder)
            p.verdicts[key] = "ok" if r and r["ok"] else f"rejected: {r['error'] if r else 'no answer'}"
    tt = [p for p in points if p.launcher == "torchtitan" and p.folder and "torchtitan 0.3" not in p.verdicts]
    tt03 = Path(os.environ.get("AUTOPLACE_TT03", ROOT / ".venv-tt03"))
    if not (tt03 / "torchtitan" / "config" / "manager.py").exists():
        for p in tt:
            p.verdicts["torchtitan 0.3"] = f"skipped: torchtitan 0.3 not installed in {tt03}"
        return
    from autoplace.export.torchtitan import JOB_MODULE
    got = _run_lines([sys.executable, str(ROOT / "tests/launchers/tt03_check.py"), "--dirs", JOB_MODULE,
                      *[p.folder for p in tt]], dict(os.environ, PYTHONPATH=tt03_pythonpath(tt03)), "dir")
    for p in tt:
        r = got.get(p.folder)
        p.verdicts["torchtitan 0.3"] = "ok" if r and r["ok"] else f"rejected: {r['error'] if r else 'no answer'}"


def _tag(t: str) -> tuple:
    return tuple(int(x) for x in t.rsplit("v", 1)[-1].split(".") if x.isdigit())


def _run_lines(cmd, env, key) -> dict:
    if not any(Path(str(x).split("@")[0]).is_dir() for x in cmd[2:]):      # nothing to check
        return {}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out[d[key]] = d
    if not out:
        raise RuntimeError(f"{Path(cmd[1]).name} gave no answer: {r.stderr.strip()[-500:]}")
    return out


def run(points: list[Point], root: Path, progress=True) -> list[Point]:
    t0 = time.perf_counter()
    for i, p in enumerate(points):
        search(p, root)
        if p.folder:
            validate_inprocess(p)
        if progress:
            print(f"\r{i + 1}/{len(points)} searched and checked ({time.perf_counter() - t0:.0f} s)",
                  end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    validate_batched(points)
    return points


def table(points: list[Point]) -> str:
    """Per launcher and version: files checked / accepted / refused by autoplace / rejected."""
    rows = defaultdict(Counter)
    reasons = defaultdict(Counter)
    for p in points:
        if not p.folder:
            rows[(p.launcher, "search")]["refused"] += 1
            reasons[(p.launcher, "search")][p.refused] += 1
            continue
        for ver, v in p.verdicts.items():
            c = rows[(p.launcher, ver)]
            c["checked"] += 1
            kind = v.split(":", 1)[0]
            c[{"ok": "accepted", "refused": "refused", "rejected": "rejected", "skipped": "skipped"}[kind]] += 1
            if kind != "ok":
                reasons[(p.launcher, ver)][v] += 1
    out = ["| launcher | version / validator | files checked | accepted | refused by autoplace | rejected by the launcher |",
           "|---|---|---:|---:|---:|---:|"]
    for (L, ver), c in sorted(rows.items()):
        if ver == "search":
            continue
        out.append(f"| {L} | {ver} | {c['checked']} | {c['accepted']} | {c['refused']} | {c['rejected']} |")
    out.append("")
    out.append("| launcher | searches | files written | autoplace refused the search (exit ≠ 0) | search did not finish |")
    out.append("|---|---:|---:|---:|---:|")
    for L in LAUNCHERS:
        ps = [p for p in points if p.launcher == L]
        if ps:
            late = sum(1 for p in ps if p.refused.startswith("search did not finish"))
            out.append(f"| {L} | {len(ps)} | {sum(1 for p in ps if p.folder)} | "
                       f"{sum(1 for p in ps if not p.folder) - late} | {late} |")
    if reasons:
        out.append("")
        out.append("Reasons (count):")
        out.append("")
        for (L, ver), c in sorted(reasons.items()):
            for why, n in c.most_common():
                out.append(f"- {L} / {ver} ({n}): {why}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="13b, llama3-8b, mixtral-8x7b, qwen3-30b-a3b instead of 9 presets")
    ap.add_argument("--rows", action="store_true", help="also print one line per point")
    ap.add_argument("--json", help="write every point to this file")
    a = ap.parse_args()
    import warnings
    warnings.filterwarnings("ignore")
    root = Path(tempfile.mkdtemp(prefix="launcher-matrix-"))
    t0 = time.perf_counter()
    points = run(list(grid(a.quick)), root)
    if a.rows:
        for p in points:
            print(f"| {p.launcher} | {p.model} | {p.world} | {p.switch} | {p.exit} | {p.plan or p.refused} | "
                  + "; ".join(f"{k}: {v}" for k, v in p.verdicts.items()) + " |")
    print(table(points))
    print(f"\n{len(points)} searches, {time.perf_counter() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps([p.__dict__ for p in points], indent=1, default=str))


if __name__ == "__main__":
    main()
