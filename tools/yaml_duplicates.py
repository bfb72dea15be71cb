"""Report what the collection's YAML writes twice: the same Jinja expression, or the same task, in two places.

The `duplicates` tool reads code, not YAML. Here every task in roles/ and playbooks/ is reduced to its
module and arguments (its name and comments do not count), and every Jinja expression (a templated string,
or a bare `when`/`that`/`failed_when`/`changed_when` condition) to its text with whitespace collapsed.
Whatever appears twice and is long enough to be a rule rather than a reference (a variable name, a short
filter) is reported with both places; `make lint` fails on any. Fix by computing it once: a var, a fact,
a task file, or the app plan.

    python tools/yaml_duplicates.py            # the tree
    python tools/yaml_duplicates.py FILE...    # some files (the tests use this)
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# Shorter expressions are references (`{{ sturdy_app }}`, `item.name`), not rules worth a name of their own.
MIN_EXPRESSION = 60
# A task whose module and arguments serialise shorter than this is a call, not a block worth a task file.
MIN_TASK = 160
# Tokens two expressions must share in a row to count as one rule written twice.
WINDOW = 14
CONDITIONS = ("when", "that", "failed_when", "changed_when", "until")
TASK_KEYS_IGNORED = ("name", "tags", "register", "loop_control", "no_log", "vars")
BLOCK_KEYS = ("block", "rescue", "always")


class Loader(yaml.SafeLoader):
    """Keeps line numbers: every mapping gets its starting line under '__line__'."""


def _mapping(loader, node):
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "__line__"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def normalise(text: str) -> str:
    return " ".join(text.split())


def expressions(value, key=None):
    """Every Jinja expression in a value: templated strings, and bare conditions."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k != "__line__":
                yield from expressions(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from expressions(v, key)
    elif isinstance(value, str):
        if "{{" in value or "{%" in value:
            yield from (normalise(m) for m in re.findall(r"{{(.*?)}}", value, re.S))
        elif key in CONDITIONS:
            yield normalise(value)


def tasks(items, where: str):
    """Tasks (and the tasks inside blocks) of a task list, with their line."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        if any(k in item for k in BLOCK_KEYS):
            for key in BLOCK_KEYS:
                yield from tasks(item.get(key), where)
            continue
        yield item


def task_lists(doc, path: Path):
    """The task lists of a file: a task file is one, a playbook has one per play section."""
    rel = relative(path)
    if "/tasks/" in rel or "/handlers/" in rel:
        yield doc
    elif isinstance(doc, list) and rel.startswith("playbooks/"):
        for play in doc:
            if isinstance(play, dict):
                for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                    yield play.get(section)


TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|[A-Za-z_][A-Za-z0-9_.]*|\d+|[^\sA-Za-z0-9_]")


# `root=sturdy_release_root`, `x=y | default('')`: an input handed on is wiring, not a rule.
PASSED_ON = re.compile(r"\b[A-Za-z_]\w*\s*=\s*[A-Za-z_][\w.]*(\s*\|\s*default\([^()]*\))?\s*(?=[,)])")


def shared_runs(exprs: dict[str, list[str]]) -> list[str]:
    """Runs of WINDOW tokens that two different expressions share (a rule written inside two longer ones)."""
    windows: dict[tuple, set[tuple[str, str]]] = defaultdict(set)
    for expr, places in exprs.items():
        tokens = TOKEN.findall(PASSED_ON.sub("", expr))
        for i in range(len(tokens) - WINDOW + 1):
            for place in places:
                windows[tuple(tokens[i:i + WINDOW])].add((place, expr))
    reported: set[frozenset] = set()
    found = []
    for window, where in sorted(windows.items()):
        exprs_here = {e for dummy, e in where}
        key = frozenset(exprs_here)
        if len(exprs_here) > 1 and key not in reported:
            reported.add(key)
            found.append(f"a rule written {len(exprs_here)} times: ... {' '.join(window)} ...\n    "
                         + "\n    ".join(sorted({p for p, dummy in where})))
    return found


def relative(path: Path) -> str:
    parts = path.parts
    for anchor in ("roles", "playbooks"):
        if anchor in parts:
            return "/".join(parts[parts.index(anchor):])
    return str(path)


def scan(paths: list[Path]) -> list[str]:
    seen_expr: dict[str, list[str]] = defaultdict(list)
    seen_task: dict[str, list[str]] = defaultdict(list)
    every_expr: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        rel = relative(path)
        doc = yaml.load(path.read_text(), Loader=Loader)  # noqa: S506 (SafeLoader subclass)
        for items in task_lists(doc, path):
            for task in tasks(items, rel):
                body = _strip({k: v for k, v in task.items() if k not in TASK_KEYS_IGNORED})
                text = json.dumps(body, sort_keys=True)
                if len(text) >= MIN_TASK:
                    seen_task[text].append(f"{rel}:{task['__line__']} ({task.get('name', '?')})")
        for number, expr in enumerate(expressions(doc)):
            every_expr[expr].append(f"{rel}#{number}")
            if len(expr) >= MIN_EXPRESSION and rel not in seen_expr[expr]:
                seen_expr[expr].append(rel)
    found = []
    for expr, places in sorted(seen_expr.items()):
        if len(places) > 1:
            found.append(f"expression in {len(places)} files: {{{{ {expr} }}}}\n    " + "\n    ".join(sorted(places)))
    for places in seen_task.values():
        if len(places) > 1:
            found.append(f"the same task {len(places)} times:\n    " + "\n    ".join(places))
    found += shared_runs(every_expr)
    # The same expression twice in one file counts too (two tasks computing one rule).
    for path in paths:
        rel = relative(path)
        counts: dict[str, int] = defaultdict(int)
        for expr in expressions(yaml.load(path.read_text(), Loader=Loader)):  # noqa: S506
            if len(expr) >= MIN_EXPRESSION:
                counts[expr] += 1
        found += [f"expression {n} times in {rel}: {{{{ {expr} }}}}" for expr, n in sorted(counts.items()) if n > 1]
    return found


def tree() -> list[Path]:
    return sorted([*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"),
                   *ROOT.glob("roles/*/vars/*.yml"), *ROOT.glob("roles/*/defaults/*.yml"),
                   *ROOT.glob("playbooks/*.yml")])


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or tree()
    found = scan(paths)
    for entry in found:
        print(entry)
    if found:
        print(f"\n{len(found)} duplicate(s) in roles/ and playbooks/: compute each once (a var, a fact, a task file, "
              "or the app plan) and refer to it.", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
