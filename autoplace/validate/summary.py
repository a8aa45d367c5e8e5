"""Summary statistics over validation results: overall, per source, per source table.

Each group reports
  records, predicted, skipped, coverage                 share of records predicted (not skipped)
  throughput_records, throughput_predicted, throughput_coverage
  count, mean_abs_err_pct, max_abs_err_pct              over every compared metric entry
  primary {count, mean_abs_err_pct, max_abs_err_pct}    one entry per record (iteration time first,
                                                        then tflops, mfu, tokens/s, ...)
  step_time {...}                                       the primary entry's implied step-time error
                                                        (throughput/time records only)
  by_metric {metric: {count, mean_abs_err_pct, max_abs_err_pct}}
  max_model_size {records, measured_model_fits, vs_paper_analytic}   (max-model-size records:
                                        does the measured largest model fit under the prediction;
                                        predicted vs the analytic maximum the paper quotes)
Entries that are bounds (`*_lower_bound`) are not averaged.
"""

from __future__ import annotations


def _stats(values) -> dict:
    vals = [abs(v) for v in values if v is not None]
    if not vals:
        return {"count": 0, "mean_abs_err_pct": None, "max_abs_err_pct": None}
    return {"count": len(vals), "mean_abs_err_pct": round(sum(vals) / len(vals), 3),
            "max_abs_err_pct": round(max(vals), 3)}


def group_summary(results) -> dict:
    results = list(results)
    n = len(results)
    pred = [r for r in results if r.skipped is None]
    thr = [r for r in results if r.is_throughput]
    thr_pred = [r for r in thr if r.skipped is None]
    entries = [e for r in pred for e in r.entries if not e.get("bound")]
    out = {
        "records": n, "predicted": len(pred), "skipped": n - len(pred),
        "coverage": round(len(pred) / n, 4) if n else None,
        "throughput_records": len(thr), "throughput_predicted": len(thr_pred),
        "throughput_coverage": round(len(thr_pred) / len(thr), 4) if thr else None,
    }
    out.update(_stats(e["error_pct"] for e in entries))
    prim = [r.primary() for r in pred]
    prim = [p for p in prim if p is not None]
    out["primary"] = _stats(p["error_pct"] for p in prim)
    out["primary"]["metrics"] = sorted({p["metric"] for p in prim})
    out["step_time"] = _stats(p.get("time_error_pct") for p in prim if "time_error_pct" in p)
    by_metric: dict[str, list] = {}
    for e in entries:
        by_metric.setdefault(e["metric"], []).append(e["error_pct"])
    out["by_metric"] = {k: _stats(v) for k, v in sorted(by_metric.items())}
    fit = [e for e in entries if "measured_fits" in e]
    if fit:
        out["max_model_size"] = {"records": len(fit), "measured_model_fits": sum(bool(e["measured_fits"]) for e in fit),
                                 "vs_paper_analytic": _stats(
                                     (e["predicted"] - e["paper_analytic"]) / e["paper_analytic"] * 100
                                     for e in fit if e.get("paper_analytic"))}
    return out


def summarize(results) -> dict:
    results = list(results)
    by_source: dict[str, list] = {}
    by_table: dict[str, list] = {}
    for r in results:
        by_source.setdefault(r.source, []).append(r)
        by_table.setdefault(f"{r.source}: {r.table}" if r.table else r.source, []).append(r)
    return {"overall": group_summary(results),
            "by_source": {k: group_summary(v) for k, v in by_source.items()},
            "by_table": {k: group_summary(v) for k, v in by_table.items()}}
