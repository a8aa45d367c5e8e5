"""The JSON contract: every document autoplace prints with `--json` or writes (`plan.json`, the export
manifest, profile records) carries `"schema_version": "MAJOR.MINOR"` (`SCHEMA_VERSION`); a reader
accepts any MINOR of its MAJOR and refuses a newer MAJOR. One JSON Schema (draft 2020-12) per
document ships in `autoplace/schemas/<name>.json`, generated from the pieces below
(`autoplace.contract.write_all()` rewrites them; a test fails when a shipped file and this module differ,
and validates every `--json` output against its schema).
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_VERSION = "1.1"
"""The version every document carries (string "MAJOR.MINOR")."""

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def check_version(ver, where: str) -> None:
    """One-line InputError unless `ver` is a schema_version this autoplace reads (same MAJOR; the
    integer 1 of plan files written before the convention is read as "1.0")."""
    from autoplace.errors import InputError
    if ver is None:
        raise InputError(f"{where}: missing 'schema_version' (is this an autoplace document?)")
    if isinstance(ver, int) and not isinstance(ver, bool):
        ver = f"{ver}.0"
    if not isinstance(ver, str) or not _MAJOR_MINOR(ver):
        raise InputError(f"{where}: schema_version must be a string \"MAJOR.MINOR\" such as "
                         f"\"{SCHEMA_VERSION}\", got {ver!r}")
    major = int(ver.split(".")[0])
    ours = int(SCHEMA_VERSION.split(".")[0])
    if major > ours:
        raise InputError(f"{where}: schema_version {ver} is newer than this autoplace reads "
                         f"({SCHEMA_VERSION}); upgrade autoplace")
    if major < 1:
        raise InputError(f"{where}: schema_version {ver} is not a version autoplace wrote")


def _MAJOR_MINOR(v: str) -> bool:
    parts = v.split(".")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


# ---- pieces --------------------------------------------------------------------------------------
NUM = {"type": "number"}
NUM_OR_NULL = {"type": ["number", "null"]}
INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
VERSION = {"type": "string", "pattern": r"^[0-9]+\.[0-9]+$"}


def obj(props: dict, required=None, extra: bool = True) -> dict:
    return {"type": "object", "properties": props, "required": sorted(required if required is not None else props),
            "additionalProperties": extra}


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


PLAN = obj({
    "tp": INT, "pp": INT, "vpp": INT, "cp": INT, "ep": INT, "etp": INT, "dp": INT, "dp_replicate": INT,
    "dp_shard": INT, "zero": {"type": "integer", "minimum": 0, "maximum": 3}, "reshard_after_forward": BOOL,
    "sp": BOOL, "recompute": {"enum": ["none", "selective", "full", "block"]}, "recompute_layers": INT,
    "recompute_modules": arr(STR), "offload": {"enum": ["none", "optimizer", "grads", "params"]},
    "offload_fraction": NUM, "mbs": INT, "schedule": {"enum": ["1f1b", "interleaved", "gpipe"]},
    "vpp_group": INT, "pp_flushes": INT, "rank_order": STR, "tp_overlap": BOOL, "tp_async": BOOL,
    "dp_overlap": BOOL, "ep_overlap": BOOL, "bwd_prefetch": BOOL, "fetch_sync": BOOL, "dp_bucket_mb": NUM,
    "layer_split": arr(INT), "stage_recompute": arr(INT), "dp_modes": STR, "zero_axes": STR, "omit": arr(STR),
}, required=["tp", "pp", "cp", "ep", "dp", "zero", "sp", "recompute", "offload", "mbs", "schedule"])
"""`Plan.to_dict()`: the plan's degrees and knobs (the keys `--plan` takes)."""

RULE = obj({"rule": STR, "message": STR}, required=["rule", "message"])

STAGE_MEMORY = obj({k: NUM for k in ("params", "grads", "optimizer", "activations", "transient", "reserve",
                                     "overhead", "total", "allocated", "reserved", "device")} | {"stage": INT})

