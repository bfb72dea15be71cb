# Copyright: (c) 2026, sturdy.workers contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""sturdy.workers worker agent: what a framework's worker lacks under systemd, without changing the app's code.

The sturdy.workers.release module writes this package into every release's venv (site-packages/sturdy_agent/) with
sturdy_agent.pth, whose line calls activate() at every interpreter start. It does nothing and imports nothing more
unless the unit sets STURDY_AGENT:

- celery (celery_worker): inside a Celery worker, READY=1/STOPPING=1/WATCHDOG=1 to systemd, the instance's smoke queue
  and the task sturdy.smoke answering with the build the code was loaded from, the sturdy_health query, a gate before
  the pool (delivery ceiling, argument check, unknown tasks to sturdy.dead.<queue>, STURDY_RATE_LIMIT), task records
  and counts (records), a publish stamp on every message;
- rq (rq_worker): the same for an RQ 2 worker: smoke queue and job (rq_smoke below), readiness, a stop that loses
  no job, records and counts.

The deploy and operators run `python -m sturdy_agent smoke|stats|health|dead|names|tasks|rq-smoke|rq-stats|rq-jobs`
(__main__, client, rq_client). The names shared with the collection are in names.py, the collection's
plugins/module_utils/names.py. Standard library only, except the hooks and clients, which import the framework from
the app's venv.
"""

from __future__ import annotations

import os
import sys

# STURDY_AGENT -> the module whose install() hooks into that framework's worker.
HOOKS = {"celery": "celery_worker", "rq": "rq_worker"}
_HOOKED: list = []


def activate(environ=None) -> None:
    """Entry from sturdy_agent.pth: hook in only where the unit asks for it; never break the interpreter."""
    environ = os.environ if environ is None else environ
    kind = environ.get("STURDY_AGENT")
    if kind not in HOOKS or _HOOKED:
        return
    _HOOKED.append(kind)
    # Python programs a task starts inherit the environment: they must not hook into the framework too.
    os.environ.pop("STURDY_AGENT", None)
    try:
        from importlib import import_module  # pylint: disable=import-outside-toplevel

        from . import core  # pylint: disable=import-outside-toplevel

        if kind == "rq":
            # RQ_REDIS_URL delivered as a systemd credential: read into the environment, where `rq worker` reads it.
            core.rq_url_from_credentials(environ)
        core.dump_stacks_when_killed()
        import_module(f"{__name__}.{HOOKS[kind]}").install()
    except (ImportError, AttributeError) as exc:
        sys.stderr.write(f"sturdy_agent: STURDY_AGENT={kind} but its worker cannot be hooked ({exc}); "
                         "no readiness or smoke queue for this process\n")


class DeadLettered(Exception):
    """The result of a task the agent moved to its queue's dead-letter queue instead of running it. Defined here:
    Celery records a failure's class by its module (sturdy_agent), which a reader of the result imports."""


def rq_smoke(token: str) -> dict:
    """RQ's smoke job (names.RQ_SMOKE_JOB): a function the work horse imports by this name, like any job's."""
    from .rq_worker import smoke_answer  # pylint: disable=import-outside-toplevel

    return smoke_answer(token)
