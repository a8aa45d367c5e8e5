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
    d = tmp_path / "models" / "my-llama"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096}))
    from autoplace.specs.hf_config import load_hf_config
    m = load_hf_config(d)
    doc = plan_document(m, hw, TRAIN, parse_plan("tp=8,pp=1,zero=1,mbs=1"), 64)
    assert doc["model"]["source"].startswith("hf-config:my-llama/config.json")
    out = tmp_path / "emit"
    write_plan_file(out / "plan.json", doc)
    export_all(doc, ("all",), out)
    for f in out.iterdir():
        assert str(tmp_path) not in f.read_text(), f.name
    assert os.path.exists(out / "plan.json")


# ---- files and processes -------------------------------------------------------------------------
def _doc(plan="zero=3,recompute=full,mbs=2"):
    return plan_document(get_preset("13b"), HW, TRAIN, parse_plan(plan), 64)


def test_second_emit_for_another_launcher_replaces_the_whole_folder(tmp_path):
    from autoplace.export import emit_for_search
    out = tmp_path / "emit"
    emit_for_search(_doc(), out, ["megatron"])
    (out / "my_notes.txt").write_text("mine")                    # the user's own file stays
    emit_for_search(_doc("zero=1,mbs=1"), out, ["deepspeed"])
    names = sorted(p.name for p in out.iterdir())
    assert names == ["deepspeed_launch.sh", "ds_config.json", "export_manifest.json", "my_notes.txt", "plan.json"]
    assert json.loads((out / "plan.json").read_text())["plan"]["zero"] == 1
    man = json.loads((out / "export_manifest.json").read_text())
    assert "megatron_args.txt" in man["removed"] and man["out_dir"] == "."
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]      # no staging left over


def test_a_kill_during_emit_leaves_the_old_folder_whole(tmp_path, monkeypatch):
    import autoplace.io as io
    from autoplace.export import emit_for_search
    out = tmp_path / "emit"
    emit_for_search(_doc(), out, ["megatron"])
    before = {p.name: p.read_text() for p in out.iterdir()}

    def killed(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(io, "_rename_exchange", killed)
    with pytest.raises(KeyboardInterrupt):
        emit_for_search(_doc("zero=1,mbs=1"), out, ["deepspeed"])
    assert {p.name: p.read_text() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_calibrate_slurm_template_quotes_paths_and_refuses_bad_partitions():
    from autoplace.profile.calibrate.templates import slurm_template
    text = slurm_template(2, 8, "nccl", "my out.toml", f"raw\n$(touch {CANARY}).json", "gpu")
    assert "--out 'my out.toml'" in text and f"'raw $(touch {CANARY}).json'" in text
    with pytest.raises(InputError, match="--partition"):
        slurm_template(2, 8, "nccl", "o.toml", "r.json", "gpu\n#SBATCH --wrap=x")


_FAKE_TORCHRUN = """
import sys
import autoplace.profile.launch as L
from autoplace.plan import parse_plan
from autoplace.specs.presets import get_preset
pidf = sys.argv[1]
L.torchrun_argv = lambda n, *a, **k: ["sh", "-c", f'echo $$ > {pidf}.tmp; mv {pidf}.tmp {pidf}; sleep 300 & sleep 300 & wait', "x"]
L.run_plans(get_preset("llama-tiny"), [parse_plan("")], 1, out_jsonl=sys.argv[2], workdir=sys.argv[3],
            equivalence=False, startup_timeout_s=300, plan_timeout_s=300)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_profile_ends_its_torchrun_group_on_a_signal(tmp_path, sig):
    import signal
    import time
    pidf = tmp_path / "pgid"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1]))
    p = subprocess.Popen([sys.executable, "-c", _FAKE_TORCHRUN, str(pidf), str(tmp_path / "r.jsonl"),
                          str(tmp_path / "w")], env=env, stderr=subprocess.PIPE)
    t0 = time.time()
    while not pidf.exists() and time.time() - t0 < 30:
        time.sleep(0.05)
    pgid = int(pidf.read_text())
    os.killpg(pgid, 0)                                   # the group is alive
    p.send_signal(getattr(signal, sig))
    p.wait(timeout=30)
    assert p.returncode != 0
    t0 = time.time()
    while time.time() - t0 < 5:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.killpg(pgid, signal.SIGKILL)
        raise AssertionError(f"torchrun's group outlived {sig}")