ESTIMATE = obj({
    "schema_version": VERSION,
    "model": obj({"name": STR, "params": NUM, "layers": {"type": ["integer", "null"]}}),
    "hardware": obj({"name": STR, "gpus": INT, "gpus_per_node": INT, "memory_bytes": NUM}),
    "training": obj({"seq_len": INT, "global_batch": INT, "precision": STR, "regime": STR, "attention": STR,
                     "states_only": BOOL, "fp8_recipe": STR, "runtime": {"type": ["string", "null"]},
                     "runtime_set": arr(STR)}),
    "plan": PLAN,
    "legal": BOOL,
    "violations": arr(RULE),
    "notes": arr(RULE),
    "placement": arr(obj({"state": STR}, extra=True)),
    "memory": obj({"per_stage": arr(STAGE_MEMORY), "peak_bytes": NUM, "allocated_bytes": NUM,
                   "reserved_bytes": NUM, "device_bytes": NUM,
                   "outside_allocator": obj({"cuda_context_bytes": NUM, "nccl_buffers_bytes": NUM,
                                             "comm_other_bytes": NUM}),
                   "binding_stage": INT, "limit_bytes": NUM, "fits": BOOL, "near_limit": BOOL,
                   "host_bytes": NUM, "host_limit_bytes": NUM,
                   "interval": {"type": "object"}, "activation_bytes_per_layer": NUM}),
    "communication": obj({"bytes_per_step": obj({k: NUM for k in ("dp", "tp", "pp", "cp", "ep", "offload")}),
                          "per_stage": arr({"type": "object"})}),
    "time": obj({"step_s": NUM, "tokens_per_s_per_gpu": NUM, "mfu": NUM, "hfu": NUM, "tflops_per_gpu": NUM,
                 "breakdown_s": {"type": "object", "additionalProperties": NUM},
                 "overlapped_s": {"type": "object", "additionalProperties": NUM},
                 "bubble_fraction": NUM, "micro_batches": NUM}),
}, required=["schema_version", "model", "hardware", "training", "plan", "legal", "violations", "notes",
             "placement"])
"""`autoplace estimate --json`: one plan's legality, memory per stage, communication and step time
(memory, communication and time only for a legal plan; time not for `--states-only`)."""

PLAN_FILE = obj({
    "schema_version": {"anyOf": [VERSION, {"const": 1}]},
    "generator": obj({"name": {"const": "autoplace"}, "version": STR}),
    "model": {"type": "object"},
    "cluster": obj({"hardware": {"type": ["object", "null"]}, "gpus": INT,
                    "gpus_per_node": {"type": ["integer", "null"]},
                    "scaleup_domain": {"type": ["integer", "null"]}, "nodes": {"type": ["integer", "null"]}},
                   required=["hardware", "gpus"]),
    "training": obj({"seq_len": INT, "global_batch": INT, "precision": STR}, extra=True),
    "plan": PLAN,
    "predicted": {"type": ["object", "null"]},
    "derived": {"type": "object"},
}, required=["schema_version", "model", "cluster", "training", "plan"])
"""`plan.json` (`search --emit`, `export`): everything needed to re-create the plan; `--plan-file` reads it."""

SEARCH_ENTRY = {**ESTIMATE, "properties": {**ESTIMATE["properties"],
                                           "runs_on": arr(STR),
                                           "search": obj({"launcher": {"type": ["string", "null"]},
                                                          "runtime": {"type": ["string", "null"]}}),
                                           "plan_file": PLAN_FILE},
                "required": sorted(set(ESTIMATE["required"]) | {"runs_on", "plan_file"})}

INT_OR_NULL = {"type": ["integer", "null"]}
STATS = obj({"candidates": INT, "legal": INT_OR_NULL, "feasible": INT_OR_NULL, "method": STR, "optimal": BOOL,
             "seconds": NUM, "evaluated": INT, "pruned_by_bound": INT},
            required=["candidates", "legal", "feasible", "method"])

SEARCH = obj({
    "schema_version": VERSION,
    "plans": arr(SEARCH_ENTRY),
    "stats": STATS,
    "space": {"type": "object"},
    "seq_note": {"type": ["string", "null"]},
    "searches": arr(obj({"launcher": {"type": ["string", "null"]}, "runtime": {"type": ["string", "null"]},
                         "rules": arr(STR), "error": {"type": ["string", "null"]}}, required=["launcher", "runtime"])),
    "families": arr(STR),
    "best_per_launcher": {"type": "object", "additionalProperties": {"type": "object"}},
    "profiled": {},
    "error": STR,
    "closest": {"type": ["object", "null"]},
}, required=["schema_version", "plans"])
"""`autoplace search --json`: the ranked plans (each an estimate document, the launchers that run it and
the plan file that re-creates it: `--plan-file` accepts the document, one entry, or its `plan_file`)."""

