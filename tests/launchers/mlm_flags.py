"""Megatron-LM's argument table as data, and a check of an argument list against it.

No PyPI package ships `megatron/training/arguments.py` and CI reaches only PyPI and Debian, so the parse
of the emitted flags by Megatron-LM's own `parse_args` + `validate_args` (mlm_parse.py) runs only where a
checkout exists. What CI can always check is the table that parser builds: every option of a release
(option strings, nargs, type, choices, whether it takes a value), extracted from that release's own
`ArgumentParser` (not read from the source text) and kept in tests/data/megatron_lm_flags/TAG.json.

    PYTHONPATH=CHECKOUT python tests/launchers/mlm_flags.py TAG     writes tests/data/megatron_lm_flags/TAG.json

`check_argv(argv, table)` applies what argparse would: unknown options (Megatron builds its parser with
allow_abbrev=False, so only exact names), the number of values each option takes, int/float conversion
and choices. The validators of `validate_args` are not in the table; mlm_parse.py runs them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

TABLES = Path(__file__).resolve().parents[1] / "data" / "megatron_lm_flags"
_NUMBER = re.compile(r"^-\d|^-\.\d")


def load_table(tag: str) -> dict:
    return json.loads((TABLES / f"{tag}.json").read_text())


def _extract() -> dict:
    """Build the release's parser (parse_args with the argv empty, the parser caught before it parses)."""
    import argparse

    from mlm_parse import _import_arguments
    A = _import_arguments()
    caught = {}

    class _Caught(Exception):
        pass

    def grab(self, *a, **kw):
        caught["parser"] = self
        raise _Caught

    argparse.ArgumentParser.parse_args = grab
    argparse.ArgumentParser.parse_known_args = grab
    sys.argv = ["pretrain_gpt.py"]
    try:
        A.parse_args()
    except _Caught:
        pass
    parser = caught["parser"]
    options = {}
    for act in parser._actions:
        if not act.option_strings or isinstance(act, argparse._HelpAction):
            continue
        typ = act.type
        tname = None if typ is None else typ.__name__ if typ in (int, float, str) else "callable"
        choices = list(act.choices) if act.choices is not None else None
        if choices is not None and not all(isinstance(c, (str, int, float)) for c in choices):
            choices = None
        entry = {"dest": act.dest, "nargs": 0 if act.nargs == 0 else act.nargs, "type": tname, "choices": choices}
        for s in act.option_strings:
            options[s] = entry
    return {"allow_abbrev": parser.allow_abbrev, "options": dict(sorted(options.items()))}


def _values_ok(n, values) -> bool:
    k = len(values)
    if n is None:
        return k == 1
    if n == "?":
        return k <= 1
    if n == "*":
        return True
    if n == "+":
        return k >= 1
    return k == int(n)


def check_argv(argv: list[str], table: dict) -> list[str]:
    """Everything Megatron-LM's parser at this table's release would refuse in `argv`, one line each."""
    opts, errors, i = table["options"], [], 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("-") or _NUMBER.match(tok):
            errors.append(f"stray value {tok!r}")
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        j = i + 1
        values = [inline] if eq else []
        while not eq and j < len(argv) and (not argv[j].startswith("-") or _NUMBER.match(argv[j])):
            values.append(argv[j])
            j += 1
        i = j
        spec = opts.get(name)
        if spec is None:
            errors.append(f"unrecognized argument {name}")
            continue
        n = spec["nargs"]
        if n == 0:
            if values:
                errors.append(f"{name} takes no value, got {values}")
            continue
        if not _values_ok(n, values):
            errors.append(f"{name} takes nargs={n!r}, got {values}")
            continue
        for v in values:
            if spec["type"] in ("int", "float"):
                try:
                    v = int(v) if spec["type"] == "int" else float(v)
                except ValueError:
                    errors.append(f"{name}: invalid {spec['type']} value {v!r}")
                    continue
            if spec["choices"] is not None and v not in spec["choices"]:
                errors.append(f"{name}: invalid choice {v!r} (choose from {spec['choices']})")
    return errors


def main():
    tag = sys.argv[1]
    table = _extract()
    TABLES.mkdir(parents=True, exist_ok=True)
    out = TABLES / f"{tag}.json"
    out.write_text(json.dumps({"tag": tag, **table}, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(table['options'])} option strings")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
