"""Bad input through the deploy playbook: each refused before any host changes, in one line naming the variable.

One table, each row a deploy of build 1's artifact with one thing wrong: a type, a range, an unknown option, two
options that contradict each other, a value the hosts cannot satisfy. Every row must end non-zero with its variable
named, without a traceback or Ansible's wrapping of a failed template, and without the broker password; the hosts
must be byte-identical afterwards (every file of the app but the venvs, with times and modes, the unit files, the
instances' invocations). The rows run four at a time: each is refused in preflight, before the deploy lock.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

import yaml
from conftest import B1, BOOKWORM, SECRET, TRIXIE, WORKERS, deploy_cmd, host, said, worker


def snapshot(name: str) -> str:
    """What a deploy could change on the host, as one listing: paths, sizes, times, modes and link targets of the
    app's files (the venvs left out: a deploy writes a new one, never into one), and the instances' invocations."""
    return host(name).check_output(
        "find /etc/shop /srv/shop /etc/systemd/system -path '/srv/shop/releases/*/venv' -prune -o "
        "-printf '%p %s %T@ %m %l\\n' | sort; systemctl show -P InvocationID 'shop-*'")


def declared(**change) -> dict:
    """The inventory's worker with `change` (a value None removes the option)."""
    proc = {**worker(), **change}
    return {"sturdy_processes": [{k: v for k, v in proc.items() if v is not None}]}


# (what is wrong, the extra vars, what the message must say)
ROWS = [
    ("instances a word", declared(instances="two"), 'sturdy_processes[worker].instances="two": give a whole number'),
    ("instances below 0", declared(instances=-1), "sturdy_processes[worker].instances=-1: give a whole number 0 or"),
    ("instances a fraction", declared(instances=1.5), "sturdy_processes[worker].instances=1.5: give a whole number"),
    ("instances above the most", declared(instances=500), "sturdy_processes[worker].instances=500 is out of range"),
    ("negative task runtime", declared(max_task_runtime=-5), "sturdy_processes[worker].max_task_runtime=-5: give"),
    ("zero rate", declared(rate_limit=0), "sturdy_processes[worker].rate_limit=0: give a number greater than 0"),
    ("rate a word", declared(rate_limit="fast"), 'sturdy_processes[worker].rate_limit="fast": give a number'),
    ("restart policy unknown", declared(restart="sometimes"), 'sturdy_processes[worker].restart="sometimes": give '
                                                              "one of always"),
    ("adapter misspelt", declared(adapter="celry"), 'sturdy_processes[worker].adapter="celry": give one of none'),
    ("command one string", declared(command="bin/shop-worker -Q default"), "sturdy_processes[worker].command="
                                                                           '"bin/shop-worker -Q default": give a list'),
    ("command with a number", declared(command=["bin/shop-worker", "--concurrency", 1]),
     "sturdy_processes[worker].command=[\"bin/shop-worker\", \"--concurrency\", 1]: give a list of strings"),
    ("command missing", declared(command=None), "sturdy_processes[worker].command is missing"),
    ("command leaves the release", declared(command=["../../usr/bin/celery"]), "sturdy_processes[worker].command[0]"),
    ("absolute command not on the hosts", declared(command=["/usr/local/bin/no-such-worker"], adapter="none",
                                                   celery_app=None, rate_limit=None, watchdog_sec=None),
     "sturdy_processes[worker].command[0]=/usr/local/bin/no-such-worker does not exist"),
    ("working directory not on the hosts", declared(working_directory="/srv/no-such-dir"),
     "sturdy_processes[worker] names the directory /srv/no-such-dir"),
    ("path the unit hides", declared(read_write_paths=["/home/shop/media"]), "sturdy_processes[worker] uses "
                                                                             '"/home/shop/media"'),
    ("queues one string", declared(queues="default"), 'sturdy_processes[worker].queues="default": give a list'),
    ("environment a list", declared(environment=["A=1"]), 'sturdy_processes[worker].environment=["A=1"]: give a '
                                                          "mapping"),
    ("environment name invalid", declared(environment={"SHOP-REGION": "eu"}),
     "sturdy_processes[worker].environment: 'SHOP-REGION' is not a valid"),
    ("option misspelt", declared(instance=2), "sturdy_processes[worker] has no option instance: did you mean "
                                              "instances?"),
    ("option misspelt twice", declared(max_task_run_time=30), "did you mean max_task_runtime?"),
    ("process name invalid", {"sturdy_processes": [{**worker(), "name": "Worker!"}]},
     'sturdy_processes[].name="Worker!"'),
    ("process declared twice", {"sturdy_processes": [worker(), worker()]}, 'sturdy_processes[].name="worker" is '
                                                                           "declared more than once"),
    ("singleton of two", declared(singleton=True), "sturdy_processes[worker]: singleton process types run one"),
    ("no delivery at all", declared(max_deliveries=0), "sturdy_processes[worker].max_deliveries=0: give a whole "
                                                       "number 1 or more"),
    ("stop before the longest task", declared(stop_timeout=10), "sturdy_processes[worker].stop_timeout=10s is "
                                                                "shorter than max_task_runtime (30s)"),
    ("restart delay 0", declared(restart_sec=0), "sturdy_processes[worker].restart_sec=0: give a whole number 1 or"),
    ("memory soft limit above the hard", declared(memory_high="900M", memory_max="512M"),
     "sturdy_processes[worker].memory_high=900M is not below memory_max=512M"),
    ("memory limit a word", declared(memory_max="lots"), "sturdy_processes[worker].memory_max='lots'"),
    ("surge a word", declared(max_surge="lots"), 'sturdy_processes[worker].max_surge="lots": give a number'),
    ("nothing may restart", declared(max_surge=0, max_unavailable=0), "sturdy_processes[worker]: max_surge and "
                                                                      "max_unavailable are both 0"),
    ("rate limit and surge", declared(max_surge=1), "sturdy_processes[worker].max_surge: the instances share "
                                                    "rate_limit"),
    ("celery without its app", declared(celery_app=None), "sturdy_processes[worker]: adapter celery needs "
                                                          "celery_app"),
    ("watchdog without the agent", declared(adapter="none", celery_app=None, rate_limit=None),
     "sturdy_processes[worker].watchdog_sec: only the agent inside a Celery worker feeds the watchdog"),
    ("listen on a host name", declared(listen=["localhost:8000"]),
     'sturdy_processes[worker].listen=["localhost:8000"]: "localhost:8000" is not a port'),
    ("listen with a surge", declared(listen=[8000], max_surge=1, rate_limit=None),
     "sturdy_processes[worker].max_surge: with listen, systemd holds the listening socket"),
    ("app name invalid", {"sturdy_app": "Shop"}, 'sturdy_app="Shop" cannot name units'),
    ("build ID with a space", {"sturdy_build_id": "2026 11 29"}, 'sturdy_build_id="2026 11 29"'),
    ("secrets delivery unknown", {"sturdy_secrets_delivery": "vault"}, "sturdy_secrets_delivery"),
    # Options of the roles the deploy runs after its preflight (the worker's restarts, the smoke jobs): validated in the
    # preflight too, before the lock and the release install.
    ("settle window a word", {"sturdy_worker_settle": "soon"}, "sturdy_worker_settle"),
    ("smoke timeout a word", {"sturdy_smoke_test_timeout": "long"}, "sturdy_smoke_test_timeout"),
    ("singleton host unknown", {"sturdy_worker_singleton_host": "no-such-host", "sturdy_processes": [
        worker(), {"name": "beat", "command": ["bin/shop-worker"], "singleton": True}]},
     "sturdy_worker_singleton_host=no-such-host is not a host of this inventory"),
    # Run by AWX as one slice of a sliced job template (AWX names the slices' workflow after the template).
    ("a slice of an AWX job", {"awx_job_template_name": "Deploy shop", "awx_workflow_job_name": "Deploy shop",
                               "awx_job_id": 42, "awx_user_name": "alice"},
     "Job Slicing to 1 (a deploy must see every host at once)"),
    # Host variables, from an inventory given beside molecule's: the hosts of one play hold different batches.
    ("batches differ between hosts", {"inventory": {BOOKWORM: {"sturdy_deploy_serial": 1},
                                                    TRIXIE: {"sturdy_deploy_serial": "100%"}}},
     "sturdy_deploy_serial differs between the play's hosts"),
]


