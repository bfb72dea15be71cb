"""Helpers for the deploy scenario: the hosts over podman, and runs of the whole pipeline on every app host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
# The tests import these from here.
from testhosts import (  # noqa: E402,F401  # pylint: disable=unused-import
    SSH_CFG, address, host, readme_command, recaps, said, assert_served_in_turn, wait_for, while_requests_flow,
    while_tasks_flow)

SCENARIO_DIR = Path(__file__).resolve().parent.parent
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
DIST = EPHEMERAL / "dist"
REPORT = EPHEMERAL / "deploy-report.json"
# The builds the tests deploy (converge deployed build 1).
B1, B2, B_NO_WORKER, B_CRASH, B5 = (f"2026.11.29-{n}" for n in range(1, 6))


def _group(name: str) -> list[str]:
    # Read from the file molecule writes: ansible-inventory (testinfra's AnsibleRunner) would print the group_vars,
    # the Redis password among them, into the scenario's ansible.log.
    return sorted(yaml.safe_load(Path(os.environ["MOLECULE_INVENTORY_FILE"]).read_text())[name]["hosts"])


# The hosts by role, from molecule's inventory: the deploy and faults scenarios run the same app, each on hosts of its
# own (container names are global to podman). The worker hosts: bookworm (systemd 252), then trixie (257).
(BROKER,), (WEB,) = _group("brokers"), _group("web")
BOOKWORM, TRIXIE = WORKERS = sorted(_group("workers"), key=lambda name: not name.endswith("bookworm"))
APPS = [*WORKERS, WEB]
WORKER_UNITS = ["shop-worker@1.service", "shop-worker@2.service"]
# The Redis password inside BROKER_URL: the tests look for it where it must never appear.
SECRET = yaml.safe_load((SCENARIO_DIR / "inventory" / "group_vars" / "all.yml").read_text())["shop_redis_password"]


def pytest_itemcollected(item):
    # One sequence across all hosts (each test deploys to every host), marked before xdist reads the groups.
    item.add_marker(pytest.mark.xdist_group("deploy"))


# The web's readiness URL (group_vars/web.yml), fired at by while_requests_flow on the web host.
HEALTH = "http://127.0.0.1:8000/health"


def units_of(name: str) -> list[str]:
    return WORKER_UNITS if name in WORKERS else ["shop-web@1.service"]


def artifact(build: str) -> str:
    return str(DIST / f"shop-{build}.tar.gz")


def deploy_cmd(build: str, playbook: str = "converge.yml", **extra) -> list[str]:
    extra = {"sturdy_build_id": build, "sturdy_artifact": artifact(build), **extra}
    return ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-e", json.dumps(extra),
            str(SCENARIO_DIR / playbook)]


def deploy(build: str, playbook: str = "converge.yml", **extra) -> subprocess.CompletedProcess:
    # On Mitogen and logging to the scenario's ansible.log, as molecule.yml's provisioner env says.
    return subprocess.run(deploy_cmd(build, playbook, **extra), capture_output=True, text=True, timeout=900,
                          check=False)


def run_while(argv: list[str], poll, every: float) -> tuple[int, str]:
    """Run `argv`, calling poll() every `every` seconds while it runs; its exit code and output. The output goes to a
    file: a pipe nobody reads while polling fills up and blocks the run."""
    with tempfile.TemporaryFile("w+") as out:
        run = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
        while run.poll() is None:
            poll()
            time.sleep(every)
        out.seek(0)
        return run.returncode, out.read()


def deploy_while(build: str, poll, every: float, **extra) -> dict:
    """Deploy `build` as deploy() does, calling poll() every `every` seconds while it runs (run_while); the report of
    the deploy, which must succeed."""
    code, text = run_while(deploy_cmd(build, **extra), poll, every)
    assert code == 0, " ".join(text.split())[-3000:]
    rep = report()
    assert rep["result"] == "success", rep["message"]
    return rep


def key() -> Path:
    """The scenario's SSH key, which its prepare authorized for root on every host (molecule/_shared/authorize_key.yml)."""
    return EPHEMERAL / "ssh" / "id_ed25519"


def readme_dir() -> Path:
    """A directory as the README lays it out: its ansible.cfg, inventory.yml with the app hosts, the scenario's
    group_vars and host_vars beside it. Reached over SSH as real hosts are (the stock strategy and connection), with
    the README's pipelining and a persistent master connection per host."""
    where = EPHEMERAL / "readme"
    where.mkdir(exist_ok=True)
    # Written every time: a directory left by an earlier run of the scenario must not stand in for this one, and a
    # host that was stopped and started again may have a new address.
    (where / "ansible.cfg").write_text(SSH_CFG)
    hosts = {name: {"ansible_host": address(name)} for name in APPS}
    (where / "inventory.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": str(key())},
        "children": {"workers": {"hosts": {name: hosts[name] for name in WORKERS}},
                     "web": {"hosts": {WEB: hosts[WEB]}}}}}, sort_keys=False))
    for name in ("group_vars", "host_vars"):
        (where / name).unlink(missing_ok=True)
        (where / name).symlink_to(SCENARIO_DIR / "inventory" / name)
    return where


