"""Re-run every `$ autoplace …` example of the README and the docs pages and write its output back.

    .venv/bin/python benchmarks/regenerate_doc_examples.py [--check] [FILES…]

A documented example is a ```text block whose first line is `$ autoplace ARGS` (a block may hold several
such commands, separated by a blank line); the lines after each are replaced by what `autoplace ARGS` prints now (stdout and stderr, as a terminal of 170 columns would
show them, trailing blanks stripped). Commands run in a temporary folder, so files an example writes
(`--emit`, `--plot`) go nowhere. `profile` examples (real torch runs) are left as they are.
`--check` rewrites nothing, prints the difference and exits 1 when an example's output changed beyond what
varies from run to run (wall-clock seconds and rates, masked by `stable`); CI runs it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```text\n(\$ autoplace [^\n]*)\n(.*?)^```", re.M | re.S)
SKIP = ("$ autoplace profile",)
# What changes between two runs of the same command: elapsed seconds and per-second rates of the search's
# statistics line ("· 0.14 s ·", "in 2.3 s", "(7 points, 9.8 s)", "12,345 plans/s"); everything else must reproduce exactly.
_VARYING = re.compile(r"(?<=[·(] )\d[\d,]*(?:\.\d+)? s\b|(?<=points, )\d[\d,]*(?:\.\d+)? s\b|(?<=in )\d[\d,]*(?:\.\d+)? s\b|\d[\d,.]* (?:plans|evals?)/s\b")


def stable(text: str) -> str:
    """The example's text with the run-to-run varying numbers masked."""
    return _VARYING.sub("<t>", text)


def run(cmd: str, cwd: str) -> str:
    args = shlex.split(cmd[2:])
    env = dict(os.environ, COLUMNS="170", NO_COLOR="1", TERM="dumb")
    p = subprocess.run([sys.executable, "-m", "autoplace", *args[1:]], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    out = (p.stdout + p.stderr).rstrip("\n")
    return "\n".join(line.rstrip() for line in out.split("\n"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    files = [p.resolve() for p in a.files] or [ROOT / "README.md", *sorted((ROOT / "autoplace" / "docs").glob("*.md"))]
    changed = 0
    with tempfile.TemporaryDirectory(prefix="autoplace-docs-") as cwd:
        for f in files:
            text = f.read_text(encoding="utf-8")

            def repl(m):
                nonlocal changed
                body = m.group(1) + "\n" + m.group(2)
                cmds = [line for line in body.split("\n") if line.startswith("$ autoplace ")]
                if any(c.startswith(SKIP) for c in cmds):
                    return m.group(0)
                outs = []
                for cmd in cmds:     # a block may hold several commands, each followed by its output
                    outs.append(f"{cmd}\n{run(cmd, cwd)}")
                    print(f"{f.relative_to(ROOT)}: {cmd}", file=sys.stderr)
                fresh = "\n\n".join(outs) + "\n"
                if (stable(fresh) != stable(body)) if a.check else (fresh != body):
                    changed += 1
                    if a.check:
                        sys.stderr.writelines(difflib.unified_diff(
                            body.splitlines(True), fresh.splitlines(True), f"{f.name} (documented)", "now", n=1))
                return f"```text\n{fresh}```"

            new = BLOCK.sub(repl, text)
            if new != text and not a.check:
                f.write_text(new, encoding="utf-8")
    print(f"{changed} example(s) {'differ' if a.check else 'rewritten'}", file=sys.stderr)
    return 1 if (a.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
