"""Helpers for the rabbitmq scenario: the hosts over podman, runs of the pipeline, the broker's own view."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
# The tests import these from here.
from testhosts import host, recaps, said, wait_for, while_tasks_flow  # noqa: E402,F401  # pylint: disable=unused-import

SCENARIO_DIR = Path(__file__).resolve().parent.parent
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
WORKERS = ["mq-bookworm", "mq-trixie"]
WORKER_UNITS = ["shop-worker@1.service", "shop-worker@2.service"]
SECRETS = [yaml.safe_load((SCENARIO_DIR / "inventory" / "group_vars" / "all.yml").read_text())[k]
           for k in ("shop_rabbitmq_password", "shop_redis_password")]


def pytest_itemcollected(item):
    # One sequence across all hosts (each test deploys to every host).
    item.add_marker(pytest.mark.xdist_group("rabbitmq"))


def playbook(target: str, **extra) -> subprocess.CompletedProcess:
    """ansible-playbook on the scenario's inventory (a collection playbook, or one of the scenario's)."""
    where = str(SCENARIO_DIR / target) if target.endswith(".yml") else target
    return subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-e", json.dumps(extra),
                           where], capture_output=True, text=True, timeout=900, check=False)


def deploy(build: str, **extra) -> subprocess.CompletedProcess:
    return playbook("converge.yml", sturdy_build_id=build,
                    sturdy_artifact=str(EPHEMERAL / "dist" / f"shop-{build}.tar.gz"), **extra)


def report() -> dict:
    return json.loads((EPHEMERAL / "deploy-report.json").read_text())


def current(name: str) -> str:
    return host(name).check_output("readlink /srv/shop/current").rsplit("/", 1)[-1]


def rabbitmqctl(*args: str) -> list[dict]:
    """rabbitmqctl on the broker host, in the app's vhost, as JSON."""
    return json.loads(host("mq-broker").check_output(
        "rabbitmqctl --quiet " + " ".join(args) + " --vhost shop --formatter json"))


def shop_task(args: str, name: str = "mq-bookworm"):
    """The producer on a worker host (the app's code and secrets); its last line as JSON."""
    out = host(name).check_output(f"/usr/local/sbin/shop-task {args}")
    return json.loads(out.splitlines()[-1])


def dead_letters() -> dict:
    return shop_task("--agent dead list --celery-app shopdemo.celery default")[0]