def run_as_readme(argv: list[str]) -> subprocess.CompletedProcess:
    """Run `argv` from readme_dir() with none of molecule's ANSIBLE_* settings: the collection as installed."""
    installed = EPHEMERAL / "collections"
    # Made every time, as readme_dir(): a link left by a run of another checkout (molecule keeps the ephemeral
    # directory) would run that checkout's collection, or none.
    link = installed / "ansible_collections" / "sturdy" / "workers"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(SCENARIO_DIR.parent.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(installed), ANSIBLE_LOG_PATH=str(EPHEMERAL / "ansible.log"),
               ANSIBLE_NOCOLOR="1")
    return subprocess.run(argv, cwd=readme_dir(), capture_output=True, text=True, timeout=900, check=False, env=env)


def report() -> dict:
    return json.loads(REPORT.read_text())


def current(name: str) -> str:
    return host(name).check_output("readlink /srv/shop/current").rsplit("/", 1)[-1]


def invocations() -> dict[str, str]:
    found = {}
    for name in APPS:
        for unit in units_of(name):
            found[f"{name}/{unit}"] = host(name).check_output(f"systemctl show -P InvocationID {unit}")
    return found


def main_cwd(name: str, unit: str) -> str:
    h = host(name)
    pid = h.check_output(f"systemctl show -P MainPID {unit}")
    return h.check_output(f"readlink /proc/{pid}/cwd")


def task(name: str, key: str) -> dict:
    """Enqueue one task from the web host as a producer would and return the worker's answer."""
    out = host(name).check_output(f"/usr/local/sbin/shop-task {key} {key} 60")
    return json.loads(out.splitlines()[-1])


def runs_of(prefix: str, count: int, tries: int = 60) -> dict:
    """How many times each of the `count` long tasks sent as `prefix` ran, {"done": n, "runs": {times: tasks}}, read on
    the web host every 3 s until all are done or `tries` reads have passed."""
    runs = {}
    for dummy in range(tries):
        runs = json.loads(host(WEB).check_output(
            f"/usr/local/sbin/shop-task --sleep --runs {prefix} {count}").splitlines()[-1])
        if runs["done"] == count:
            break
        time.sleep(3)
    return runs


PROMTOOL = SCENARIO_DIR.parent.parent / ".build" / "promtool" / "usr" / "bin" / "promtool"


def scrape(name: str) -> str:
    """node_exporter's /metrics of an app host, fetched over the test network from the broker host, as Prometheus
    would; only the sturdy_* families (with their HELP and TYPE lines)."""
    text = host(BROKER).check_output(
        "python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
        f"\"http://{name}:9100/metrics\", timeout=10).read().decode())'")
    return "\n".join(line for line in text.splitlines()
                     if line.startswith("sturdy_") or line.startswith(("# HELP sturdy_", "# TYPE sturdy_"))) + "\n"


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample line."""
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, dummy, labels = head.partition("{")
        pairs = dict(pair.split("=", 1) for pair in labels.rstrip("}").split('",') if pair) if labels else {}
        found.append((name, {k: v.strip('"') for k, v in pairs.items()}, float(value)))
    return found


def collect_and_scrape(name: str) -> list[tuple[str, dict[str, str], float]]:
    """Run the app's collector now (the timer's service, a oneshot), scrape node_exporter and check the text with
    promtool; the samples."""
    host(name).check_output("systemctl start sturdy-metrics-shop.service")
    text = scrape(name)
    check = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout + check.stderr + text
    return samples(text)


def prometheus(path: str) -> dict:
    """An answer of the Prometheus API on the broker host (it scrapes the app hosts' node_exporter every 5 s)."""
    return json.loads(host(BROKER).check_output(
        "python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
        f"\"http://localhost:9090/api/v1/{path}\", timeout=10).read().decode())'"))


def dead_letters() -> dict:
    """The default queue's dead letters, read with the agent's client from the web host (a producer's view)."""
    out = host(WEB).check_output(
        "/usr/local/sbin/shop-task --agent dead list --celery-app shopdemo.celery default")
    return json.loads(out.splitlines()[-1])[0]


def status(*extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    report_file = EPHEMERAL / "status.json"
    report_file.unlink(missing_ok=True)
    result = run_as_readme([*readme_command("status"), *extra])
    return result, json.loads(report_file.read_text())


def no_secret_in_the_ansible_log() -> None:
    """Every deploy, status and diagnose of the scenario's tests logged to its ansible.log (ANSIBLE_LOG_PATH), the
    failed migration and the crashing releases that printed the broker URL included: masked there, never in clear."""
    log = (EPHEMERAL / "ansible.log").read_text(errors="replace")
    assert "********" in log
    assert SECRET not in log


def told(result: subprocess.CompletedProcess) -> str:
    """said(), with the quotes of a message as written: the README's ansible.cfg keeps the default callback, which
    prints a failed task's result as JSON."""
    return said(result).replace('\\"', '"')
