"""Fail when a role's defaults and its meta/argument_specs.yml drift apart, or a name breaks the convention.

- every variable in defaults/main.yml is documented in argument_specs (in one of its entry points);
- every documented option that is not required has a default in defaults/main.yml;
- required options have no default (a default would make `required` meaningless);
- names: collection-wide inputs start with `sturdy_`, a role's own knobs with `sturdy_<role>_` (or
  `sturdy_<entry point>_` for an entry point's own, such as sturdy_status_ in observe's `status`),
  internal values with `__` (docs/architecture.md). This replaces ansible-lint's var-naming[no-role-prefix], whose
  `<role>_` prefix would clash across the collection's roles.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
COLLECTION_WIDE = {
    "sturdy_app", "sturdy_processes", "sturdy_build_id", "sturdy_artifact",
    "sturdy_secrets", "sturdy_secrets_delivery", "sturdy_secrets_generation", "sturdy_secure_logging",
    # Owned by one role, read by the others that must agree with it (where releases live, who runs them, the
    # migration the deploy checks inside the release).
    "sturdy_release_root", "sturdy_worker_user", "sturdy_worker_group", "sturdy_migrate_command",
}


def check_role(role: Path) -> list[str]:
    problems = []
    defaults_file = role / "defaults" / "main.yml"
    specs_file = role / "meta" / "argument_specs.yml"
    if not specs_file.exists():
        return [f"{role.name}: meta/argument_specs.yml is missing"]
    defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.exists() else {}
    # Entry points (main, switch, ...) share defaults/main.yml: check the union of their options.
    options: dict = {}
    prefixes: dict[str, set] = {}
    for entry_name, entry in yaml.safe_load(specs_file.read_text())["argument_specs"].items():
        for name, spec in (entry.get("options") or {}).items():
            prefixes.setdefault(name, {f"sturdy_{role.name}_"}).add(f"sturdy_{entry_name}_")
            merged = options.setdefault(name, dict(spec))
            merged["required"] = merged.get("required", False) or spec.get("required", False)
    for name in sorted(set(defaults) - set(options)):
        problems.append(f"{role.name}: {name} is in defaults/main.yml but not documented in meta/argument_specs.yml")
    for name, spec in sorted(options.items()):
        if spec.get("required") and name in defaults:
            problems.append(f"{role.name}: {name} is required but has a default in defaults/main.yml")
        if not spec.get("required") and name not in defaults:
            problems.append(f"{role.name}: {name} is optional but has no default in defaults/main.yml")
        if name not in COLLECTION_WIDE and not name.startswith(tuple(prefixes[name] - {"sturdy_main_"})):
            problems.append(
                f"{role.name}: {name} should be named sturdy_{role.name}_... (or be a collection-wide sturdy_ input)"
            )
    return problems


def main() -> int:
    problems = [p for role in sorted((ROOT / "roles").iterdir()) if role.is_dir() for p in check_role(role)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
