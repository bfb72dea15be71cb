# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a framework's worker is smoke-tested, behind one small interface, and how a one-off command runs in the
environment the units get. Pure logic: building argv and reading answers; the modules run the commands.

An adapter turns "send a smoke job to these queues and wait" into commands run on the host, and their output into
one entry per queue: {"queue", "ok", "answer" | "error", "latency"}. The answer of a worker is the agent's
(roles/release/files/sturdy_agent/): build_id, release, cwd, host, unit, pid, queues, settings.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from typing import Any

from ansible_collections.sturdy.workers.plugins.module_utils.names import SMOKE_PREFIX


class AdapterError(ValueError):
    """Input or output an operator must look at; the message says what."""


def smoke_queue(unit: str, host: str) -> str:
    """The per-instance smoke queue the agent consumes: sturdy.smoke.<app>-<process>@<instance>.<host>."""
    base = unit[: -len(".service")] if unit.endswith(".service") else unit
    return f"{SMOKE_PREFIX}{base}.{host}"


def transient_argv(user: str, group: str, workdir: str, properties: list[str], environment: dict[str, Any],
                   argv: list[str]) -> list[str]:
    """systemd-run for a command with the units' identity and secrets: their user, release directory and
    EnvironmentFile=/LoadCredential*= lines, output piped back, exit status returned, nothing left behind."""
    cmd = ["systemd-run", "--quiet", "--collect", "--pipe", "--wait", f"--uid={user}", f"--gid={group}",
           f"--working-directory={workdir}"]
    cmd += [f"--property={line}" for line in properties]
    cmd += [f"--setenv={key}={value}" for key, value in sorted(environment.items())]
    return cmd + ["--", *argv]


class CeleryAdapter:
    """A Celery worker with the agent: one client run sends a job to every queue through the app's own Celery app
    (its broker and result backend) and waits for all answers."""

    name = "celery"

    def __init__(self, options: dict[str, Any]):
        self.celery_app = options.get("celery_app")
        if not self.celery_app:
            raise AdapterError("adapter celery needs celery_app (the module given to `celery -A`, e.g. shop.celery)")

    def commands(self, release: str, queues: list[str], timeout: float) -> list[list[str]]:
        python = os.path.join(release, "venv", "bin", "python")
        return [[python, "-m", "sturdy_agent", "smoke", "--celery-app", self.celery_app, "--timeout",
                 f"{timeout:g}", *queues]]

    @staticmethod
    def parse(outputs: list[str], queues: list[str], seconds: list[float]) -> list[dict]:
        # The client measures each answer's latency itself.
        return json_line(outputs[0], list)


class RqAdapter(CeleryAdapter):
    """An RQ worker with the agent: the same client run through RQ, with the Redis URL `rq worker` reads
    (RQ_REDIS_URL, from the app's secrets)."""

    name = "rq"

    def __init__(self, options: dict[str, Any]):  # pylint: disable=super-init-not-called
        self.options = options

    def commands(self, release: str, queues: list[str], timeout: float) -> list[list[str]]:
        python = os.path.join(release, "venv", "bin", "python")
        return [[python, "-m", "sturdy_agent", "rq-smoke", "--timeout", f"{timeout:g}", *queues]]


class CommandAdapter:
    """Your own smoke commands: one run per queue, with STURDY_SMOKE_QUEUE and STURDY_SMOKE_TIMEOUT set; it prints
    the answer as one JSON object (at least build_id, host, unit, pid and release) and exits 0."""

    name = "command"

    def __init__(self, options: dict[str, Any]):
        self.command = list(options.get("smoke_command") or [])
        if not self.command:
            raise AdapterError("adapter command needs smoke_command, an argv that sends a smoke job to "
                               "$STURDY_SMOKE_QUEUE and prints the answer as JSON")

    def commands(self, release: str, queues: list[str], timeout: float) -> list[list[str]]:
        exe = self.command[0] if os.path.isabs(self.command[0]) else os.path.join(release, self.command[0])
        return [["env", f"STURDY_SMOKE_QUEUE={queue}", f"STURDY_SMOKE_TIMEOUT={timeout:g}", exe, *self.command[1:]]
                for queue in queues]

    @staticmethod
    def parse(outputs: list[str], queues: list[str], seconds: list[float]) -> list[dict]:
        """One entry per queue; its latency is how long its smoke command ran (sending the job and waiting)."""
        found = []
        for queue, out, took in zip(queues, outputs, seconds):
            try:
                found.append({"queue": queue, "ok": True, "answer": json_line(out, dict), "latency": took})
            except AdapterError as exc:
                found.append({"queue": queue, "ok": False, "error": str(exc), "latency": took})
        return found


ADAPTERS = {"celery": CeleryAdapter, "rq": RqAdapter, "command": CommandAdapter}
# The adapters whose workers run the sturdy.workers agent (STURDY_AGENT=<name>, Type=notify).
AGENT_ADAPTERS = ("celery", "rq")


def adapter_for(options: dict[str, Any]):
    kind = options.get("adapter") or "none"
    if kind not in ADAPTERS:
        raise AdapterError(f"adapter {kind!r} has no smoke test; use one of {', '.join(sorted(ADAPTERS))}")
    return ADAPTERS[kind](options)


