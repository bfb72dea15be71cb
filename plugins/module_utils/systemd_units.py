# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure functions that turn process-type declarations into systemd unit settings.

No Ansible imports: the filters and modules of the collection call these, and the unit tests
exercise them directly.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from typing import Any

from ansible_collections.sturdy.workers.plugins.module_utils.names import DEFAULT_MAX_DELIVERIES, socket_unit

# RestartSteps= and RestartMaxDelaySec= exist from systemd 254 on (systemd NEWS v254).
RESTART_BACKOFF_MIN_SYSTEMD = 254

# What one start of a crashing process costs besides the restart delay (fork, exec, interpreter
# start-up, the crash itself). Part of the start-limit window so that the limit still triggers when a
# Python program needs a second or two to fail.
START_ALLOWANCE_SEC = 2

_NEEDS_QUOTES_RE = re.compile(r"[\s\"'\\;]")


class UnitSpecError(ValueError):
    """A declaration that cannot become a unit; the message names the variable and the fix."""


_MEMORY_RE = re.compile(r"^(?:(\d+)([KMGT]?)|(\d+(?:\.\d+)?)%|infinity)$")


def memory_limit(where: str, value: Any) -> tuple[str, int | None] | None:
    """A MemoryHigh=/MemoryMax= value as systemd takes it, with its size in bytes when it has one (None for a
    percentage of RAM or infinity). None when not declared."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    found = _MEMORY_RE.match(text)
    if not found or (found[3] is not None and not 0 < float(found[3]) <= 100):
        raise UnitSpecError(f"{where}={value!r}: give bytes with an optional K, M, G or T suffix (powers of 1024, as "
                            "systemd reads them), a percentage of the host's memory, or infinity; for example 512M")
    if found[1] is None:
        return text, None
    size = int(found[1]) * 1024 ** " KMGT".index(found[2] or " ")
    if size == 0:
        raise UnitSpecError(f"{where}={value!r}: a unit limited to 0 bytes cannot start; give a size such as 512M")
    return text, size


def escape_exec_arg(arg: str) -> str:
    """Quote one argv element for ExecStart= so systemd passes it through unchanged.

    ``%`` would be a unit specifier (``%h`` is root's home, not the host) and ``$`` would expand
    environment variables, which could put secrets from EnvironmentFile= on a command line, so both
    are escaped: the process receives exactly the string that was declared.
    """
    if not isinstance(arg, str):
        raise UnitSpecError(f"command arguments must be strings, got {type(arg).__name__} {arg!r}")
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if arg == ";":
        return "\\;"
    if arg and not _NEEDS_QUOTES_RE.search(arg):
        return escaped
    escaped = (
        escaped.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )
    return f'"{escaped}"'


def exec_line(argv: list[str]) -> str:
    """Render an argv list as the value of ExecStart= (absolute executable required)."""
    if not isinstance(argv, (list, tuple)) or not argv:
        raise UnitSpecError("a command must be a non-empty list of strings (argv), e.g. ['/usr/bin/python3', '-m', 'app']")
    if not isinstance(argv[0], str) or not argv[0].startswith("/"):
        raise UnitSpecError(
            f"the executable {argv[0]!r} is not an absolute path: systemd runs units without a PATH or a "
            "working directory to rely on; give the full path, e.g. /srv/<app>/current/venv/bin/celery"
        )
    return " ".join(escape_exec_arg(a) for a in argv)


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def environment_line(env: dict[str, Any]) -> str:
    """Render a mapping as the value of one Environment= line, every assignment quoted.

    Environment= expands unit specifiers but not variables, so only ``%`` is doubled.
    """
    parts = []
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise UnitSpecError(f"{key!r} is not a valid environment variable name (letters, digits and _, not starting with a digit)")
        text = "" if value is None else str(value)
        if isinstance(value, bool):
            text = "true" if value else "false"
        text = text.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'"{key}={text}"')
    return " ".join(parts)


def delay_grows(restart_sec: int, steps: int, max_delay: int) -> bool:
    """Whether RestartSteps=/RestartMaxDelaySec= make the delay grow (systemd ignores them otherwise)."""
    return steps > 0 and 0 < restart_sec < max_delay


def restart_delays(restart_sec: int, steps: int, max_delay: int, count: int, backoff: bool) -> list[float]:
    """Delays (seconds) systemd waits before automatic restarts 1..count.

    Mirrors service_restart_usec_next() in systemd's src/core/service.c (v254+): the first restart waits
    RestartSec, restart i (2 <= i <= steps) waits RestartSec * (max/RestartSec) ** ((i-1)/steps), later
    ones wait RestartMaxDelaySec. Without backoff (systemd < 254) every delay is RestartSec.
    """
    if not (backoff and delay_grows(restart_sec, steps, max_delay)):
        return [float(restart_sec)] * count
    delays = []
    for i in range(1, count + 1):
        if i <= 1:
            delays.append(float(restart_sec))
        elif i > steps:
            delays.append(float(max_delay))
        else:
            delays.append(restart_sec * (max_delay / restart_sec) ** ((i - 1) / steps))
    return delays


def start_limit_interval(restart_sec: int, steps: int, max_delay: int, burst: int, backoff: bool) -> int:
    """Smallest StartLimitIntervalSec= (whole seconds) in which `burst` fast failures trip the limit.

    systemd allows `burst` starts per window that opens with the first start. A process that fails at
    once is started again after each restart delay, so the (burst+1)-th start comes after the sum of the
    first `burst` delays; the window must be longer than that, plus what each start itself costs.
    With RestartSec=5s and systemd's default 10s/5 the window is too short: the unit loops forever.
    """
    return _window(restart_delays(restart_sec, steps, max_delay, burst, backoff))


def _window(delays: list[float]) -> int:
    return int(math.ceil(sum(delays) + len(delays) * START_ALLOWANCE_SEC))


def rate_per_instance(name: str, rate_limit: Any, fleet: list[list[dict[str, Any]]]) -> float | None:
    """A process type's rate_limit (tasks per second for the whole type) split evenly between its instances on every
    host of `fleet` (each host's declared process types); a singleton counts once. None without a limit."""
    if rate_limit is None:
        return None
    try:
        rate = float(rate_limit)
    except (TypeError, ValueError):
        rate = 0.0
    if not rate > 0:
        raise UnitSpecError(f"sturdy_processes[{name}].rate_limit={rate_limit!r}: give tasks per second greater than 0 "
                            "(for example rate_limit: 20), or leave it out for no limit")
    mine = [p for declared in fleet for p in declared or [] if isinstance(p, dict) and p.get("name") == name]
    if any(p.get("singleton") for p in mine):
        total = 1
    else:
        total = sum(1 if p.get("instances") is None else int(p["instances"]) for p in mine)
    return float(f"{rate / max(total, 1):.4g}")


# celery's global options that take a value (`celery -A proj worker`: proj is not the subcommand).
_CELERY_VALUED_OPTIONS = ("-A", "--app", "-b", "--broker", "--result-backend", "--loader", "--config", "--workdir")


def node_name_option(proc: dict[str, Any]) -> str:
    """` --hostname=<process>%i@%H` for a Celery worker that `celery` itself starts without a node name, so that two
    instances on one host are two nodes (`worker1@host`, `worker2@host`) and not one name twice, which Celery warns
    about and its remote control cannot tell apart. systemd fills in %i (the instance) and %H (the host name); the
    declared arguments cannot carry them, as every % in them is kept literally. A node name given (-n, --hostname) is
    kept; a wrapper script names its node itself."""
    argv = [str(a) for a in proc["command"]]
    program = argv[0].rsplit("/", 1)[-1]
    if program.startswith("python") and argv[1:3] == ["-m", "celery"]:
        program, argv = "celery", argv[2:]
    # The subcommand: the first argument that is neither an option nor the value of one of celery's own.
    words = [a for before, a in zip(["", *argv[1:]], argv[1:])
             if not a.startswith("-") and before not in _CELERY_VALUED_OPTIONS]
    named = any(a == "--hostname" or a.startswith(("--hostname=", "-n")) for a in argv[1:])
    if proc.get("adapter") != "celery" or program != "celery" or words[:1] != ["worker"] or named:
        return ""
    return f" --hostname={proc['name']}%i@%H"


_LISTEN_RE = re.compile(r"^(?:(?P<v4>[0-9.]+)|\[(?P<v6>[0-9A-Fa-f:.]+)\]):(?P<port>\d+)$|^(?P<only>\d+)$")


def listen_addresses(where: str, value: Any) -> list[str]:
    """The ListenStream= values of a process type's socket unit: a port (every address), or an IPv4 or [IPv6]
    address with a port. Empty when the process type binds its own ports."""
    if value is None:
        return []
    found = []
    for item in value if isinstance(value, list) else [value]:
        text = str(item).strip()
        match = None if isinstance(item, bool) else _LISTEN_RE.match(text)
        try:
            if match and (match["v4"] or match["v6"]):
                ipaddress.ip_address(match["v4"] or match["v6"])
        except ValueError:
            match = None
        if not match or not 1 <= int(match["port"] or match["only"]) <= 65535:
            raise UnitSpecError(f"{where}.listen={json.dumps(value)}: {json.dumps(item)} is not a port or an address "
                                "with a port that systemd can listen on; give for example listen: ['127.0.0.1:8000'] "
                                "(or 8000 for every address, '[::1]:8000' for IPv6)")
        if text in found:
            raise UnitSpecError(f"{where}.listen={json.dumps(value)}: {text} is given twice; give each address once")
        found.append(text)
    return found


# Keys of the defaults that steer the plan and are not options of a process type.
_NOT_PROCESS_OPTIONS = ("stop_margin", "singleton_here", "fleet", "max_instances")
# What a path in a unit may look like here: absolute, nothing systemd or the shell would read specially.
_SANDBOX_PATH = re.compile(r"^/[-A-Za-z0-9._/@+:=,~]*$")
# Hidden from the unit by ProtectHome=yes.
_HIDDEN_PATH = re.compile(r"^/(home|root|run/user)(/|$)")


def _check_timing(where: str, proc: dict[str, Any], margin: int) -> None:
    """Refuse a stop timeout that would SIGKILL a task still allowed to run, and restart timing systemd cannot use."""
    if proc["stop_timeout_min"] is not None and int(proc["stop_timeout"]) < proc["stop_timeout_min"]:
        raise UnitSpecError(
            f"{where}.stop_timeout={proc['stop_timeout']}s is shorter than max_task_runtime "
            f"({proc['max_task_runtime']}s) + sturdy_worker_stop_margin ({margin}s): a graceful stop would SIGKILL a "
            f"task that is still allowed to run. Set stop_timeout to at least {proc['stop_timeout_min']}, or leave "
            "it out and the role uses that")
    sec, most, steps, burst, stop = (int(proc[k]) for k in (
        "restart_sec", "restart_max_delay", "restart_steps", "start_limit_burst", "stop_timeout"))
    if sec < 1 or most < sec or steps < 0 or burst < 1 or stop < 1:
        raise UnitSpecError(
            f"{where} restart timing is unusable (restart_sec={sec}, restart_max_delay={most}, restart_steps={steps}, "
            f"start_limit_burst={burst}, stop_timeout={stop}): restart_sec, start_limit_burst and stop_timeout must "
            "be at least 1, restart_max_delay at least restart_sec, restart_steps 0 (no backoff) or more")


def plan_processes(
    processes: list[dict[str, Any]],
    defaults: dict[str, Any],
    systemd_version: int,
) -> list[dict[str, Any]]:
    """Fill the app plan's process types (module_utils/app_plan.py: names, units, accounts, resolved commands)
    with the role defaults and derive what the unit template needs on a host running `systemd_version`.

    Types and option names are argument_specs' job; this fills in, derives, and refuses (UnitSpecError naming the
    option and the fix) what no host could run. A stop timeout that was not declared is raised to cover the declared
    task runtime plus the margin; one that was declared is kept, and refused when it is too short.
    """
    backoff = int(systemd_version) >= RESTART_BACKOFF_MIN_SYSTEMD
    margin = int(defaults.get("stop_margin", 0))
    singleton_here = bool(defaults.get("singleton_here", True))
    fleet = defaults.get("fleet") or []
    most = defaults.get("max_instances")
    planned = []
    for declared in processes:
        proc = {k: v for k, v in defaults.items() if k not in _NOT_PROCESS_OPTIONS}
        proc.update({k: v for k, v in declared.items() if v is not None})
        name = proc["name"]
        where = f"sturdy_processes[{name}]"
        if not 0 <= int(proc.get("instances", 0)) <= (int(most) if most is not None else math.inf):
            raise UnitSpecError(f"{where}.instances={proc['instances']} is out of range: use 0 (stop all) to {most}, "
                                "or raise sturdy_worker_max_instances if you really mean it")
        if proc.get("singleton"):
            # A scheduler runs once in the whole deployment: one instance, on one host.
            if int(proc["instances"]) > 1:
                raise UnitSpecError(f"{where}: singleton process types run one instance; set instances: 1 or "
                                    "drop singleton")
            if proc.get("surge_units"):
                raise UnitSpecError(f"{where}.max_surge: a singleton runs exactly one instance in the whole "
                                    "deployment, and a surge would start a second beside it. Remove max_surge (its "
                                    "restart stops the one instance, then starts it on the new code)")
            if not singleton_here:
                proc["instances"], proc["units"] = 0, []
        if proc.get("adapter", "none") == "celery" and not proc.get("celery_app"):
            raise UnitSpecError(f"{where}: adapter celery needs celery_app, the module of the Celery app as given to "
                                "`celery -A` (for example celery_app: shop.celery)")
        for option in ("max_deliveries", "rate_limit"):
            if declared.get(option) is not None and proc.get("adapter", "none") != "celery":
                raise UnitSpecError(f"{where}.{option}: the sturdy.workers agent enforces it inside Celery workers "
                                    f"only; adapter {proc.get('adapter', 'none')} has none. Remove it, or use "
                                    "adapter: celery")
        proc["max_deliveries"] = int(DEFAULT_MAX_DELIVERIES if proc.get("max_deliveries") is None else proc["max_deliveries"])
        if proc["max_deliveries"] < 1:
            raise UnitSpecError(f"{where}.max_deliveries={proc['max_deliveries']}: a message must be delivered at least "
                                "once; use 1 (never run a message twice) or more")
        if proc.get("surge_units") and proc.get("rate_limit") is not None:
            raise UnitSpecError(f"{where}.max_surge: the instances share rate_limit={proc['rate_limit']} tasks/s "
                                "between them, and surge instances would add their share on top during a restart. "
                                "Remove max_surge (or rate_limit)")
        proc["listen"] = listen_addresses(where, proc.get("listen"))
        if proc["listen"] and proc.get("surge_units"):
            raise UnitSpecError(f"{where}.max_surge: with listen, systemd holds the listening socket while an instance "
                                "restarts, so connections wait for it instead of being refused: no surge is needed, "
                                "and a surge instance's socket would outlive it. Remove max_surge (or listen)")
        # One socket unit per instance (ReusePort: the instances share the port), handed to its service.
        proc["socket_template"] = socket_unit(proc["template"]) if proc["listen"] else ""
        proc["rate_per_instance"] = rate_per_instance(name, proc.get("rate_limit"), fleet or [processes])
        proc["watchdog_sec"] = int(proc.get("watchdog_sec") or 0)
        argv = [str(a) for a in proc.get("command") or []]
        if proc.get("adapter") == "rq" and argv[:1] and argv[0].rsplit("/", 1)[-1] == "rq" \
                and [a for a in argv[1:] if not a.startswith("-")][:1] != ["worker"]:
            raise UnitSpecError(f"{where}: adapter rq runs one RQ worker per instance (`rq worker <queues>`), the "
                                f"unit's main process; {' '.join(argv[:2])} is not one (a worker pool's workers are "
                                "its children, which tell systemd nothing). Use rq worker and instances: N")
        if proc["watchdog_sec"] and proc.get("adapter", "none") != "celery":
            raise UnitSpecError(f"{where}.watchdog_sec: only the agent inside a Celery worker feeds the watchdog; "
                                f"adapter {proc.get('adapter', 'none')} would be killed every {proc['watchdog_sec']}s. "
                                "Remove it, or use adapter: celery")
        proc["start_timeout"] = int(proc.get("start_timeout") or 90)
        proc["readiness_http"] = (proc.get("readiness") or {}).get("http")
        try:
            proc["exec_start"] = exec_line(proc["command"]) + node_name_option(proc)
        except UnitSpecError as exc:
            raise UnitSpecError(f"{where}.command: {exc}") from exc
        try:
            proc["environment_line"] = environment_line(proc.get("environment") or {})
        except UnitSpecError as exc:
            raise UnitSpecError(f"{where}.environment: {exc}") from exc
        memory = {k: memory_limit(f"{where}.{k}", proc.get(k)) for k in ("memory_high", "memory_max")}
        high, top = memory["memory_high"], memory["memory_max"]
        if high and top and high[1] and top[1] and high[1] >= top[1]:
            raise UnitSpecError(f"{where}.memory_high={high[0]} is not below memory_max={top[0]}: the kernel throttles "
                                "and reclaims above memory_high so that memory_max, where it kills, is rarely reached. "
                                "Make memory_high smaller (about 80 % of memory_max), or leave it out")
        proc.update({k: v[0] if v else None for k, v in memory.items()})
        runtime = proc.get("max_task_runtime")
        if runtime is not None and declared.get("stop_timeout") is None:
            proc["stop_timeout"] = max(int(proc["stop_timeout"]), int(runtime) + margin)
        proc["stop_timeout_min"] = None if runtime is None else int(runtime) + margin
        _check_timing(where, proc, margin)
        workdir = [proc["working_directory"]] if proc.get("working_directory") else []
        proc["directories"] = [*workdir, *proc["read_write_paths"]]
        proc["paths"] = [proc["command"][0], *workdir, *proc["environment_files"], *proc["read_write_paths"]]
        for path in proc["paths"]:
            if not _SANDBOX_PATH.match(path) or _HIDDEN_PATH.match(path):
                raise UnitSpecError(
                    f"{where} uses {json.dumps(path)} (command, working_directory, environment_files or "
                    "read_write_paths): paths must be absolute, made of letters, digits and - . _ / @ + : = , ~ (no "
                    "spaces, quotes or %), and outside /home, /root and /run/user, which the unit hides "
                    "(ProtectHome=yes). Install the app under /srv or /opt")
        proc["description"] = proc["description"].replace("%", "%%").replace("\n", " ")
        # What sturdy.workers.rolling_restart needs per instance.
        proc["restart_specs"], surge = ([{"name": u, "http": proc["readiness_http"]} for u in proc[key]]
                                        for key in ("units", "surge_units"))
        proc["rollout"] = {"units": proc["restart_specs"], "max_unavailable": proc["max_unavailable"], "surge": surge}
        timing = [int(proc[k]) for k in ("restart_sec", "restart_steps", "restart_max_delay")]
        proc["restart_backoff"] = backoff and delay_grows(*timing)
        delays = restart_delays(*timing, int(proc["start_limit_burst"]), proc["restart_backoff"])
        proc["start_limit_interval"] = _window(delays)
        proc["restart_delays"] = [round(d, 1) for d in delays]
        planned.append(proc)
    return planned
