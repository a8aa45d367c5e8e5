"""Export a plan to training launchers.

* `planfile`: the launcher-neutral plan file (`plan.json`, `schema_version`) —
  `plan_document`, `write_plan_file`, `read_plan_file`.
* one `Launcher` per format (`launcher.Launcher`; registry `registry.LAUNCHERS`) — `megatron`,
  `deepspeed`, `torchtitan` (0.2.x TOML + overrides, 0.3 Python config), `accelerate` (FSDP1/FSDP2
  YAML), `torchrun`, `slurm` — each with `rules(rt)` (vectorized: the search's constraint),
  `refusals(job)` (the messages of the violated rules) and `emit(job) -> {filename: text}`.
* `export_all(doc, launchers, out_dir)` writes the files (atomically) and reports refusals;
  `emit_for_search(doc, out_dir, launchers)` also writes `plan.json` (for `search --emit`).

A launcher that cannot express a plan refuses it with the reason (LauncherRefusedError, exit 4)
instead of writing a file that would run something else.
"""

from autoplace.export.common import ExportJob, LauncherRefusedError, Recompute, as_job
from autoplace.export.exporter import ExportResult, emit_files, emit_for_search, export_all, resolve_launchers
from autoplace.export.launcher import Launcher
from autoplace.export.planfile import (
                                       PLAN_SCHEMA_VERSION,
                                       plan_document,
                                       read_plan_file,
                                       specs_from_document,
                                       write_plan_file,
)
from autoplace.export.registry import LAUNCHERS, get_launcher

__all__ = ["LAUNCHERS", "Launcher", "Recompute", "get_launcher", "ExportJob", "LauncherRefusedError", "as_job", "ExportResult", "emit_files",
           "emit_for_search", "export_all", "resolve_launchers", "PLAN_SCHEMA_VERSION", "plan_document",
           "read_plan_file", "specs_from_document", "write_plan_file"]


from autoplace._callable import make_callable  # noqa: E402

make_callable(__name__)   # `autoplace.export(request)` calls autoplace.api.export
