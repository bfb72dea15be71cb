"""Benchmarks for the deploy path, reported as ratios measured in one run (`make bench`).

Uses the molecule `worker` scenario's hosts (both platforms) and times ansible-playbook runs of its
converge playbook:

  first       converge on hosts where the units do not exist yet
  no-change   the same converge again (what every deploy pays even when nothing changed)
  one-change  one process type's unit changed: write, daemon-reload, rolling restart of 3 instances
  no-pipe     no-change again with SSH-style pipelining off (each module: put file + run + clean up)
  mitogen     no-change and one-change again on Mitogen's podman transport (mitogen_linear), as the release and
              deploy scenarios run
  status      ansible-playbook sturdy.workers.status against a bare `systemctl show` of the same units over the same
              hosts (the issue's bound: status within 2x of it)

Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "molecule" / "_shared"))
from testhosts import on_mitogen  # noqa: E402  (the same Mitogen settings the scenarios' test runs use)

SCENARIO = ROOT / "molecule" / "worker"
MOLECULE = ["molecule", "-c", str(ROOT / ".config" / "molecule" / "config.yml")]


def molecule(*args: str) -> None:
    subprocess.run([*MOLECULE, *args, "-s", "worker"], cwd=ROOT, check=True, capture_output=True)


def converge(env: dict, extra: dict | None = None) -> float:
    cmd = ["ansible-playbook", "-i", env["INVENTORY"], str(SCENARIO / "converge.yml")]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(extra or {}, fh)
    began = time.monotonic()
    subprocess.run([*cmd, "-e", f"@{fh.name}"], env=env, check=True, stdout=subprocess.DEVNULL)
    os.unlink(fh.name)
    return time.monotonic() - began


BARE_SHOW = """
- name: A bare systemctl show of the app's units on every host
  hosts: all
  gather_facts: false
  become: true
  tasks:
    - name: Show them
      ansible.builtin.command: systemctl show --property=Id,ActiveState,NRestarts,MainPID -- {app}-*@*.service
      changed_when: false
"""


def playbook(env: dict, path: str, extra_file: str) -> float:
    began = time.monotonic()
    subprocess.run(["ansible-playbook", "-i", env["INVENTORY"], "-e", f"@{extra_file}", path], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - began


def main() -> int:
    molecule("destroy")
    molecule("create")
    molecule("prepare")
    # the scenario state molecule just wrote (other checkouts leave their own molecule.*.worker dirs)
    state = max(Path.home().glob(".ansible/tmp/molecule.*.worker"), key=lambda p: (p / "inventory").stat().st_mtime)
    env = dict(os.environ, ANSIBLE_CONFIG=str(state / "ansible.cfg"), INVENTORY=str(state / "inventory"))
    decl = yaml.safe_load((SCENARIO / "vars" / "main.yml").read_text())
    changed = [dict(p) for p in decl["sturdy_processes"]]
    changed[0] = dict(changed[0], environment={"WORKER_GREETING": "bench"})

    first = converge(env)
    same = converge(env)
    one = converge(env, {"sturdy_processes": changed})
    converge(env)
    no_pipe = converge(dict(env, ANSIBLE_PIPELINING="false"))
    with tempfile.TemporaryDirectory() as tmp:
        bare, extra = Path(tmp) / "bare.yml", Path(tmp) / "vars.json"
        bare.write_text(BARE_SHOW.format(app=decl["sturdy_app"]))
        extra.write_text(json.dumps(decl))
        playbook(env, str(bare), str(extra))  # warm both caches once
        show = min(playbook(env, str(bare), str(extra)) for dummy in range(3))
        status = min(playbook(env, "sturdy.workers.status", str(extra)) for dummy in range(3))
    mitogen = on_mitogen(env)
    same_mitogen = converge(mitogen)
    one_mitogen = converge(mitogen, {"sturdy_processes": changed})
    molecule("destroy")

    print(f"first converge             {first:6.1f} s   1.00")
    print(f"no-change converge         {same:6.1f} s   {same / first:.2f} x first")
    print(f"one unit changed (rolling) {one:6.1f} s   {one / same:.2f} x no-change")
    print(f"no-change, pipelining off  {no_pipe:6.1f} s   {no_pipe / same:.2f} x no-change with pipelining")
    print(f"no-change, Mitogen         {same_mitogen:6.1f} s   {same_mitogen / same:.2f} x no-change stock")
    print(f"one unit changed, Mitogen  {one_mitogen:6.1f} s   {one_mitogen / one:.2f} x one-change stock")
    print(f"status (best of 3)         {status:6.1f} s   {status / show:.2f} x a bare systemctl show play ({show:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
