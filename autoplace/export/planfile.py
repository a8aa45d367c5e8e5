"""The launcher-neutral plan file (`plan.json`).

One JSON document holds everything needed to re-create a chosen plan without re-running the search:

```
{
  "schema_version": "1.0",
  "generator": {"name": "autoplace", "version": "0.1.0"},
  "model":    {ModelSpec fields},
  "cluster":  {"hardware": {HardwareSpec fields, incl. name and source path},
               "gpus": W, "gpus_per_node": g, "scaleup_domain": d, "nodes": n},
  "training": {TrainingSpec fields},
  "plan":     Plan.to_dict()  (dp resolved; dp_shard, etp and vpp_group written resolved),
  "predicted": {...} | null,  (the numbers the plan was chosen on, as the caller gave them)
  "derived":  {"dp": …, "micro_batches": …, "tokens_per_step": …}  (informational, ignored on read)
}
```

`read_plan_file(write_plan_file(p, plan_document(...)))` returns the same specs: ModelSpec,
TrainingSpec and HardwareSpec compare equal field by field; the Plan compares equal to
`plan.resolved(world)` with `etp`/`vpp_group` in their canonical form (0 when equal to tp / pp,
the value `parse_plan` produces). A hand-written file may give the hardware by name or path
only (`"hardware": {"name": "h100-sxm-80gb"}`); it is then loaded from the profile.

Units inside the file are those of the dataclasses: bytes, FLOP/s, bytes/s, seconds.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, fields
from pathlib import Path

from autoplace.contract import SCHEMA_VERSION, check_version
from autoplace.errors import InputError
from autoplace.io import read_json
from autoplace.safe import (
    MAX_BATCH,
    MAX_GPUS,
    MAX_LAYERS,
    MAX_PATH,
    check_name,
    has_control,
    integer,
    number,
    one_line,
    portable_path,
)

PLAN_SCHEMA_VERSION = SCHEMA_VERSION
"""Plan files carry the version every autoplace document carries (`autoplace.contract`)."""

_PLAN_ENUMS = {
    "recompute": ("none", "selective", "full", "block"),
    "schedule": ("1f1b", "interleaved", "gpipe"),
    "offload": ("none", "optimizer", "grads", "params"),
    "rank_order": ("tp-cp-ep-dp-pp", "pp-dp-cp-tp"),
}


def plan_document(model, hw, train, plan, world: int, predicted: dict | None = None) -> dict:
    """The plan file as a dict (JSON-ready)."""
    from autoplace._version import __version__
    from autoplace.io import to_jsonable
    world = int(world)
    plan = plan.resolved(world)
    gpn = int(getattr(hw, "gpus_per_node", 0) or 0)
    hw_d = asdict(hw) if hw is not None else None
    if hw_d is not None:       # the planning machine's folders never go into a shared file
        hw_d["source"] = portable_path(hw_d.get("source", "builtin"))
    derived = {"dp": plan.dp, "dp_shard": plan.dp_shard,
               "tokens_per_step": train.tokens_per_step}
    if plan.dp and train.global_batch % (plan.mbs * plan.dp) == 0:
        derived["micro_batches"] = train.global_batch // (plan.mbs * plan.dp)
    if not model.states_only and model.layers % plan.pp == 0:
        derived["layers_per_stage"] = model.layers // plan.pp
    doc = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "generator": {"name": "autoplace", "version": __version__},
        "model": _portable_model(asdict(model)),
        "cluster": {
            "hardware": hw_d,
            "gpus": world,
            "gpus_per_node": gpn or None,
            "scaleup_domain": int(getattr(hw, "scaleup_domain", 0) or 0) or None,
            "nodes": -(-world // gpn) if gpn else None,
        },
        "training": _training_dict(train),
        "plan": plan.to_dict(),
        "predicted": to_jsonable(predicted) if predicted is not None else None,
        "derived": derived,
    }
    return doc


def _portable_model(d: dict) -> dict:
    """The model section with a config.json source as `folder/config.json`, not the planning machine's
    absolute path."""
    src = str(d.get("source", ""))
    if src.startswith("hf-config:"):
        path, sep, rest = src[len("hf-config:"):].partition(" (model_type=")
        if Path(path).is_absolute():
            p = Path(path)
            d["source"] = f"hf-config:{p.parent.name + '/' if p.parent.name else ''}{p.name}{sep}{rest}"
    return d


def _training_dict(train) -> dict:
    """asdict(train) with the runtime as its name (or TOML path), not the whole RuntimeSpec."""
    d = asdict(train)
    rt = getattr(train, "runtime", None)
    if rt is not None:
        from autoplace.runtimes import RUNTIME_DIR, load_runtime
        rt = load_runtime(rt)
        src = Path(rt.source)
        d["runtime"] = rt.name if src.parent == RUNTIME_DIR or rt.source == "builtin" else _relative(src)
        from autoplace.runtimes.switches import settings_text
        if rt.overrides:
            d["runtime_set"] = settings_text(rt)      # --runtime-set over the file, re-applied on read
    return d


def _relative(p: Path) -> str:
    """`p` relative to the current folder when under it, else its file name (no absolute path of the
    planning machine goes into a plan file; keep a custom runtime TOML beside the plan)."""
    try:
        return str(Path(p).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return portable_path(p)


def plan_text(doc: dict) -> str:
    """The plan file's text (JSON, two-space indent)."""
    from autoplace.io import to_jsonable
    return json.dumps(to_jsonable(doc), indent=2) + "\n"