def refused(row: tuple) -> subprocess.CompletedProcess:
    """The deploy of build 1 with the row's extra vars (and host variables, from an inventory of their own)."""
    extra = dict(row[1])
    hostvars = extra.pop("inventory", None)
    argv = deploy_cmd(B1, **extra)
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as inventory:
        if hostvars:
            yaml.safe_dump({"all": {"hosts": hostvars}}, inventory)
            inventory.flush()
            argv[1:1] = ["-i", inventory.name]
        return subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)


def test_every_bad_input_is_refused_in_one_line_naming_the_variable_and_no_host_changes():
    assert len(ROWS) >= 30
    before = {name: snapshot(name) for name in WORKERS}
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(refused, ROWS))
    wrong = []
    for (what, extra, expected), result in zip(ROWS, results):
        out = said(result)
        if result.returncode == 0:
            wrong.append(f"{what}: deployed ({json.dumps(extra)[:200]})")
        elif expected not in out:
            fatal = [line for line in out.splitlines() if line.startswith(("fatal:", "[ERROR]"))]
            wrong.append(f"{what}: wanted {expected!r}, got {fatal[:2] or out[-600:]}")
        elif "Finalization of task args" in out or "Traceback (most recent call last)" in out:
            wrong.append(f"{what}: the message is wrapped or carries a traceback")
        elif SECRET in out:
            wrong.append(f"{what}: the broker password was printed")
    assert not wrong, "\n".join(wrong)
    assert {name: snapshot(name) for name in WORKERS} == before
