"""The README's "Deploy your own app", laid out and run as written: its files from the README's blocks, the ledger app
beside them, its commands with none of molecule's ANSIBLE_* settings, from the collection built and installed as users
install it (ansible-galaxy collection build, then install from the tarball)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_shared"))
from testhosts import (  # noqa: E402,F401  # pylint: disable=unused-import
    SSH_CFG, address, host, said, assert_served_in_turn, while_requests_flow)

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
WALK = EPHEMERAL / "walkthrough"
# The README's inventory names, and the scenario's hosts that stand for them.
HOSTS = {"app1.example.com": "ownapp-bookworm", "app2.example.com": "ownapp-trixie"}


def pytest_itemcollected(item):
    # One sequence: each command of the walkthrough acts on every host.
    item.add_marker(pytest.mark.xdist_group("ownapp"))


def walkthrough() -> tuple[dict[str, str], list[str]]:
    """The README section's files ({path under deploy/: text}) and its commands, in order."""
    text = README.read_text()
    section = text.split("## Deploy your own app\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    files, commands = {}, []
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, re.S):
        first = body.splitlines()[0]
        if lang == "yaml":
            match = re.match(r"# deploy/(\S+)", first)
            assert match, f"a yaml block of the walkthrough does not say which file it is: {first}"
            files[match.group(1)] = body
        elif lang == "sh":
            commands += [line for line in body.splitlines() if line.startswith("ansible-playbook ")]
    return files, commands


def command(playbook: str, build: str = "") -> list[str]:
    """The walkthrough's command for sturdy.workers.<playbook> (for a build, the one with that build ID)."""
    for line in walkthrough()[1]:
        argv = shlex.split(line, comments=True)
        if argv[1] == f"sturdy.workers.{playbook}" and (not build or f"sturdy_build_id={build}" in argv):
            return argv
    raise AssertionError(f"the README's walkthrough shows no sturdy.workers.{playbook} {build}")


def lay_out() -> Path:
    """deploy/ with the README's files, the ledger project as ../ledger, and how Ansible reaches the hosts (the one
    thing the README leaves to the user): SSH as root with a key of the scenario's own, an ansible.cfg with
    pipelining and a persistent master connection, each host's address in its host_vars."""
    shutil.rmtree(WALK, ignore_errors=True)
    deploy = WALK / "deploy"
    for path, body in walkthrough()[0].items():
        (deploy / path).parent.mkdir(parents=True, exist_ok=True)
        (deploy / path).write_text(body)
    shutil.copytree(ROOT / "tests" / "apps" / "ledger", WALK / "ledger",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    key = EPHEMERAL / "ssh" / "id_ed25519"  # the scenario's prepare authorized it (molecule/_shared/authorize_key.yml)
    (deploy / "ansible.cfg").write_text(SSH_CFG)
    (deploy / "host_vars").mkdir()
    for name, container in HOSTS.items():
        (deploy / "host_vars" / f"{name}.yml").write_text(yaml.safe_dump(
            {"ansible_host": address(container), "ansible_user": "root", "ansible_ssh_private_key_file": str(key)}))
    # The collection as users install it: built by ansible-galaxy (galaxy.yml's build_ignore), installed from the
    # tarball into an empty collections path.
    built = subprocess.run(["ansible-galaxy", "collection", "build", str(ROOT), "--output-path", str(WALK / "dist")],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = next((WALK / "dist").glob("sturdy-workers-*.tar.gz"))
    names = subprocess.run(["tar", "tzf", str(tarball)], capture_output=True, text=True, check=True).stdout.split()
    assert not [n for n in names if n.split("/")[0] in ("tests", "molecule", "testbed", ".venv", ".build", ".ansible")
                or "__pycache__" in n], names
    print(f"collection tarball {tarball.name}: {tarball.stat().st_size} bytes, {len(names)} entries")
    # --force: an install elsewhere of the same version (the checkout molecule links) would make it do nothing.
    installed = subprocess.run(["ansible-galaxy", "collection", "install", "--force", str(tarball), "-p",
                                str(WALK / "collections")], capture_output=True, text=True, check=False,
                               env=user_env())
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (WALK / "collections" / "ansible_collections" / "sturdy" / "workers" / "MANIFEST.json").is_file()
    return deploy


def user_env() -> dict[str, str]:
    """This environment with none of molecule's ANSIBLE_* settings, as a user's shell has it."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}


def live_release(name: str) -> str:
    """The release current names on the host's container `name`: <build>, or <build>~<n> for another config."""
    return host(name).check_output("readlink /srv/ledger/current").rsplit("/", 1)[-1]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    """`argv` from deploy/, with none of molecule's ANSIBLE_* settings (the stock strategy and configuration)."""
    env = user_env()
    # PWD as a shell sets it on `cd deploy`: the deploy report is written there.
    env.update(ANSIBLE_COLLECTIONS_PATH=str(WALK / "collections"), ANSIBLE_LOG_PATH=str(EPHEMERAL / "ansible.log"),
               ANSIBLE_NOCOLOR="1", PWD=str(WALK / "deploy"))
    return subprocess.run(argv, cwd=WALK / "deploy", capture_output=True, text=True, timeout=900, check=False, env=env)


def vault() -> dict:
    return yaml.safe_load(walkthrough()[0]["group_vars/all/vault.yml"])
