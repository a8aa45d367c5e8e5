"""Issue 12 'must show': for each launcher L, model and GPU count, `autoplace search --launcher L
--emit D` exits 0 and every emitted file passes that launcher's own validator (DeepSpeed's
DeepSpeedConfig, megatron-core's TransformerConfig + rank grid, torchtitan 0.2.2's ConfigManager +
ParallelDims, torchtitan 0.3's ConfigManager for the Python job module, accelerate's config loader +
ParallelismConfig, bash -n for the torchrun/SLURM scripts). Prints a markdown table.

    PYTHONPATH=. .venv/bin/python benchmarks/launcher_matrix.py [--quick]
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
MODELS = ["llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", str(ROOT / "benchmarks/configs/qwen3-30b-a3b")]
WORLDS = [8, 64, 512]
LAUNCHERS = ["megatron", "deepspeed", "torchtitan", "accelerate", "torchrun", "slurm"]


def validate(launcher, out: Path) -> str:
    import pytest
    import test_export_launchers as V

    from autoplace.export.common import ExportJob
    from autoplace.export.planfile import read_plan_file
    m, hw, t, p, w, _ = read_plan_file(out / "plan.json")
    job = ExportJob(m, hw, t, p, w)
    mp = pytest.MonkeyPatch()
    try:
        if launcher == "megatron":
            V._check_megatron(job)
        elif launcher == "deepspeed":
            V._check_deepspeed(job, mp)
        elif launcher == "torchtitan":
            d = Path(tempfile.mkdtemp())
            V._check_torchtitan(job, d)
            if (out / "autoplace_torchtitan_job.py").exists():
                env = dict(os.environ, PYTHONPATH=f"{ROOT / '.venv-tt03'}{os.pathsep}{out}")
                r = subprocess.run([sys.executable, str(ROOT / "tests/launchers/tt03_check.py"), "autoplace_torchtitan_job",
                                    "autoplace_job"], capture_output=True, text=True, cwd=out, env=env)
                if r.returncode:
                    return "FAIL 0.3: " + r.stderr.strip().splitlines()[-1][:80]
                return "ok (0.2.2 TOML + 0.3 module)"
        elif launcher == "accelerate":
            V._check_accelerate(job, Path(tempfile.mkdtemp()))
        else:
            for f in out.glob("*.sh*"):
                subprocess.run(["bash", "-n", str(f)], check=True)
            for f in out.glob("*.sbatch"):
                subprocess.run(["bash", "-n", str(f)], check=True)
    except pytest.skip.Exception as e:
        return f"skipped ({e})"
    except Exception as e:  # noqa: BLE001
        return f"FAIL {type(e).__name__}: {str(e)[:80]}"
    finally:
        mp.undo()
    return "ok"


def main():
    rows = []
    for L in LAUNCHERS:
        for model in MODELS:
            for W in WORLDS:
                out = Path(tempfile.mkdtemp()) / "emit"
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, "-m", "autoplace", "search", "--model", model, "--gpus", str(W),
                                    "--launcher", L, "--emit", str(out), "--json"], capture_output=True, text=True,
                                   cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
                dt = time.perf_counter() - t0
                if r.returncode == 0:
                    import json
                    plan = json.loads(r.stdout)["plans"][0]["plan"]
                    short = f"tp{plan['tp']} pp{plan['pp']} cp{plan['cp']} ep{plan['ep']} z{plan['zero']} {plan['recompute']}"
                    v = validate(L, out)
                else:
                    short, v = "-", r.stderr.strip().splitlines()[-1][:90] if r.stderr.strip() else ""
                name = Path(model).name
                rows.append((L, name, W, r.returncode, short, v, dt))
                print(f"| {L} | {name} | {W} | {r.returncode} | {short} | {v} | {dt:.1f} |", flush=True)


if __name__ == "__main__":
    print("| launcher | model | GPUs | exit | winner | launcher's validator | wall s |")
    print("|---|---|---:|---:|---|---|---:|")
    main()