COMPARE = obj({
    "schema_version": VERSION, "labels": arr(STR), "plans": arr(STR), "knobs": arr({"type": "object"}),
    "terms": arr(obj({"term": STR, "a": NUM, "b": NUM})), "communication": arr({"type": "object"}),
    "memory": arr({"type": "object"}), "peak_bytes": arr(NUM), "limit_bytes": arr(NUM), "fits": arr(BOOL),
    "tokens_per_s": arr(NUM_OR_NULL), "verdict": obj({"faster": STR, "slower": STR, "sentence": STR}),
    "documents": arr(ESTIMATE),
}, required=["schema_version", "labels", "plans", "verdict", "documents"])
"""`autoplace compare --json`: two plans side by side and the sentence on what decides it."""

SWEEP = obj({
    "schema_version": VERSION, "model": STR, "tokens": NUM, "space": STR,
    "rows": arr(obj({"gpus": INT, "hardware": STR, "seq_len": INT, "global_batch": INT, "status": STR,
                     "step_s": NUM_OR_NULL, "tokens_per_s": NUM_OR_NULL, "time_to_train_s": NUM_OR_NULL,
                     "gpu_hours": NUM_OR_NULL, "cost": NUM_OR_NULL},
                    required=["gpus", "hardware", "status"])),
    "pareto": arr(INT), "cost_metric": STR, "stats": {"type": "object"},
}, required=["schema_version", "model", "rows", "pareto"])
"""`autoplace sweep --json`: the best plan per GPU count (× hardware, seq len, batch) and the Pareto front."""

VALIDATE = obj({
    "schema_version": VERSION,
    "records": arr(obj({"id": STR, "source": STR}, required=["id"])),
    "summary": obj({"overall": {"type": "object"}, "by_source": {"type": "object"}}),
    "not_compared": arr(obj({"id": STR}, required=["id"])),
    "mapping": {"type": "object"},
})
"""`autoplace validate --json`: per record and metric, measured against predicted, and the summary."""

EXPORT = obj({
    "schema_version": VERSION, "out_dir": STR, "plan": STR, "plan_file": {"type": ["string", "null"]},
    "written": {"type": "object", "additionalProperties": arr(STR)},
    "refused": {"type": "object", "additionalProperties": {"type": ["string", "array"]}},
    "notes": {"type": "object"}, "removed": arr(STR),
})
"""`autoplace export --json` and `export_manifest.json`: the files written per launcher and the refusals."""

LIST = obj({"schema_version": VERSION, "kind": STR, "items": arr(obj({"name": STR, "description": STR}))})
"""`autoplace list KIND --json`."""

DOCUMENTS = {"estimate": ESTIMATE, "search": SEARCH, "compare": COMPARE, "sweep": SWEEP, "validate": VALIDATE,
             "export": EXPORT, "plan": PLAN_FILE, "list": LIST}
"""Document name → schema; `autoplace/schemas/<name>.json`."""


def schema(name: str) -> dict:
    """The full JSON Schema of document `name`."""
    body = DOCUMENTS[name]
    return {"$schema": DRAFT, "$id": f"https://autoplace.dev/schemas/{name}.json", "title": f"autoplace {name}",
            **body}


def schema_dir() -> Path:
    from autoplace.data import package_dir
    return package_dir("schemas")


def write_all(folder: Path | None = None) -> list[Path]:
    """Write every schema file (atomically); returns the paths."""
    from autoplace.io import atomic_write
    folder = Path(folder) if folder else schema_dir()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in DOCUMENTS:
        p = folder / f"{name}.json"
        atomic_write(p, json.dumps(schema(name), indent=2, sort_keys=False) + "\n")
        out.append(p)
    return out


def validate(doc: dict, name: str) -> None:
    """Raise jsonschema.ValidationError when `doc` breaks the shipped schema `name` (needs jsonschema,
    the `test` extra)."""
    from autoplace._imports import require
    jsonschema = require("jsonschema", "schema validation")
    shipped = json.loads((schema_dir() / f"{name}.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(shipped).validate(doc)

