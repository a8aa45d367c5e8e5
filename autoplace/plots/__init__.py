"""Pictures of plans and sweeps (matplotlib, Agg backend, imported lazily): memory per pipeline
stage against the limit, the step-time breakdown, the pipeline schedule as a timeline, sweep curves
and the time-vs-cost Pareto front. Every figure is returned as PNG bytes; `write_pictures` writes
them atomically (temp file + os.replace)."""

from autoplace.plots.common import png_bytes, write_pictures  # noqa: F401
