"""Hostile input: names and values from config.json, plan.json and hardware profiles reach generated
shell, SBATCH, Python, TOML, YAML and JSON files only quoted for that file's language.

The injection test renders every exporter with hostile names and *runs* what it wrote in a sandboxed
dry run: the shell scripts under bash with stub `torchrun`/`srun`/`deepspeed`/`accelerate`/`python`
commands that only record their argv, the Python modules imported with a stub `torchtitan` package; a
canary (`touch PWNED`) must never run. Each critical finding has its own test that fails on a version
that writes the name unescaped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoplace.errors import InputError
from autoplace.export import export_all, plan_document, read_plan_file, write_plan_file
from autoplace.export.common import ExportJob
from autoplace.plan import parse_plan
from autoplace.specs.hardware import load_hardware
from autoplace.specs.presets import get_preset
from autoplace.specs.training import TrainingSpec

CANARY = "PWNED"
HOSTILE = [
    f"m\ntouch {CANARY}\n#",                                 # newline ends the '# model …' comment
    f"m\r\ntouch {CANARY}",
    f"m\n#SBATCH --wrap='touch {CANARY}'\ntouch {CANARY}",
    f'm"""\nimport os; os.system("touch {CANARY}")\n"""',   # ends a Python docstring
    f"m'''\nimport os; os.system('touch {CANARY}')\n'''",
    f"m\u2028touch {CANARY}",
    f"$(touch {CANARY})",
    f"`touch {CANARY}`",
    f"m'; touch {CANARY}; echo '",
    f'm"; touch {CANARY}; echo "',
    "m\\",
    "m\x1b]0;title\x07\x1b[31mred",
]
SBATCH_KEYS = {"#SBATCH --job-name", "#SBATCH --nodes", "#SBATCH --ntasks-per-node", "#SBATCH --gpus-per-node",
               "#SBATCH --cpus-per-task", "#SBATCH --exclusive", "#SBATCH --output"}
STUBS = ("torchrun", "srun", "scontrol", "deepspeed", "accelerate", "python", "python3", "sbatch")
HW = load_hardware("h100-sxm-80gb")
TRAIN = TrainingSpec(seq_len=4096, global_batch=256)


def _hostile(spec, name):
    """The spec with `name`, bypassing the readers' checks (a planner bug or a hand-built job must
    still not inject: the exporters quote on their own)."""
    spec = dataclasses.replace(spec)
    object.__setattr__(spec, "name", name)
    return spec


def _jobs(name):
    hw = _hostile(HW, name)
    l8 = _hostile(get_preset("llama3-8b"), name)                # built-in flavor: torchtitan 0.3 job module
    custom = _hostile(dataclasses.replace(get_preset("llama3-8b"), layers=30), name)  # flavor module
    m13 = _hostile(get_preset("13b"), name)
    out = []
    for model, plan, world in ((l8, "tp=2,pp=1,zero=3,sp=1,mbs=1", 16), (custom, "tp=2,pp=2,zero=3,sp=1,mbs=1", 16),
                               (m13, "tp=8,pp=2,zero=1,sp=1,recompute=selective,mbs=1", 64)):
        out.append(ExportJob(model, hw, TRAIN, parse_plan(plan).resolved(world), world))
    return out


def _stub_bin(root: Path) -> Path:
    b = root / "stubbin"
    b.mkdir()
    for s in STUBS:
        f = b / s
        f.write_text('#!/bin/sh\necho "$0 $*" >> "$STUB_LOG"\n'
                     + ('echo node1\n' if s == "scontrol" else "") + ('echo 10.0.0.1\n' if s == "srun" else "")
                     + "exit 0\n")
        f.chmod(0o755)
    return b


def _stub_torchtitan(root: Path) -> Path:
    """A `torchtitan` package with the names the emitted modules import, doing nothing."""
    pk = root / "stubpy" / "torchtitan"
    cls = ("class _Any:\n    Config = None\n    def __init__(self, *a, **k):\n        pass\n"
           "_Any.Config = _Any\n")
    files = {
        "__init__.py": "",
        "config/__init__.py": cls + "CompileConfig = ParallelismConfig = TrainingConfig = _Any\n",
        "distributed/__init__.py": "",
        "distributed/activation_checkpoint.py": cls + "FullAC = SelectiveAC = _Any\n",
        "models/__init__.py": "",
        "models/llama3/__init__.py": cls + "llama3_args = {}\ndef model_registry(f):\n    return f\n",
        "models/llama3/config_registry.py": cls + "def llama3_8b():\n    return _Any()\n",
        "models/llama3/model/__init__.py": "",
        "models/llama3/model/args.py": cls + "TransformerModelArgs = _Any\n",
    }
    for rel, text in files.items():
        f = pk / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return pk.parent


def _run_everything(folder: Path, tmp: Path) -> list[str]:
    """Run every script in `folder` (sourced env files too) and import every module; return the
    names that ran the canary."""
    stub = tmp / "stubbin"
    if not stub.exists():
        _stub_bin(tmp)
        _stub_torchtitan(tmp)
    env = {"PATH": f"{stub}:/usr/bin:/bin", "STUB_LOG": str(tmp / "argv.log"), "HOME": str(tmp),
           "SLURM_JOB_NODELIST": "node1", "SLURM_SUBMIT_DIR": str(folder), "SLURM_NNODES": "1",
           "SLURM_JOB_ID": "1", "MEGATRON_LM": str(tmp), "RDZV_ENDPOINT": "h:1", "PLAN_DIR": str(folder),
           "PYTHONPATH": f"{tmp / 'stubpy'}:{folder}"}
    hits = []
    for f in sorted(folder.iterdir()):
        canary = folder / CANARY
        if f.suffix in (".sh", ".sbatch"):
            cmd = ["bash", "-c", f'source "{f}"'] if f.name.endswith("_env.sh") else ["bash", str(f)]
        elif f.suffix == ".py":
            cmd = [sys.executable, "-c", f"import {f.stem} as m; getattr(m, 'autoplace_job', lambda: 0)()"]
        else:
            continue
        subprocess.run(cmd, cwd=folder, env=env, capture_output=True, timeout=20)
        if canary.exists():
            hits.append(f.name)
            canary.unlink()
    return hits


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_every_exporter_with_hostile_names_runs_nothing_injected(tmp_path, name):
    ran = []
    for i, job in enumerate(_jobs(name)):
        out = tmp_path / f"out{i}"
        res = export_all(job, ("all",), out)
        assert res.written, res.refused
        files = {p.name: p.read_text() for p in out.iterdir()}
        for fname, text in files.items():           # every file parses in its own language
            if fname.endswith(".json"):
                json.loads(text)
            elif fname.endswith(".toml"):
                import tomllib
                tomllib.loads(text)
            elif fname.endswith((".yaml", ".yml")):
                import yaml
                yaml.safe_load(text)
            elif fname.endswith(".py"):
                compile(text, fname, "exec")
            elif fname.endswith(".sbatch"):          # no directive besides the ones we wrote
                assert {x.split("=")[0] for x in text.splitlines() if x.startswith("#SBATCH")} <= SBATCH_KEYS
            assert "\x1b" not in text and "\u2028" not in text and "\r" not in text
        ran += [f"{i}/{f}" for f in _run_everything(out, tmp_path)]
    assert ran == []
    assert (tmp_path / "argv.log").exists()        # the stubs did run: the scripts got to their launcher


# ---- one test per critical finding (each fails where names reach the files unescaped) -----------
def _export_and_run(tmp_path, doc_or_job):
    out = tmp_path / "out"
    export_all(doc_or_job, ("all",), out)
    return _run_everything(out, tmp_path)


def test_newline_in_name_or_path_does_not_run(tmp_path):
    d = tmp_path / "cfg"
    d.mkdir()
    cfg = {"_name_or_path": f"org/m\ntouch {CANARY}\n", "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000,
           "max_position_embeddings": 4096}
    f = d / "my-model.json"
    f.write_text(json.dumps(cfg))
    from autoplace.specs.hf_config import load_hf_config
    m = load_hf_config(f)
    assert "\n" not in m.name
    job = ExportJob(m, HW, TRAIN, parse_plan("tp=8,pp=1,zero=1,mbs=1").resolved(64), 64)
    assert _export_and_run(tmp_path, job) == []


def test_newline_in_model_folder_name_does_not_run(tmp_path):
    d = tmp_path / f"m\ntouch {CANARY}\n"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096}))
    from autoplace.specs.hf_config import load_hf_config
    m = load_hf_config(d)
    assert "\n" not in m.name
    job = ExportJob(m, HW, TRAIN, parse_plan("tp=8,pp=1,zero=1,mbs=1").resolved(64), 64)
    assert _export_and_run(tmp_path, job) == []


def _shared_plan(tmp_path, **edit):
    doc = plan_document(get_preset("13b"), HW, TRAIN, parse_plan("tp=8,pp=1,zero=1,mbs=1"), 64)
    doc = json.loads(json.dumps(doc))
    for path, v in edit.items():
        sec, key = path.split("__")
        (doc[sec] if sec != "hardware" else doc["cluster"]["hardware"])[key] = v
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("field", ["model__name", "hardware__name"])
def test_shared_plan_json_with_newline_name_is_refused_or_harmless(tmp_path, field):
    p = _shared_plan(tmp_path, **{field: f"m\ntouch {CANARY}\n#"})
    try:
        doc = read_plan_file(p)
    except InputError as e:
        assert "\n" not in str(e) and "control characters" in str(e)
        return
    assert _export_and_run(tmp_path, doc) == []       # pragma: no cover - the reader refuses today


def test_triple_quote_in_name_does_not_run_in_torchtitan_modules(tmp_path):
    name = f'm"""\nimport os; os.system("touch {CANARY}")\n"""'
    jobs = _jobs(name)[:2]
    for i, job in enumerate(jobs):
        out = tmp_path / f"o{i}"
        export_all(job, ("torchtitan",), out)
        assert any(f.suffix == ".py" for f in out.iterdir())
        assert _run_everything(out, tmp_path) == []


def test_emitted_files_hold_no_absolute_path_of_the_planning_machine(tmp_path):
    hw = dataclasses.replace(HW, source=str(tmp_path / "secret" / "h100.toml"))
    doc = plan_document(get_preset("13b"), hw, TRAIN, parse_plan("tp=8,pp=1,zero=1,mbs=1"), 64)
    out = tmp_path / "emit"
    write_plan_file(out / "plan.json", doc)
    export_all(doc, ("all",), out)
    for f in out.iterdir():
        assert str(tmp_path) not in f.read_text(), f.name
    assert os.path.exists(out / "plan.json")