def json_line(text: str, kind: type):
    """The last line of `text` that parses as JSON of `kind` (clients may log before it)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, kind):
            return value
    raise AdapterError(f"no JSON answer in the smoke command's output: {text.strip()[-300:]!r}")


def run_bounded(run, cmd: list[str], max_seconds: float) -> tuple[int, str, str]:
    """run() a transient_argv() command that systemd stops once it has run `max_seconds` (RuntimeMaxSec=); one stopped
    there says so in its error output (systemd-run itself says nothing): the broker may take connections and never
    answer."""
    cmd = [*cmd[:1], f"--property=RuntimeMaxSec={math.ceil(max_seconds)}", *cmd[1:]]
    began = time.monotonic()
    rc, out, err = run(cmd)
    if rc != 0 and time.monotonic() - began >= max_seconds - 0.5:
        err = (f"{err.rstrip()}\n" if err.strip() else "") + (
            f"stopped after {max_seconds:g} s without an answer: the broker takes connections and does not answer "
            "(stopped with SIGSTOP, overloaded, a network path that drops), or the app hangs at import")
    return rc, out, err


def run_agent(run, proc: dict[str, Any], release: str, directives: list[str], argv: list[str], kind: type,
              max_seconds: float = 120):
    """Run `python -m sturdy_agent <argv>` from `release` as the process type's user with the units' secret lines
    (transient_argv; `run(cmd)` returns rc, stdout, stderr), stopped after `max_seconds`: (its JSON answer of
    `kind`, None) or (None, why)."""
    cmd = transient_argv(proc["user"], proc["group"], release, directives, proc.get("environment", {}),
                         [f"{release}/venv/bin/python", "-m", "sturdy_agent", *argv])
    rc, out, err = run_bounded(run, cmd, max_seconds)
    if rc == 0:
        try:
            return json_line(out, kind), None
        except AdapterError:
            pass
    return None, f"rc {rc}: " + " ".join((out + err).strip().splitlines()[-3:])[-600:]


def check_answer(answer: dict, expect: dict[str, Any]) -> list[str]:
    """What in a worker's answer differs from what the deploy expects (build_id, host, unit, pid, release)."""
    problems = []
    for key in ("build_id", "host", "unit", "pid", "release"):
        want = expect.get(key)
        if want is None:
            continue
        got = answer.get(key)
        if str(got) != str(want):
            problems.append(f"{key} is {got}, expected {want}")
    release = expect.get("release")
    cwd = answer.get("cwd")
    if release and cwd and not (cwd == release or cwd.startswith(release.rstrip("/") + "/")):
        problems.append(f"its working directory {cwd} is outside {release}")
    return problems


# A broker that does not answer at all, in an agent command's output: the broker clients' own (qualified) errors, or
# run_bounded's words. Not bare names: an app whose database is down at import raises an OperationalError or a
# ConnectionError of its own, and that is not the broker.
_UNREACHABLE = re.compile(r"\b(kombu\.exceptions\.OperationalError|redis\.exceptions\.(ConnectionError|TimeoutError)|"
                          r"amqp\.exceptions\.\w+|kombu\.exceptions\.ConnectionError)\b|s without an answer: the broker")


def names_an_unreachable_broker(why: str) -> bool:
    """Whether an agent command's failure (run_agent's why) is a broker that could not be reached at all."""
    return bool(_UNREACHABLE.search(why or ""))


def broker_unreachable(what: str, host: str, entry: dict) -> str:
    """The failure for a smoke job that could not reach the broker (or the result backend) at all."""
    return (f"{what} could not reach the broker: {entry.get('error')}. While it does not answer no worker takes work "
            f"either, and no instance can prove its build. Next: check that the broker runs and that {host} reaches "
            "it, and BROKER_URL in the app's secrets; then run the deploy again")


def reliability_warnings(where: str, settings: dict[str, Any], stop_timeout: int | None = None) -> list[str]:
    """Settings of a running Celery worker that lose or duplicate tasks on a restart or a crash."""
    warnings = []
    if not settings:
        return warnings
    if not settings.get("acks_late"):
        warnings.append(f"{where}: task_acks_late is off: a task running when the worker is killed (OOM, SIGKILL after "
                        "the stop timeout) is lost. Set task_acks_late=True and make tasks idempotent")
    elif not settings.get("reject_on_worker_lost"):
        warnings.append(f"{where}: task_acks_late without task_reject_on_worker_lost: a task whose pool process dies is "
                        "acknowledged, so it is lost. Set task_reject_on_worker_lost=True")
    prefetch = settings.get("prefetch_multiplier")
    if settings.get("acks_late") and isinstance(prefetch, int) and prefetch != 1:
        warnings.append(f"{where}: worker_prefetch_multiplier={prefetch} with acks_late reserves several tasks per "
                        "process; a stuck or killed worker holds them all. Set worker_prefetch_multiplier=1")
    limit = settings.get("task_time_limit")
    if limit is None:
        warnings.append(f"{where}: no task_time_limit: a hung task blocks a graceful stop until SIGKILL. Set "
                        "task_time_limit (and max_task_runtime to match)")
    elif stop_timeout is not None and float(limit) >= stop_timeout:
        warnings.append(f"{where}: task_time_limit={limit}s is not below the unit's stop timeout ({stop_timeout}s): "
                        "a stop may SIGKILL a running task. Set max_task_runtime to task_time_limit")
    if settings.get("pool") == "prefork" and not (settings.get("max_tasks_per_child")
                                                  or settings.get("max_memory_per_child")):
        warnings.append(f"{where}: a prefork pool without worker_max_memory_per_child or worker_max_tasks_per_child "
                        "never replaces its children, so one that leaks grows until the OOM killer kills it in the "
                        "middle of a task. Set worker_max_memory_per_child (KiB) below the unit's memory_high")
    vt = settings.get("visibility_timeout")
    if limit is not None and vt is not None and float(vt) <= float(limit):
        warnings.append(f"{where}: visibility_timeout={vt}s is not longer than task_time_limit={limit}s: Redis "
                        "redelivers a task that is still running (duplicates). Raise visibility_timeout")
    return warnings