def write_plan_file(path, doc: dict) -> Path:
    """Write the document atomically (temp file + rename); returns the path."""
    from autoplace.io import atomic_write
    p = Path(path)
    if p.is_dir():
        raise InputError(f"plan file '{p}' is a directory; give a file name such as {p / 'plan.json'}")
    atomic_write(p, plan_text(doc))
    _chmod_readable(p)
    return p


def read_plan_file(path):
    """(model, hw, train, plan, world, predicted) from a plan file; one-line InputError otherwise."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"--plan-file: '{p}' does not exist (write one with `autoplace search ... --emit DIR`)")
    if p.is_dir():
        cand = p / "plan.json"
        if cand.exists():
            p = cand
        else:
            raise InputError(f"--plan-file: '{p}' is a directory without a plan.json")
    doc = read_json(p, "--plan-file", "write one with `autoplace search ... --emit DIR` or fix the JSON")
    return specs_from_document(doc, where=f"--plan-file {p}")


def specs_from_document(doc, where: str = "plan document"):
    """Validate a plan document and build (model, hw, train, plan, world, predicted)."""
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    doc, where = _plan_part(doc, where)
    check_version(doc.get("schema_version"), where)
    for key in ("model", "cluster", "training", "plan"):
        if key not in doc:
            raise InputError(f"{where}: missing field '{key}'")
        if not isinstance(doc[key], dict):
            raise InputError(f"{where}: '{key}' must be an object, got {type(doc[key]).__name__}")
    model = _model(doc["model"], where)
    world, hw = _cluster(doc["cluster"], where)
    train = _training(doc["training"], where)
    plan = _plan(doc["plan"], where, world)
    pred = doc.get("predicted")
    if pred is not None and not isinstance(pred, dict):
        raise InputError(f"{where}: 'predicted' must be an object or null, got {type(pred).__name__}")
    return model, hw, train, plan, world, pred


def _plan_part(doc: dict, where: str) -> tuple[dict, str]:
    """The plan document inside what `--plan-file` was given: a plan file itself, one entry of
    `search --json` (its `plan_file`), or a whole `search --json` document (its first plan)."""
    if "plans" in doc and "model" not in doc:
        plans = doc.get("plans")
        if not isinstance(plans, list) or not plans:
            raise InputError(f"{where}: a search document without plans (the search found none)")
        check_version(doc.get("schema_version"), where)
        doc, where = plans[0], f"{where} plans[0]"
        if not isinstance(doc, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    if "plan_file" in doc and isinstance(doc["plan_file"], dict):
        check_version(doc.get("schema_version"), where)
        return doc["plan_file"], f"{where} plan_file"
    if "placement" in doc and "cluster" not in doc:
        raise InputError(f"{where}: an estimate document holds no plan file; pass `search --json` output, "
                         f"or a plan.json (`search --emit DIR`)")
    return doc, where


# ---- sections ------------------------------------------------------------------------------------
def _build(cls, d: dict, section: str, where: str):
    fs = {f.name: f for f in fields(cls)}
    unknown = sorted(set(d) - set(fs))
    if unknown:
        raise InputError(f"{where}: {section}.{unknown[0]} is not a known field")
    d = {k: _typed(fs[k], v, f"{where}: {section}.{k}") for k, v in d.items()}
    for k, v in d.items():   # JSON has no tuples: restore tuple-typed fields
        f = fs[k]
        if isinstance(v, list) and ("tuple" in str(f.type).lower() or isinstance(f.default, tuple)
                                    or (f.default_factory is not MISSING
                                        and isinstance(f.default_factory(), tuple))):
            d[k] = tuple(tuple(x) if isinstance(x, list) else x for x in v)
    try:
        return cls(**d)
    except TypeError as e:
        msg = str(e)
        if "missing" in msg and "argument" in msg:
            missing = msg.split(":")[-1].strip().replace("'", "")
            raise InputError(f"{where}: {section} is missing field(s) {missing}") from None
        raise InputError(f"{where}: {section}: {msg}") from None
    except InputError as e:
        raise InputError(f"{where}: {e}") from None


def _typed(f, v, field: str):
    """A plan-file value checked against its dataclass field's declared type. Stated domain: every
    number in a plan file is finite and ≥ 0 (ints at most 2**53), every string one printable line,
    every list at most MAX_GPUS entries of such numbers; dicts and runtime objects are checked by their
    own readers."""
    kinds = {t.strip() for t in str(f.type).split("|")}
    if v is None:
        if "None" in kinds or f.default is None:
            return v
        raise InputError(f"{field} must not be null")
    if kinds & {"dict", "object"}:
        return v
    if "bool" in kinds:
        if not isinstance(v, bool):
            raise InputError(f"{field} must be true or false, got {one_line(repr(v), 40)}")
        return v
    if "int" in kinds:
        return integer(v, field, lo=0, hi=2**53)
    if "float" in kinds:
        number(v, field, lo=0.0, hi=1e30)
        return v                    # as written (an int stays an int: the file round-trips exactly)
    if "str" in kinds:
        if field.endswith(".name"):
            return check_name(v, field)
        if not isinstance(v, str) or len(v) > MAX_PATH or has_control(v):
            raise InputError(f"{field} must be one line of text (at most {MAX_PATH} characters), "
                             f"got {one_line(repr(v), 40)}")
        return v
    if "tuple" in kinds:
        if not isinstance(v, (list, tuple)) or len(v) > MAX_GPUS:
            raise InputError(f"{field} must be a list (at most {MAX_GPUS:,} entries), got {one_line(repr(v), 40)}")
        for x in v:
            for y in (x if isinstance(x, (list, tuple)) else [x]):
                if isinstance(y, str):
                    check_name(y, field)
                else:
                    integer(y, field, lo=0, hi=2**53)
        return v
    return v


def _model(d, where):
    from autoplace.specs.model import ModelSpec
    return _build(ModelSpec, dict(d), "model", where)


def _training(d, where):
    from autoplace.specs.training import TrainingSpec
    d = dict(d)
    rt = d.get("runtime")
    sets = d.pop("runtime_set", None)
    if sets is not None and (not isinstance(sets, list) or not all(isinstance(x, str) for x in sets)):
        raise InputError(f"{where}: training.runtime_set must be a list of \"key=value\" strings")
    if sets and rt is None:
        raise InputError(f"{where}: training.runtime_set needs training.runtime (the runtime it applies to)")
    if rt is not None:
        if not isinstance(rt, str):
            raise InputError(f"{where}: training.runtime must be a runtime name or .toml path, got {type(rt).__name__}")
        from autoplace.runtimes import load_runtime
        from autoplace.runtimes.switches import apply_settings
        try:
            d["runtime"] = apply_settings(load_runtime(rt), sets or ())
        except InputError as e:
            raise InputError(f"{where}: training.runtime: {e}") from None
    return _build(TrainingSpec, d, "training", where)


def _cluster(d, where):
    from autoplace.specs.hardware import HardwareSpec, check_hardware, load_hardware
    gpus = integer(d.get("gpus"), f"{where}: cluster.gpus", lo=1, hi=MAX_GPUS)
    hw_d = d.get("hardware")
    if isinstance(hw_d, str):
        hw_d = {"name": hw_d}
    if not isinstance(hw_d, dict) or not (hw_d.get("name") or hw_d.get("source")):
        raise InputError(f"{where}: cluster.hardware must name a GPU profile (an object with 'name')")
    names = {f.name for f in fields(HardwareSpec)}
    required = {f.name for f in fields(HardwareSpec)
                if f.default is MISSING and f.default_factory is MISSING}
    if required <= set(hw_d):
        hw = _build(HardwareSpec, hw_d, "cluster.hardware", where)
    else:
        ref = hw_d.get("source") if hw_d.get("source") and len(str(hw_d["source"])) < 4096 \
            and Path(str(hw_d["source"])).is_file() \
            else hw_d.get("name")
        try:
            hw = load_hardware(str(ref))
        except InputError as e:
            raise InputError(f"{where}: cluster.hardware: {e}") from None
        extra = {k: v for k, v in hw_d.items() if k in names and k not in ("name", "source")}
        if extra:
            hw = hw.with_(**extra)
    ov = {}
    for key in ("gpus_per_node", "scaleup_domain"):
        v = d.get(key)
        if v is None:
            continue
        v = integer(v, f"{where}: cluster.{key}", lo=1, hi=MAX_GPUS)
        if v != getattr(hw, key):
            ov[key] = v
    if ov:
        hw = hw.with_(**ov)
    return gpus, check_hardware(hw, f"{where}: cluster.hardware")


def _plan(d, where, world):
    from autoplace.plan import Plan
    types = {f.name: f.type for f in fields(Plan)}
    extra_ok = {"dp_shard"}
    for k in d:
        if k not in types and k not in extra_ok:
            raise InputError(f"{where}: plan.{k} is not a known plan field")
    kw = {}
    for k, v in d.items():
        if k in extra_ok:
            continue
        t = types[k]
        ok = {"int": lambda x: isinstance(x, int) and not isinstance(x, bool),
              "bool": lambda x: isinstance(x, bool),
              "float": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
              "str": lambda x: isinstance(x, str),
              "tuple": lambda x: isinstance(x, list)}[t](v)
        if not ok:
            raise InputError(f"{where}: plan.{k} must be a{'n' if t == 'int' else ''} {t}, got {v!r}")
        if t == "float":
            v = number(v, f"{where}: plan.{k}", lo=0.0, hi=1.0 if k == "offload_fraction" else 1e6)
        if t == "int":
            v = integer(v, f"{where}: plan.{k}", lo=0, hi=MAX_BATCH if k == "mbs" else MAX_GPUS)
        if t == "str":
            v = check_name(v, f"{where}: plan.{k}", "use a value `autoplace search` writes")
        if t == "tuple":
            v = _plan_tuple(k, v, where)
        if k in _PLAN_ENUMS and v not in _PLAN_ENUMS[k]:
            raise InputError(f"{where}: plan.{k} must be one of {', '.join(_PLAN_ENUMS[k])}, got {v!r}")
        kw[k] = v
    for k in ("tp", "pp", "vpp", "cp", "ep", "mbs", "dp_replicate"):
        if k in kw and kw[k] < 1:
            raise InputError(f"{where}: plan.{k} must be ≥ 1, got {kw[k]}")
    if "zero" in kw and kw["zero"] not in (0, 1, 2, 3):
        raise InputError(f"{where}: plan.zero must be 0, 1, 2 or 3, got {kw['zero']}")
    for k in ("dp", "etp", "vpp_group", "recompute_layers"):
        if k in kw and kw[k] < 0:
            raise InputError(f"{where}: plan.{k} must be ≥ 0, got {kw[k]}")
    if kw.get("dp_modes"):
        from autoplace.plan import _mode_codes
        try:
            _mode_codes(kw["dp_modes"])
        except InputError as e:
            raise InputError(f"{where}: plan.{str(e).removeprefix('--plan: ')}") from None
    plan = Plan.from_dict(kw)
    # canonical form: etp / vpp_group equal to their defaults are stored as 0 (as parse_plan makes them)
    if plan.etp == plan.tp:
        plan = plan.with_(etp=0)
    if plan.vpp_group == plan.pp:
        plan = plan.with_(vpp_group=0)
    if "dp_shard" in d and plan.dp and d["dp_shard"] != plan.dp_shard:
        raise InputError(f"{where}: plan.dp_shard={d['dp_shard']} disagrees with dp/dp_replicate = "
                         f"{plan.dp}/{plan.dp_replicate}")
    return plan.resolved(world)


def _plan_tuple(k: str, v: list, where: str) -> tuple:
    """A plan.json list field checked like its `--plan` form: recompute_modules and omit are names,
    layer_split and stage_recompute non-negative layer counts."""
    from autoplace.plan import _recompute_modules
    if len(v) > MAX_GPUS:
        raise InputError(f"{where}: plan.{k} has {len(v):,} entries (at most {MAX_GPUS:,})")
    if k in ("recompute_modules", "omit"):
        if not all(isinstance(x, str) for x in v):
            raise InputError(f"{where}: plan.{k} must be a list of names, got {one_line(repr(v), 60)}")
        for x in v:
            check_name(x, f"{where}: plan.{k}")
        if k == "recompute_modules":
            try:
                return _recompute_modules("+".join(v)) if v else ()
            except InputError as e:
                raise InputError(f"{where}: plan.{str(e).removeprefix('--plan: ')}") from None
        return tuple(v)
    return tuple(integer(x, f"{where}: plan.{k}[{i}]", lo=0, hi=MAX_LAYERS) for i, x in enumerate(v))


def _chmod_readable(p: Path, mode: int = 0o644) -> None:
    try:
        p.chmod(mode)
    except OSError:  # pragma: no cover - e.g. a filesystem without modes
        pass

