"""Write launcher files for a plan: `export_all` (the `autoplace export` command) and
`emit_for_search` (for `autoplace search ... --emit DIR --launcher ...`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from autoplace.errors import IllegalPlanError, InputError
from autoplace.export.common import ExportJob, as_job, common_notes
from autoplace.export.registry import LAUNCHERS, get_launcher

MANIFEST = "export_manifest.json"


@dataclass
class ExportResult:
    out_dir: str
    written: dict = field(default_factory=dict)      # launcher → [paths]
    refused: dict = field(default_factory=dict)      # launcher → [reasons]
    notes: dict = field(default_factory=dict)        # launcher → [notes]
    removed: list = field(default_factory=list)      # stale files of refused launchers
    plan_file: str | None = None
    plan: str = ""

    def to_dict(self) -> dict:
        from autoplace import SCHEMA_VERSION
        return {"schema_version": SCHEMA_VERSION, "out_dir": self.out_dir, "plan": self.plan, "plan_file": self.plan_file,
                "written": self.written, "refused": self.refused, "notes": self.notes,
                "removed": self.removed}


def module(name: str):
    """The Launcher called `name` (kept for callers of the old module-returning helper)."""
    return get_launcher(name)


def resolve_launchers(launchers) -> list[str]:
    """'all', a name, a comma-separated string or a list of those → ordered unique launcher names."""
    if launchers is None:
        launchers = ["all"]
    if isinstance(launchers, str):
        launchers = [launchers]
    names: list[str] = []
    for item in launchers:
        for part in str(item).split(","):
            part = part.strip().lower()
            if not part:
                continue
            if part == "all":
                names.extend(LAUNCHERS)
            else:
                get_launcher(part)
                names.append(part)
    if not names:
        raise InputError(f"--launcher: give one of {', '.join(LAUNCHERS)} or all")
    return [n for i, n in enumerate(names) if n not in names[:i]]


def check_out_dir(out_dir, option: str) -> Path:
    """The output folder, or a one-line InputError when it cannot be one (an existing file,
    /dev/null, a path under a file)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{option}: '{out}' exists and is not a directory; give a new or existing folder")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option}: '{parent}' is not a directory; give a folder path")
            break
    return out


def check_legal(job: ExportJob) -> None:
    """Raise IllegalPlanError (exit 2) for a plan that violates the composition rules."""
    from autoplace.placement.rules import Ctx, check
    if job.train is None:
        return
    viol = check(Ctx(job.model, job.train, job.world), job.plan)
    if viol:
        raise IllegalPlanError("the plan is illegal, nothing exported: "
                               + "; ".join(f"{v.rule}: {v.message}" for v in viol), viol)


def emit_files(doc_or_job, launcher: str) -> dict[str, str]:
    """File name → text for one launcher (LauncherRefusedError if it cannot express the plan)."""
    return get_launcher(launcher).emit(as_job(doc_or_job))


def export_all(doc, launchers=("all",), out_dir=".") -> ExportResult:
    """Write the files of every requested launcher that can express the plan into `out_dir`.

    Each file is written atomically (temp file + rename); scripts are made executable. Launchers
    that cannot express the plan are listed in `refused` with their reasons, and files a previous
    export wrote for them are removed so the folder never mixes two plans. An illegal plan raises
    IllegalPlanError before anything is written. A manifest (`export_manifest.json`) records the
    outcome."""
    from autoplace.io import atomic_write
    job = as_job(doc)
    names = resolve_launchers(launchers)
    check_legal(job)
    out = check_out_dir(out_dir, "--out")
    res = ExportResult(out_dir=str(out), plan=job.plan.short())
    pending: dict[str, dict[str, str]] = {}
    for name in names:
        launcher = LAUNCHERS[name]
        reasons = launcher.refusals(job)
        if reasons:
            res.refused[name] = reasons
            continue
        pending[name] = launcher.emit(job)
        nts = launcher.notes(job) + common_notes(job)
        if nts:
            res.notes[name] = nts
    for name, files in pending.items():
        paths = []
        for fname, text in files.items():
            p = atomic_write(out / fname, text)
            p.chmod(0o755 if fname.endswith((".sh", ".sbatch")) else 0o644)
            paths.append(str(p))
        res.written[name] = paths
        stale = set(LAUNCHERS[name].files) - set(files)
        for fname in sorted(stale):
            p = out / fname
            if p.exists():
                p.unlink()
                res.removed.append(str(p))
    for name in res.refused:
        for fname in LAUNCHERS[name].files:
            p = out / fname
            if p.exists():
                p.unlink()
                res.removed.append(str(p))
    if res.written or res.refused:
        out.mkdir(parents=True, exist_ok=True)
        m = atomic_write(out / MANIFEST, json.dumps(res.to_dict(), indent=2) + "\n")
        m.chmod(0o644)
    return res


def emit_for_search(doc, out_dir, launchers=("all",), per_launcher: dict | None = None) -> ExportResult:
    """For `autoplace search ... --emit DIR [--launcher L ...]`: write DIR/plan.json and the files
    of each requested launcher for the winning plan.

    `doc` is the winner's plan document, ``plan_document(model, hw, train, best_plan, gpus,
    predicted={...})``. Refusals are reported in the result (`refused`), never raised, so a search
    still writes its plan file; an unknown launcher name raises InputError (exit 1). The caller
    prints the result (e.g. with `autoplace.cli.export.render_result`).

    per_launcher: launcher → the plan document priced under that launcher's own runtime (its files
    carry those numbers), or a list of reasons it does not run the plan (refused, stale files
    removed); launchers not in it get `doc`."""
    from autoplace.export.planfile import write_plan_file
    out = check_out_dir(out_dir, "--emit")
    names = resolve_launchers(launchers)
    out.mkdir(parents=True, exist_ok=True)
    pf = write_plan_file(out / "plan.json", doc)
    if per_launcher is None:
        res = export_all(doc, names, out)
    else:
        res = ExportResult(out_dir=str(out), plan=as_job(doc).plan.short())
        for n in names:
            d = per_launcher.get(n, doc)
            if isinstance(d, list):
                res.refused[n] = d
                for fname in LAUNCHERS[n].files:
                    p = out / fname
                    if p.exists():
                        p.unlink()
                        res.removed.append(str(p))
                continue
            r = export_all(d, [n], out)
            for k in ("written", "refused", "notes"):
                getattr(res, k).update(getattr(r, k))
            res.removed += r.removed
    res.plan_file = str(pf)
    from autoplace.io import atomic_write
    atomic_write(out / MANIFEST, json.dumps(res.to_dict(), indent=2) + "\n").chmod(0o644)
    return res
