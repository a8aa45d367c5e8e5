"""Self-contained HTML reports (`--report FILE.html`): the tables and the pictures of a command in
one file — PNGs embedded as base64 data URIs, inline CSS, no script and no external resource — so
it opens anywhere and can be mailed or attached to a ticket. Written atomically.

A report is a title and a list of sections; a section has a heading, paragraphs, tables
({caption, columns, rows}) and pictures ({file name: PNG bytes}). The `*_sections` builders turn
the documents of estimate / search / sweep / compare into sections."""

from __future__ import annotations

import base64
import html
from pathlib import Path

GIB = 2**30

CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1200px;color:#222;
background:#fff;line-height:1.4}
h1{font-size:22px;border-bottom:2px solid #4c72b0;padding-bottom:6px}
h2{font-size:17px;margin-top:28px;color:#27466f}
p{margin:6px 0}
table{border-collapse:collapse;margin:10px 0 16px;font-size:13px}
caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border:1px solid #ccd;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#eef2f8}
td.l,th.l{text-align:left}
tr.hl td{background:#fff6d8;font-weight:600}
figure{margin:12px 0}
figure img{max-width:100%;border:1px solid #dde}
figcaption{font-size:12px;color:#555}
footer{margin-top:32px;font-size:11px;color:#777}
"""


def _cell(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


def _table(t: dict) -> str:
    cols = t["columns"]
    left = set(t.get("left", ()))
    hl = set(t.get("highlight", ()))
    out = ["<table>"]
    if t.get("caption"):
        out.append(f"<caption>{html.escape(t['caption'])}</caption>")
    out.append("<tr>" + "".join(f"<th class='l'>{html.escape(c)}</th>" if c in left else f"<th>{html.escape(c)}</th>"
                                for c in cols) + "</tr>")
    for i, row in enumerate(t["rows"]):
        cls = " class='hl'" if i in hl else ""
        out.append(f"<tr{cls}>" + "".join(
            ("<td class='l'>" if c in left else "<td>") + html.escape(_cell(v)) + "</td>"
            for c, v in zip(cols, row)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _img(name: str, data: bytes) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return (f"<figure><img alt='{html.escape(name)}' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{html.escape(name)}</figcaption></figure>")


def render_html(title: str, sections: list[dict], footer: str = "") -> str:
    body = [f"<h1>{html.escape(title)}</h1>"]
    for s in sections:
        if s.get("heading"):
            body.append(f"<h2>{html.escape(s['heading'])}</h2>")
        body += [f"<p>{html.escape(p)}</p>" for p in s.get("text", ())]
        body += [_table(t) for t in s.get("tables", ())]
        body += [_img(n, d) for n, d in (s.get("pictures") or {}).items()]
    if footer:
        body.append(f"<footer>{html.escape(footer)}</footer>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(path, title: str, sections: list[dict], footer: str = "") -> Path:
    from autoplace._version import __version__
    from autoplace.io import atomic_write_bytes
    return atomic_write_bytes(path, render_html(title, sections, footer or f"autoplace {__version__}").encode("utf-8"))


# ---- section builders -------------------------------------------------------------------------
def _gib(x) -> float:
    return round(x / GIB, 2)


def plan_sections(doc: dict, pictures: dict | None = None, heading: str = "plan") -> list[dict]:
    """Memory per stage, communication per axis and the step-time breakdown of one estimate document."""
    p = doc["plan"]
    txt = [f"{doc['model']['name']} on {doc['hardware']['gpus']} × {doc['hardware']['name']}; seq "
           f"{doc['training']['seq_len']}, global batch {doc['training']['global_batch']}",
           "plan: " + ", ".join(f"{k}={p[k]}" for k in ("dp", "tp", "pp", "vpp", "cp", "ep", "zero", "sp",
                                                          "recompute", "offload", "mbs", "schedule"))]
    if not doc["legal"]:
        return [{"heading": heading, "text": txt + ["illegal plan"], "tables": [{
            "caption": "violated rules", "columns": ["rule", "reason"], "left": ["rule", "reason"],
            "rows": [[v["rule"], v["message"]] for v in doc["violations"]]}]}]
    mem = doc["memory"]
    terms = ("params", "grads", "optimizer", "activations", "transient", "overhead", "total")
    tables = [{"caption": f"memory per rank (GiB), limit {_gib(mem['limit_bytes'])} — "
                          + ("fits" if mem["fits"] else "DOES NOT FIT"),
               "columns": ["stage", *terms], "highlight": [mem["binding_stage"]],
               "rows": [[s["stage"], *[_gib(s[k]) for k in terms]] for s in mem["per_stage"]]},
              {"caption": "communication per rank per step (GB)", "columns": list(doc["communication"]["bytes_per_step"]),
               "rows": [[round(v / 1e9, 3) for v in doc["communication"]["bytes_per_step"].values()]]}]
    if "time" in doc:
        tm = doc["time"]
        txt.append(f"step {tm['step_s']:.3f} s · {tm['tokens_per_s_per_gpu']:,.0f} tok/s/GPU · MFU {tm['mfu']:.1%}"
                   f" · {tm['tflops_per_gpu']:.0f} TFLOP/s/GPU")
        tables.append({"caption": "step-time breakdown (after overlap)", "columns": ["term", "seconds", "share"],
                       "left": ["term"], "rows": [[k, round(v, 4), f"{v / tm['step_s']:.1%}"]
                                                  for k, v in tm["breakdown_s"].items() if v > 0]})
    return [{"heading": heading, "text": txt, "tables": tables, "pictures": pictures or {}}]


def search_sections(docs: list, stats: dict, families: list | None = None, pictures: dict | None = None) -> list[dict]:
    cols = ["#", *(["family"] if families else []), "plan", "step s", "tok/s/GPU", "MFU", "peak GiB"]
    rows = []
    for i, d in enumerate(docs):
        from autoplace.plan import Plan
        rows.append([i + 1, *([families[i]] if families else []), Plan.from_dict(d["plan"]).short(),
                     round(d["time"]["step_s"], 4), round(d["time"]["tokens_per_s_per_gpu"]),
                     f"{d['time']['mfu']:.1%}", _gib(d["memory"]["peak_bytes"])])
    legal = f"{stats['legal']:,} legal · " if stats.get("legal") is not None else ""
    head = {"heading": "search", "text": [f"{stats.get('candidates', 0):,} candidates · {legal}"
                                          f"{stats.get('evaluated', 0):,} evaluated · method {stats.get('method')}"],
            "tables": [{"caption": "best plan per family" if families else "top plans", "columns": cols,
                        "left": ["plan", "family"], "rows": rows, "highlight": [0]}]}
    return [head] + plan_sections(docs[0], pictures, heading="winner")


def sweep_sections(sweep: dict, pictures: dict | None = None) -> list[dict]:
    from autoplace.analysis.inputs import fmt_duration
    rows, hl = [], []
    dl = sweep.get("deadline") or {}
    for i, r in enumerate(sweep["rows"]):
        if r["status"] != "ok":
            rows.append([r["gpus"], r["hardware"], r["seq_len"], r["global_batch"], r["status"] + ": " +
                         (r.get("over") or r["message"])[:160], None, None, None, None, None, None, ""])
            continue
        rows.append([r["gpus"], r["hardware"], r["seq_len"], r["global_batch"], r["plan_short"], round(r["step_s"], 4),
                     round(r["tokens_per_s"]), f"{r['mfu']:.1%}", fmt_duration(r["time_to_train_s"]),
                     None if r["gpu_hours"] is None else round(r["gpu_hours"]),
                     None if r["cost"] is None else round(r["cost"]),
                     ("Pareto" if r["pareto"] else "") + (" · pick" if dl.get("pick") == i else "")])
        if dl.get("pick") == i:
            hl.append(i)
    text = [f"{len(sweep['rows'])} points in {sweep['stats']['seconds']:.1f} s"]
    if dl:
        text.append(dl.get("reason", ""))
    return [{"heading": "sweep", "text": text, "pictures": pictures or {}, "tables": [{
        "caption": "best plan per point", "left": ["hardware", "plan", "note"], "highlight": hl,
        "columns": ["GPUs", "hardware", "seq", "batch", "plan", "step s", "tok/s", "MFU", "time to train",
                    "GPU-h", "cost", "note"], "rows": rows}]}]


def compare_sections(cmp: dict, pictures: dict | None = None) -> list[dict]:
    la, lb = cmp["labels"]
    t = [{"caption": "step-time terms (s)", "columns": ["term", la, lb, f"{lb} − {la}"], "left": ["term"],
          "rows": [[r["term"], round(r["a"], 4), round(r["b"], 4), round(r["b"] - r["a"], 4)] for r in cmp["terms"]]},
         {"caption": "communication per rank per step (GB) and its exposed time (s)",
          "columns": ["axis", f"{la} GB", f"{lb} GB", f"{la} s", f"{lb} s"], "left": ["axis"],
          "rows": [[r["axis"], round(r["a_bytes"] / 1e9, 3), round(r["b_bytes"] / 1e9, 3),
                    None if r["a_s"] is None else round(r["a_s"], 4), None if r["b_s"] is None else round(r["b_s"], 4)]
                   for r in cmp["communication"]]},
         {"caption": "memory per stage (GiB)", "columns": ["stage", *[f"{lab} {k}" for lab in (la, lb)
                                                                      for k in ("states", "activations", "total")]],
          "rows": [[r["stage"], *[None if v is None else _gib(v) for v in r["values"]]] for r in cmp["memory"]]}]
    return [{"heading": "comparison", "text": [cmp["verdict"]["sentence"], f"{la}: {cmp['plans'][0]}",
                                               f"{lb}: {cmp['plans'][1]}"], "tables": t, "pictures": pictures or {}}]
