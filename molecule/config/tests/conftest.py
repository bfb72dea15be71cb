"""Helpers for the config scenario: what the running units read, hashed on the hosts; deploys with another config."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy" / "tests"))
# The deploy scenario's helpers that take no host names of their own.
from testhosts import host, said, wait_for  # noqa: E402,F401  # pylint: disable=unused-import

SCENARIO_DIR = Path(__file__).resolve().parent.parent
INVENTORY = SCENARIO_DIR.parent / "deploy" / "inventory"
README = SCENARIO_DIR.parent.parent / "README.md"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
DIST = EPHEMERAL / "dist"
REPORT = EPHEMERAL / "deploy-report.json"
GROUP_VARS = yaml.safe_load((INVENTORY / "group_vars" / "all.yml").read_text())
SECRET = GROUP_VARS["shop_redis_password"]
# The inventory's worker, as converge.yml deploys it (its Jinja left unrendered: only plain values are read from it).
(INVENTORY_WORKER,) = yaml.safe_load((INVENTORY / "group_vars" / "workers.yml").read_text())["sturdy_processes"]
BROKER_URL = f"redis://:{SECRET}@broker:6379/0"
B1, B2, B3, B4, B5 = (f"2026.11.29-{n}" for n in range(1, 6))
# The release every test starts from and comes back to (converge.yml): build 1, the inventory's declaration (two
# worker instances consuming `default`) and this token.
TOKEN_A, TOKEN_B, TOKEN_C = "token-a-7Hq2", "token-b-Kx91", "token-c-Zp44"


def _group(name: str) -> list[str]:
    # From the file molecule writes (ansible-inventory would log the group_vars, the Redis password among them).
    return sorted(yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())[name]["hosts"])


# The canary is the first host of the inventory: bookworm (an environment file), then trixie (encrypted credentials).
BOOKWORM, TRIXIE = WORKERS = sorted(_group("workers"), key=lambda name: not name.endswith("bookworm"))


def pytest_itemcollected(item):
    # One sequence: each test deploys to both hosts.
    item.add_marker(pytest.mark.xdist_group("config"))


def secrets(token: str = TOKEN_A, **more) -> dict:
    return {"BROKER_URL": BROKER_URL, "SHOP_TOKEN": token, **more}


def worker(queues=("default",), consume=None, instances: int = 2, **environment) -> dict:
    """The inventory's worker declaration (group_vars/workers.yml) with another queue, instance count or environment."""
    consume = consume or queues[0]
    return {"name": "worker", "adapter": "celery", "celery_app": "shopdemo.celery", "queues": list(queues),
            "command": ["bin/shop-worker", "--concurrency", "1", "--loglevel", "INFO", "--without-gossip",
                        "--without-mingle", "-Q", consume],
            "instances": instances, "rate_limit": 20, "max_task_runtime": 30, "restart_sec": 2,
            "watchdog_sec": INVENTORY_WORKER["watchdog_sec"],
            "environment": {"SHOP_VISIBILITY_TIMEOUT": "60", **environment}}


def deploy_cmd(build: str, playbook: str = "converge.yml", **extra) -> list[str]:
    extra = {"sturdy_build_id": build, "sturdy_artifact": str(DIST / f"shop-{build}.tar.gz"),
             "sturdy_secrets": secrets(), **extra}
    return ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-e", json.dumps(extra),
            str(SCENARIO_DIR / playbook)]


def deploy(build: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(deploy_cmd(build, **extra), capture_output=True, text=True, timeout=900, check=False)


def playbook(name: str, *extra: str) -> subprocess.CompletedProcess:
    """sturdy.workers.<name> as the README runs it, against molecule's inventory (its group_vars), on Mitogen."""
    return subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], f"sturdy.workers.{name}",
                           "-e", "sturdy_deploy_hosts=apps", *extra], capture_output=True, text=True, timeout=900,
                          check=False)


def report() -> dict:
    return json.loads(REPORT.read_text())


def sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def read_by_units(name: str) -> dict[str, str]:
    """Every file the app's units read, with the links that lead there, as a digest each: the unit files, the secret
    files their lines name (links followed), the live secret links and both current links."""
    out = host(name).check_output(
        "h() { sha256sum < \"$1\" | cut -d' ' -f1; }; "
        "for f in /etc/systemd/system/shop-*.service /etc/systemd/system/shop.target; do echo \"unit $f $(h $f)\"; done; "
        "for p in $(grep -h -o -E '^(EnvironmentFile=|LoadCredential(Encrypted)?=[A-Z_]+:)\\S+' "
        "/etc/systemd/system/shop-*.service | sed -E 's/^[^=]+=([A-Z_]+:)?//' | sort -u); do echo \"secret $p $(h $p)\"; "
        "done; for l in /srv/shop/current /etc/shop/current /etc/shop/shop.env /etc/shop/credentials; do "
        "echo \"link $l -> $(readlink $l)\"; done")
    return dict(line.rsplit(" ", 1) if not line.startswith("link ") else (line, "") for line in out.splitlines())


def everything_read() -> dict[str, dict[str, str]]:
    return {name: read_by_units(name) for name in WORKERS}


def token_seen(name: str, unit: str) -> str:
    """The digest of SHOP_TOKEN as the unit's running main process got it: its environment (an environment file) or its
    credential (systemd's copy for the running unit). Read on the host; only a digest leaves it."""
    h = host(name)
    pid = h.check_output(f"systemctl show -P MainPID {unit}")
    env = h.check_output(f"tr '\\0' '\\n' < /proc/{pid}/environ | sed -n 's/^SHOP_TOKEN=//p' | tr -d '\\n' | sha256sum")
    if env.split()[0] != sha(""):
        return env.split()[0].rstrip()
    return h.check_output(f"sha256sum < /run/credentials/{unit}/SHOP_TOKEN").split()[0]


def live_release(name: str) -> str:
    return host(name).check_output("readlink /etc/shop/current").rsplit("/", 1)[-1]


def running_build(name: str, unit: str) -> str:
    """The build directory the unit's main process runs in; "" while it has none (stopped, restarting)."""
    cwd = host(name).run(f"readlink /proc/$(systemctl show -P MainPID {unit})/cwd").stdout.strip()
    return cwd.rsplit("/", 1)[-1] if cwd else ""


def instances(name: str) -> list[str]:
    """The worker instances running on the host."""
    out = host(name).run("systemctl list-units --state=active --plain --no-legend 'shop-worker@*.service'").stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.strip())


def task(name: str, key: str) -> dict:
    """Enqueue shopdemo.record (to the queue `default`) from the host's current release, as a producer does, and
    return the worker's answer."""
    out = host(name).check_output(f"/usr/local/sbin/shop-task {key} {key} 60")
    return json.loads(out.splitlines()[-1])


def restarted_answers(name: str, unit: str, build: str, token: str) -> None:
    """systemctl restart of a running instance (what a crash, an OOM kill or a reboot does): it comes back on `build`
    with `token`, and the instances answer a task."""
    h = host(name)
    h.check_output(f"systemctl restart {unit}")
    assert running_build(name, unit) == build, (name, unit)
    assert token_seen(name, unit) == sha(token), (name, unit, "runs with another SHOP_TOKEN")
    assert task(name, f"after-restart-{unit.split('@')[1][0]}-{name}")["build_id"] == build
