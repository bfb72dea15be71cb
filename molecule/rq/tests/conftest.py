"""The RQ scenario's hosts and helpers: the parcel app deployed by the collection's playbooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from testhosts import host, said, wait_for  # noqa: E402,F401  # pylint: disable=unused-import

SCENARIO_DIR = Path(__file__).resolve().parent.parent
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
HOSTS = ["rq-bookworm", "rq-trixie"]
UNITS = ["parcel-worker@1.service", "parcel-worker@2.service"]
B1, B2 = "2026.12.04-1", "2026.12.04-2"
SECRET = yaml.safe_load((SCENARIO_DIR / "inventory" / "group_vars" / "all.yml").read_text())["parcel_redis_password"]
URL = f"redis://:{SECRET}@rq-broker:6379/7"


def pytest_itemcollected(item):
    # One sequence: each test acts on both hosts.
    item.add_marker(pytest.mark.xdist_group("rq"))


def playbook(*argv: str, collections: str = "") -> subprocess.CompletedProcess:
    """ansible-playbook on the scenario's inventory, as molecule runs its steps (`collections`: the collection from
    another ANSIBLE_COLLECTIONS_PATH)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections) if collections else None
    return subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], *argv],
                          capture_output=True, text=True, timeout=900, check=False, env=env)


def succeeded(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, said(result)[-3000:]
    assert SECRET not in result.stdout + result.stderr
    return result


def report() -> dict:
    return json.loads((EPHEMERAL / "deploy-report.json").read_text())


def in_release(name: str, argv: str) -> str:
    """`argv` in the current release on host `name`, with the app's Redis URL."""
    return host(name).check_output(f"cd /srv/parcel/current && RQ_REDIS_URL='{URL}' {argv}")


def redis(*argv: str) -> str:
    return host("rq-broker").check_output("redis-cli --no-auth-warning -a '%s' -n 7 %s" % (SECRET, " ".join(argv)))


def running_job(name: str, unit: str) -> str:
    """The job the worker of `unit` on `name` runs now (the agent's field in its RQ registration), or ""."""
    pid = host(name).check_output(f"systemctl show -P MainPID {unit}")
    for key in redis("--scan", "--pattern", "'rq:worker:*'").split():
        fields = redis("hgetall", key).splitlines()
        got = dict(zip(fields[::2], fields[1::2]))
        if got.get("sturdy_pid") == pid and got.get("hostname") == name and "death" not in got:
            return got.get("sturdy_job", "")
    return ""
