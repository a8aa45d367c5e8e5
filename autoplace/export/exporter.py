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

    def to_dict(self, portable: bool = False) -> dict:
        """The result as JSON; `portable=True` (the manifest written into the folder) gives file names
        only, never a path of the planning machine."""
        from autoplace.contract import SCHEMA_VERSION
        nm = (lambda p: Path(p).name) if portable else (lambda p: p)  # noqa: E731
        return {"schema_version": SCHEMA_VERSION, "out_dir": "." if portable else self.out_dir, "plan": self.plan,
                "plan_file": nm(self.plan_file) if self.plan_file else None,
                "written": {k: [nm(p) for p in v] for k, v in self.written.items()}, "refused": self.refused,
                "notes": self.notes, "removed": [nm(p) for p in self.removed]}


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


def managed_files() -> set[str]:
    """Every file name an export or an emit writes (the rest of a folder is the user's)."""
    return {f for launcher in LAUNCHERS.values() for f in launcher.files} | {MANIFEST, "plan.json"}


def _collect(doc, names, res: ExportResult, files: dict, out: Path) -> None:
    """Render the files of every launcher in `names` that can express `doc`'s plan into `files`
    (name → (text, mode)); refusals and notes go to `res`."""
    job = as_job(doc)
    for name in names:
        launcher = LAUNCHERS[name]
        reasons = launcher.refusals(job)
        if reasons:
            res.refused[name] = reasons
            continue
        emitted = launcher.emit(job)
        nts = launcher.notes(job) + common_notes(job)
        if nts:
            res.notes[name] = nts
        for fname, text in emitted.items():
            files[fname] = (text, 0o755 if fname.endswith((".sh", ".sbatch")) else 0o644)
        res.written[name] = [str(out / f) for f in emitted]


def _replace(out: Path, files: dict, res: ExportResult) -> ExportResult:
    """Swap the folder's managed files for `files` and the manifest in one atomic rename."""
    from autoplace.io import replace_folder
    if not (files or res.refused):
        return res
    old = set(p.name for p in out.iterdir()) if out.is_dir() else set()
    res.removed = [str(out / n) for n in sorted(old & managed_files() - set(files) - {MANIFEST})]
    files[MANIFEST] = (json.dumps(res.to_dict(portable=True), indent=2) + "\n", 0o644)
    replace_folder(out, files, managed_files())
    return res


def export_all(doc, launchers=("all",), out_dir=".", *, plan_text: str | None = None) -> ExportResult:
    """Write the files of every requested launcher that can express the plan into `out_dir`.

    The folder is replaced as a whole (`autoplace.io.replace_folder`: staging folder + one atomic
    rename): afterwards it holds this export's files and its `plan.json` (`plan_text`, else the
    document exported) and
    the files of its own that autoplace does not write, never files of an earlier plan, and a kill at
    any moment leaves the old folder or the new one. Scripts are made executable. Launchers that
    cannot express the plan are listed in `refused` with their reasons. An illegal plan raises
    IllegalPlanError before anything is written. A manifest (`export_manifest.json`) records the
    outcome."""
    job = as_job(doc)
    names = resolve_launchers(launchers)
    check_legal(job)
    out = check_out_dir(out_dir, "--out")
    res = ExportResult(out_dir=str(out), plan=job.plan.short())
    files: dict[str, tuple[str, int]] = {}
    _collect(doc, names, res, files, out)
    if plan_text is None and job.train is not None:       # the folder always says which plan it holds
        from autoplace.export.planfile import plan_document
        from autoplace.export.planfile import plan_text as text_of
        plan_text = text_of(doc if isinstance(doc, dict) else
                            plan_document(job.model, job.hw, job.train, job.plan, job.world, job.predicted))
    if plan_text is not None:
        files["plan.json"] = (plan_text, 0o644)
        res.plan_file = str(out / "plan.json")
    return _replace(out, files, res)


def emit_for_search(doc, out_dir, launchers=("all",), per_launcher: dict | None = None) -> ExportResult:
    """For `autoplace search ... --emit DIR [--launcher L ...]`: write DIR/plan.json and the files
    of each requested launcher for the winning plan, replacing the folder as `export_all` does.

    `doc` is the winner's plan document, ``plan_document(model, hw, train, best_plan, gpus,
    predicted={...})``. Refusals are reported in the result (`refused`), never raised, so a search
    still writes its plan file; an unknown launcher name raises InputError (exit 1). The caller
    prints the result (e.g. with `autoplace.cli.export.render_result`).

    per_launcher: launcher → the plan document priced under that launcher's own runtime (its files
    carry those numbers), or a list of reasons it does not run the plan (refused); launchers not in
    it get `doc`."""
    from autoplace.export.planfile import plan_text
    out = check_out_dir(out_dir, "--emit")
    names = resolve_launchers(launchers)
    if per_launcher is None:
        return export_all(doc, names, out, plan_text=plan_text(doc))
    job = as_job(doc)
    check_legal(job)
    res = ExportResult(out_dir=str(out), plan=job.plan.short())
    files: dict[str, tuple[str, int]] = {}
    for n in names:
        d = per_launcher.get(n, doc)
        if isinstance(d, list):
            res.refused[n] = d
            continue
        _collect(d, [n], res, files, out)
    files["plan.json"] = (plan_text(doc), 0o644)
    res.plan_file = str(out / "plan.json")
    return _replace(out, files, res)
