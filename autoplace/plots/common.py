"""matplotlib set-up (Agg, no display), PNG encoding, atomic writes."""

from __future__ import annotations

import io
from pathlib import Path

GIB = 2**30
# one colour per memory term / step-time term, shared by every picture
MEM_TERMS = ("params", "grads", "optimizer", "activations", "transient", "reserve", "overhead")
MEM_COLORS = ("#4c72b0", "#55a868", "#c44e52", "#dd8452", "#8172b3", "#cccccc", "#937860")
TERM_COLORS = {"compute": "#4c72b0", "recompute": "#64b5cd", "tp_comm": "#dd8452", "dp_comm_exposed": "#c44e52",
               "pp_bubble": "#bbbbbb", "pp_comm": "#8c8c8c", "cp_comm": "#8172b3", "ep_comm": "#da8bc3", "host": "#ccb974",
               "optimizer": "#55a868", "offload": "#937860", "overhead": "#333333"}


def pyplot():
    """matplotlib.pyplot on the Agg backend (imported on first use: the CLI starts fast)."""
    from autoplace._imports import require
    matplotlib = require("matplotlib", "--plot / --report")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def png_bytes(fig, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return buf.getvalue()


def write_pictures(pictures: dict, out_dir) -> list[Path]:
    """{file name: PNG bytes} → files in out_dir (atomic); returns the paths."""
    from autoplace.io import atomic_write_bytes
    out = []
    for name, data in pictures.items():
        out.append(atomic_write_bytes(Path(out_dir) / name, data))
    return out
