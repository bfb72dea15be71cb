"""The README's walkthrough deployed the way AWX and Ansible Automation Platform run a job: ansible-runner with process
isolation in the execution environment image (`make ee`: the collection installed from its tarball, ansible-core,
ansible-runner), then ansible-navigator in the same image; the hosts reached over SSH from inside the container, on
the scenario's network. Collected after test_ownapp.py: the hosts run the walkthrough's build 1.

What this does not exercise of AWX: credentials injected from its credential store (here a key file is mounted), a
survey's variables, instance and container groups, receptor, job slicing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from conftest import EPHEMERAL, HOSTS, ROOT, WALK, live_release, said, user_env

B1, B2 = "2026.12.03-1", "2026.12.03-2"
SECRET = "s3cret"
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
IMAGE = f"localhost/sturdy-workers-ee:{VERSION}"
NETWORK = "sturdy-ownapp"
# What the job's environment sets in AWX (an ansible.cfg of the project would do the same): the scenario's hosts
# are new at every run, and one round trip per task. (ansible-navigator's --senv takes no value with a space.)
ENV = {"ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True", "ANSIBLE_NOCOLOR": "1"}
# Mounted into the job's container: the artifacts the build wrote (sturdy_artifact) and the SSH key the inventory
# names (in AWX: a machine credential).
MOUNTS = ["/var/tmp/builds:/var/tmp/builds", f"{EPHEMERAL / 'ssh'}:{EPHEMERAL / 'ssh'}"]


def current(name: str) -> str:
    """The build of the host's live release (a release is <build> or <build>~<n>: the build with another config)."""
    return live_release(name).split("~")[0]


def private_data_dir() -> Path:
    """ansible-runner's private data dir as AWX lays out a job: the project's playbooks (an AWX project holds
    playbooks that import the collection's), the inventory with the walkthrough's group_vars and host_vars, the
    job's environment."""
    pdd = EPHEMERAL / "runner"
    shutil.rmtree(pdd, ignore_errors=True)
    (pdd / "project").mkdir(parents=True)
    for name in ("deploy", "status"):
        (pdd / "project" / f"{name}.yml").write_text(
            f"---\n- name: sturdy.workers.{name}\n  ansible.builtin.import_playbook: sturdy.workers.{name}\n")
    shutil.copytree(WALK / "deploy" / "group_vars", pdd / "inventory" / "group_vars")
    shutil.copytree(WALK / "deploy" / "host_vars", pdd / "inventory" / "host_vars")
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"workers": {"hosts": {name: {} for name in HOSTS}}}}}))
    (pdd / "env").mkdir()
    (pdd / "env" / "envvars").write_text(yaml.safe_dump(ENV))
    return pdd


def ee_image() -> None:
    """The image, built (or found up to date) as `make test` builds it beside the scenarios."""
    made = subprocess.run(["make", "-s", "-C", str(ROOT), "ee"], capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]


def test_ansible_runner_deploys_build_2_in_the_execution_environment_and_reads_the_status():
    ee_image()
    assert {current(c) for c in HOSTS.values()} == {B1}, "test_ownapp.py leaves build 1 on both hosts"
    pdd = private_data_dir()
    (pdd / "env" / "extravars").write_text(yaml.safe_dump({"sturdy_build_id": B2}))
    argv = ["ansible-runner", "run", str(pdd), "--process-isolation", "--process-isolation-executable", "podman",
            "--container-image", IMAGE, f"--container-option=--network={NETWORK}"]
    for mount in MOUNTS:
        argv += ["--container-volume-mount", mount]
    env = user_env()
    deployed = subprocess.run([*argv, "-p", "deploy.yml", "--ident", "deploy"], capture_output=True, text=True,
                              timeout=900, check=False, env=env)
    assert deployed.returncode == 0, said(deployed)[-3000:]
    assert f"deploy ledger {B2}: success" in deployed.stdout, said(deployed)[-3000:]
    assert {current(c) for c in HOSTS.values()} == {B2}
    # The job's record, as AWX keeps it: its status, and the events (no secret in any of them).
    artifacts = pdd / "artifacts" / "deploy"
    assert (artifacts / "status").read_text() == "successful" and (artifacts / "rc").read_text() == "0"
    events = "".join(p.read_text() for p in (artifacts / "job_events").glob("*.json"))
    assert "playbook_on_stats" in events and SECRET not in events + deployed.stdout + deployed.stderr
    status = subprocess.run([*argv, "-p", "status.yml", "--ident", "status"], capture_output=True, text=True,
                            timeout=300, check=False, env=env)
    assert status.returncode == 0, said(status)[-3000:]
    assert "OK, no problems" in status.stdout and f"current: {B2} on app1.example.com, app2.example.com" in \
        status.stdout, said(status)[-3000:]
    # The deploy report, written where ansible-playbook ran (runner's /runner/project): in the job's directory.
    report = json.loads((pdd / "project" / "deploy-report-ledger.json").read_text())
    assert (report["result"], report["build_id"]) == ("success", B2), report
    # Both ran in a container of the image, on the hosts' network, not on the controller.
    ran = json.loads((artifacts / "command").read_text())["command"]
    assert ran[:2] == ["podman", "run"] and IMAGE in ran and f"--network={NETWORK}" in ran, ran


def test_ansible_navigator_deploys_build_1_in_the_same_image_with_the_pull_policy_never():
    pdd = EPHEMERAL / "runner"
    argv = ["ansible-navigator", "run", "project/deploy.yml", "-i", "inventory/hosts.yml",
            "--execution-environment", "true", "--container-engine", "podman", "--eei", IMAGE,
            "--pull-policy", "never", "--mode", "stdout", "--playbook-artifact-enable", "false",
            "--log-file", str(EPHEMERAL / "ansible-navigator.log"), f"--container-options=--network={NETWORK}",
            "-e", f"sturdy_build_id={B1}"]
    for mount in MOUNTS:
        argv += ["--execution-environment-volume-mounts", mount]
    for key, value in ENV.items():
        argv += ["--set-environment-variable", f"{key}={value}"]
    env = user_env()
    deployed = subprocess.run(argv, cwd=pdd, capture_output=True, text=True, timeout=900, check=False, env=env)
    assert deployed.returncode == 0, said(deployed)[-3000:]
    assert f"deploy ledger {B1}: success" in deployed.stdout, said(deployed)[-3000:]
    assert SECRET not in deployed.stdout + deployed.stderr
    assert {current(c) for c in HOSTS.values()} == {B1}
    # The report, written where ansible-navigator ran (it mounts its working directory into the container): not
    # lost with the container.
    report = json.loads((pdd / "deploy-report-ledger.json").read_text())
    assert (report["result"], report["build_id"], sorted(report["hosts"])) == ("success", B1, sorted(HOSTS)), report
