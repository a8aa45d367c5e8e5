#!/usr/bin/env bash
# Torch-free smoke of the built wheel in a fresh environment: `.ci/smoke_wheel.sh PYTHON WHEEL`.
# Planning (search, estimate, export, validate, list) must run on the base install alone; a plotting
# option without matplotlib must be one line naming the extra; a `pip install --target` copy must find
# its data files.
set -euo pipefail
PY="$1"; WHL="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"   # absolute: the script works in a temp folder
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q "$WHL"
A="$WORK/venv/bin/autoplace"
cd "$WORK"
"$WORK/venv/bin/python" - <<'PYEOF'
import importlib.util, sys
heavy = [m for m in ("torch", "optuna", "matplotlib") if importlib.util.find_spec(m)]
assert not heavy, f"the base install pulled {heavy}"
print(f"python {sys.version.split()[0]}: base install without torch, optuna, matplotlib")
PYEOF
"$A" --version
"$A" search --model 13b --gpus 64 --top-k 3 | tail -2
"$A" search --model 7b --gpus 8 --top-k 2 --runtime megatron-core --json > search.json
"$A" estimate --plan-file search.json > /dev/null
"$A" estimate --model 13b --gpus 64 --plan "tp=2,zero=2,sp=1,mbs=4" --json > estimate.json
"$A" export --plan-file search.json --launcher all --out exported > /dev/null
"$A" estimate --from exported/megatron_args.txt --gpus 8 > /dev/null
"$A" list hardware > /dev/null
cat > records.json <<'JSON'
[{"id": "smoke-gpt-4gpu", "record_type": "measured_throughput",
  "source": {"citation": "smoke", "table_or_figure": "Table 1"},
  "model": {"name": "GPT-tiny", "layers": 4, "hidden": 1024, "heads": 16, "kv_heads": 16, "ffn_hidden": 4096,
            "vocab": 51200, "seq_len": 1024, "params_billion": 0.1, "arch_notes": "GPT-style decoder"},
  "hardware": {"gpu": "A100-SXM4-80GB", "gpus_total": 4, "gpus_per_node": 8, "peak_tflops_per_gpu_assumed_by_source": 312},
  "plan": {"dp": 2, "tp": 2, "pp": 1, "cp": 1, "ep": 1, "vpp": 1, "sequence_parallel": false, "zero_stage": 0,
           "fsdp": false, "recompute": "full", "micro_batch": 4, "global_batch": 16, "grad_accum": 2,
           "precision": "fp16 mixed precision", "pp_schedule": "none"},
  "measured": {"tflops_per_gpu": 100.0, "iteration_time_s_derived": 1.0}, "notes": ""}]
JSON
"$A" validate --records records.json --json > validate.json
set +e
out="$("$A" estimate --model 7b --gpus 8 --plan zero=1 --plot pics 2>&1 >/dev/null)"; rc=$?
set -e
[ "$rc" = 1 ] && [ "$out" = "error: --plot / --report needs matplotlib: pip install 'autoplace[plot]'" ] \
  || { echo "--plot without matplotlib: rc=$rc '$out'"; exit 1; }
# pip install --target: the data files travel inside the package
"$WORK/venv/bin/pip" install -q --no-deps --target "$WORK/target" "$WHL"
PYTHONPATH="$WORK/target" "$WORK/venv/bin/python" -c "import autoplace, sys; assert autoplace.__file__.startswith('$WORK/target'), autoplace.__file__"
PYTHONPATH="$WORK/target" "$WORK/venv/bin/python" -m autoplace search --model 13b --gpus 64 --top-k 1 | tail -1
echo "wheel smoke ok ($PY)"
