"""What ships with autoplace, by name: hardware profiles, model presets, runtimes, search spaces and
launchers (`autoplace list KIND`, the docs site's lists). Reads the shipped files' own descriptions."""

from __future__ import annotations

KINDS = ("hardware", "models", "runtimes", "spaces", "launchers")


def _toml_head(path) -> str:
    """A TOML file's `description`, else its first comment line."""
    text = path.read_text(encoding="utf-8")
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("description") and "=" in s:
            return s.split("=", 1)[1].strip().strip('"')
    head = []
    for line in text.splitlines():
        if not line.startswith("#") or not line.lstrip("# ").strip():
            break
        head.append(line.lstrip("# ").strip())
    return " ".join(head).split(": ")[0]


def entries(kind: str) -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped item of `kind`."""
    if kind == "hardware":
        from autoplace.specs.hardware import PROFILE_DIR, available_profiles
        return [(n, _toml_head(PROFILE_DIR / f"{n}.toml")) for n in available_profiles()]
    if kind == "models":
        from autoplace.specs.presets import _TABLE
        return [(k, desc) for k, (_spec, desc) in _TABLE.items()]
    if kind == "runtimes":
        from autoplace.runtimes import RUNTIME_DIR, available_runtimes
        return [(n, _toml_head(RUNTIME_DIR / f"{n}.toml")) for n in available_runtimes()]
    if kind == "spaces":
        from autoplace.search.space import SPACE_ALIASES, SPACE_DIR
        out = [(p.stem, _toml_head(p)) for p in sorted(SPACE_DIR.glob("*.toml"))]
        out += [(a, f"the default space cut to the '{rt}' runtime's capabilities") for a, rt in SPACE_ALIASES.items()]
        out.append(("runtime:NAME", "the default space cut to any runtime"))
        return out
    if kind == "launchers":
        from autoplace.export.registry import LAUNCHERS
        return [(n, f"writes {', '.join(lau.files)}" + (f"; runs the '{lau.runtime}' runtime" if lau.runtime
                                                          else "; starts any runtime"))
                for n, lau in LAUNCHERS.items()]
    from autoplace.errors import InputError
    raise InputError(f"list: unknown kind '{kind}'; choose one of {', '.join(KINDS)}")
