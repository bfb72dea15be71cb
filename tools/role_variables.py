"""Write the README's role-variable tables from each role's meta/argument_specs.yml.

    python tools/role_variables.py          rewrite README.md between the markers
    python tools/role_variables.py --check  exit 1 when README.md is out of date (run by `make lint`)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- BEGIN ROLE VARIABLES (tools/role_variables.py) -->", "<!-- END ROLE VARIABLES -->"


def plain(text) -> str:
    text = " ".join(text) if isinstance(text, list) else str(text or "")
    text = re.sub(r"[CVOM]\(([^)]*)\)", r"`\1`", text)
    return " ".join(text.split()).replace("|", "\\|")


def rows(options: dict, prefix: str = "") -> list[str]:
    out = []
    for name, spec in options.items():
        kind = spec.get("type", "str")
        if kind == "list" and spec.get("elements"):
            kind = f"list of {spec['elements']}"
        default = "required" if spec.get("required") else (f"`{spec['default']}`" if "default" in spec else "")
        if spec.get("choices"):
            kind += " (" + ", ".join(str(c) for c in spec["choices"]) + ")"
        out.append(f"| `{prefix}{name}` | {kind} | {default} | {plain(spec.get('description'))} |")
        if spec.get("options"):
            out += rows(spec["options"], prefix=f"{prefix}{name}[].")
    return out


def render() -> str:
    parts = [BEGIN]
    for role in sorted(p for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").exists()):
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        # A role without a main entry point (deploy: one per play) is described by its first one.
        first = next(iter(specs))
        main = specs.get("main") or specs[first]
        parts += ["", f"### `sturdy.workers.{role.name}`", ""]
        if "main" in specs:
            parts += [plain(main.get("short_description")), ""]
        for entry in (e for e in specs if e != "main"):
            parts += [f"- `tasks_from: {entry}`: {plain(specs[entry].get('short_description'))}"]
        if len(specs) > 1:
            parts += ["", "Variables of the main entry point:" if "main" in specs
                      else f"Variables of `tasks_from: {first}` (the other entry points take the same or fewer):", ""]
        parts += ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
        parts += rows(main.get("options", {}))
    parts += ["", END]
    return "\n".join(parts)


def main() -> int:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + render() + text[end:]
    if "--check" in sys.argv:
        if new != text:
            print("README.md role variables are out of date: run python tools/role_variables.py", file=sys.stderr)
            return 1
        return 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
