# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process declaration (sturdy_processes) checked before anything is planned or changed.

Each option of a process type has a kind and, for numbers, a least value; a problem is one line naming the
variable, the value as given and the fix. The options are those of the worker role's argument spec
(roles/worker/meta/argument_specs.yml; tests/unit keeps the two in step). The rules that span options (a singleton
of two instances, a rate limit without the agent) stay in module_utils/systemd_units.py and app_plan.py; this
module runs them too, and turns what they refuse into the same one line.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

# Option: (kind, least value for numbers, an example of the fix).
OPTIONS: dict[str, tuple[str, float | None, str]] = {
    "name": ("str", None, "name: worker"),
    "command": ("argv", None, "command: [bin/shop-worker, --concurrency, '4']"),
    "instances": ("int", 0, "instances: 2 (0 stops them all)"),
    "description": ("str", None, "description: Shop worker"),
    "user": ("str", None, "user: shop"),
    "group": ("str", None, "group: shop"),
    "working_directory": ("str", None, "working_directory: /srv/shop/current"),
    "environment": ("environment", None, "environment: {SHOP_REGION: eu}"),
    "environment_files": ("strings", None, "environment_files: [/etc/shop/extra.env]"),
    "read_write_paths": ("strings", None, "read_write_paths: [/srv/shop/media]"),
    "restart": ("choice", None, "restart: on-failure"),
    "restart_sec": ("int", 1, "restart_sec: 2"),
    "restart_steps": ("int", 0, "restart_steps: 5 (0: no backoff)"),
    "restart_max_delay": ("int", 1, "restart_max_delay: 60"),
    "start_limit_burst": ("int", 1, "start_limit_burst: 5"),
    "stop_timeout": ("int", 1, "stop_timeout: 300"),
    "memory_high": ("str", None, "memory_high: 400M"),
    "memory_max": ("str", None, "memory_max: 512M"),
    "max_task_runtime": ("int", 1, "max_task_runtime: 120 (seconds)"),
    "adapter": ("choice", None, "adapter: celery"),
    "celery_app": ("str", None, "celery_app: shop.celery"),
    "queues": ("strings", None, "queues: [default, emails]"),
    "readiness": ("readiness", None, "readiness: {http: 'http://127.0.0.1:8000/health'}"),
    "watchdog_sec": ("int", 0, "watchdog_sec: 30 (0: off)"),
    "start_timeout": ("int", 1, "start_timeout: 90"),
    "smoke_command": ("argv", None, "smoke_command: [bin/smoke]"),
    "max_deliveries": ("int", 1, "max_deliveries: 5"),
    "rate_limit": ("number", 0, "rate_limit: 20 (tasks per second)"),
    "max_surge": ("size", None, "max_surge: 1, or '25%'"),
    "max_unavailable": ("size", None, "max_unavailable: 1, or '25%'"),
    "singleton": ("bool", None, "singleton: true"),
    "listen": ("listen", None, "listen: ['127.0.0.1:8000']"),
}
CHOICES = {
    "restart": ("always", "on-failure", "on-abnormal", "on-abort", "on-watchdog", "no"),
    "adapter": ("none", "celery", "rq", "command"),
}
REQUIRED = ("name", "command")


def _show(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _whole(value: Any) -> int | None:
    """An int as Ansible's argument spec takes one (2 or "2"); None for anything else (True, 1.5, "two")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _option_problem(key: str, value: Any) -> str:
    """What is wrong with one option's value ("" when nothing is), without the variable's name."""
    kind, least, example = OPTIONS[key]
    if kind in ("int", "number"):
        number = _whole(value) if kind == "int" else _number(value)
        what = "a whole number" if kind == "int" else "a number"
        if number is None:
            return f"give {what}, for example {example}"
        if least is not None and (number < least or (kind == "number" and number <= least)):
            bound = f"greater than {least:g}" if kind == "number" else f"{least:g} or more"
            return f"give {what} {bound}, for example {example}"
        return ""
    if kind == "str":
        return "" if isinstance(value, str) and value else f"give a non-empty string, for example {example}"
    if kind == "bool":
        return "" if isinstance(value, bool) else f"give true or false, for example {example}"
    if kind == "choice":
        return "" if value in CHOICES[key] else f"give one of {', '.join(CHOICES[key])}"
    if kind == "argv":
        if isinstance(value, list) and value and all(isinstance(a, str) for a in value) and value[0]:
            return ""
        return f"give a list of strings (an argv, not one string), for example {example}"
    if kind == "strings":
        if isinstance(value, list) and all(isinstance(a, str) and a for a in value):
            return ""
        return f"give a list of non-empty strings, for example {example}"
    if kind == "environment":
        if not isinstance(value, dict):
            return f"give a mapping of names to values, for example {example}"
        bad = sorted(str(k) for k, v in value.items() if isinstance(v, (dict, list, bool)) or v is None)
        return (f"{bad[0]} is not a string or a number; give each variable one value, for example {example}"
                if bad else "")
    if kind == "readiness":
        if isinstance(value, dict) and set(value) <= {"http"} and isinstance(value.get("http", ""), str):
            return ""
        return f"give a mapping with http, the URL that must answer 2xx, for example {example}"
    if kind == "listen":
        # A port or an address with a port, or a list of them; what each may be is checked with the plan.
        items = value if isinstance(value, list) else [value]
        if items and all(isinstance(a, (int, str)) and not isinstance(a, bool) and str(a) for a in items):
            return ""
        return f"give the addresses the socket listens on, for example {example}"
    if kind == "size":
        if _whole(value) is not None and _whole(value) >= 0:
            return ""
        if isinstance(value, str) and value.endswith("%") and _whole(value[:-1]) is not None \
                and 0 <= int(value[:-1]) <= 100:
            return ""
        return f"give a number of instances or a percentage of them, for example {example}"
    return ""


def problems(processes: Any) -> list[str]:
    """Every problem of a declaration as given, one line each: its shape, each process type's option names, kinds
    and least values. Empty when the declaration can be planned."""
    if processes is None:
        return []
    if not isinstance(processes, list):
        return [f"sturdy_processes={_show(processes)[:80]} is not a list: declare one mapping per process type, "
                "for example sturdy_processes: [{name: worker, command: [bin/shop-worker]}]"]
    found = []
    for index, declared in enumerate(processes):
        if not isinstance(declared, dict):
            found.append(f"sturdy_processes[{index}]={_show(declared)[:80]} is not a mapping: give name, command and "
                         "the other options of the process type, for example {name: worker, command: [bin/worker]}")
            continue
        name = declared.get("name")
        where = f"sturdy_processes[{name if isinstance(name, str) and name else index}]"
        for key in REQUIRED:
            if declared.get(key) is None:
                found.append(f"{where}.{key} is missing: every process type needs one, for example "
                             f"{OPTIONS[key][2]}")
        for key, value in declared.items():
            if key not in OPTIONS:
                close = difflib.get_close_matches(str(key), list(OPTIONS), n=1, cutoff=0.6)
                found.append(f"{where} has no option {key}" + (f": did you mean {close[0]}?" if close else
                             f"; the options are {', '.join(sorted(OPTIONS))}"))
            elif value is not None:
                problem = _option_problem(key, value)
                if problem:
                    found.append(f"{where}.{key}={_show(value)}: {problem}")
    return found
