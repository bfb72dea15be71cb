"""The floor a deploy is measured against (`make bench`): the same steps as sturdy.workers.deploy A->B done by hand
over the same transport, with no check beyond readiness and one smoke job per instance.

    python tools/floor.py --host sturdy-bench-1 --artifact dist/shop-B.tar.gz --build-id B [--transport podman|ssh]

On a host the collection deployed before (units, accounts and secrets in place): upload the artifact and the agent,
unpack, build the venv offline, put the agent and the release's identity in it, migrate once as the app's user with its secrets, switch
`current` atomically, write the build into the units, then per instance: restart, wait until it answers `celery inspect ping`, send it one smoke job
and check that it answers with the new build. Prints {"seconds": ..., "phases": {...}} as JSON.

Kept honest: every step the deploy needs for the same end state is here (a floor that skips work flatters the ratio);
nothing the deploy adds on top (preflight, lock, checksums, settle watch, report) is.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def agent_tarball(where: Path) -> Path:
    """The agent package as the release module writes it: its modules and the collection's names as names.py."""
    path = where / "sturdy_agent.tar"
    with tarfile.open(path, "w") as tar:
        for module in sorted((ROOT / "roles" / "release" / "files" / "sturdy_agent").glob("*.py")):
            tar.add(module, f"sturdy_agent/{module.name}")
        tar.add(ROOT / "plugins" / "module_utils" / "names.py", "sturdy_agent/names.py")
    return path


class Transport:
    """podman exec/cp or ssh/scp to one host, every command as root."""

    def __init__(self, kind: str, host: str, ssh_args: str = ""):
        self.kind, self.host, self.ssh_args = kind, host, shlex.split(ssh_args)

    def sh(self, script: str) -> str:
        argv = (["podman", "exec", self.host, "sh", "-c", script] if self.kind == "podman"
                else ["ssh", *self.ssh_args, self.host, "sh -c " + shlex.quote(script)])
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"floor: on {self.host}: {script[:120]} failed (rc {done.returncode}):\n"
                             f"{(done.stdout + done.stderr)[-2000:]}")
        return done.stdout

    def put(self, src: Path, dest: str) -> None:
        argv = (["podman", "cp", str(src), f"{self.host}:{dest}"] if self.kind == "podman"
                else ["scp", "-q", *self.ssh_args, str(src), f"{self.host}:{dest}"])
        subprocess.run(argv, check=True)


def as_app(unit: dict, workdir: str, argv: str) -> str:
    """A command run the way the units run: their user and group, the release, their secrets (environment file)."""
    return (f"systemd-run --quiet --collect --pipe --wait --uid={unit['User']} --gid={unit['Group']} "
            f"--working-directory={workdir} --property=EnvironmentFile={unit['EnvironmentFiles'].split()[0]} -- {argv}")


def floor(t: Transport, artifact: Path, build: str, app: str, process: str, instances: int, celery_app: str,
          migrate: str) -> dict:
    root, release = f"/srv/{app}", f"/srv/{app}/releases/{build}"
    marks, began = {}, time.monotonic()
    last = began

    def mark(step: str) -> None:
        nonlocal last
        now = time.monotonic()
        marks[step], last = round(now - last, 2), now

    # The units' user, group and secrets, as the deploy wrote them: the migration and the clients run the same way.
    shown = t.sh(f"mkdir -p {root}/.incoming; systemctl show -p User -p Group -p EnvironmentFiles {app}-{process}@1")
    unit = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    t.put(artifact, f"{root}/.incoming/{artifact.name}")
    with tempfile.TemporaryDirectory() as local:
        t.put(agent_tarball(Path(local)), f"{root}/.incoming/sturdy_agent.tar")
    mark("upload")
    t.sh(f"set -e; mkdir {release}; tar -xzf {root}/.incoming/{artifact.name} -C {release}; "
         # As the collection builds it: pip from the interpreter's own wheel, none in the venv.
         f"python3 -m venv --without-pip {release}/venv; "
         f"{release}/venv/bin/python $(ls /usr/share/python-wheels/pip-*.whl)/pip install -q --no-index --only-binary=:all: --find-links {release}/wheelhouse "
         f"$(python3 -c 'import json; print(\" \".join(json.load(open(\"{release}/MANIFEST.json\"))[\"install\"]))'); "
         f"site=$(echo {release}/venv/lib/python3*/site-packages); tar -xf {root}/.incoming/sturdy_agent.tar -C $site; "
         f"echo 'import sturdy_agent; sturdy_agent.activate()' > $site/sturdy_agent.pth; "
         f"""echo '{{"build_id": "{build}"}}' > {release}/RELEASE.json; """
         # The upload goes once unpacked, as the deploy's does.
         f"rm -f {root}/.incoming/{artifact.name}")
    mark("install")
    t.sh(as_app(unit, release, f"{release}/{migrate}"))
    mark("migrate")
    # The units carry the build (the environment and every journal line): rewritten, as the deploy does.
    t.sh(f"set -e; cd {root}; old=$(readlink current); ln -sfn releases/{build} .current.new; mv -T .current.new current; "
         f"ln -sfn $old .previous.new; mv -T .previous.new previous; "
         # The units name the release by its path (WorkingDirectory=, ExecStart=) and carry the build.
         f"sed -i -e 's/STURDY_BUILD_ID=[^\" ]*/STURDY_BUILD_ID={build}/' -e \"s#{root}/$old/#{release}/#g\" "
         f"-e \"s#{root}/$old\\$#{release}#\" /etc/systemd/system/{app}-{process}@.service; "
         "systemctl daemon-reload")
    mark("switch")
    host = t.sh("hostname").strip()
    python = f"{release}/venv/bin/python"
    for n in range(1, instances + 1):
        name, node = f"{app}-{process}@{n}.service", f"{process}{n}@{host}"
        t.sh(f"systemctl restart {name}")
        ping = as_app(unit, release, f"{release}/venv/bin/celery -A {celery_app} inspect ping -d {node} -t 2")
        t.sh(f"until {ping} >/dev/null 2>&1; do sleep 0.2; done")
        mark(f"restart {n}")
        out = t.sh(as_app(unit, release, f"{python} -m sturdy_agent smoke --celery-app {celery_app} "
                                         f"--timeout 30 sturdy.smoke.{app}-{process}@{n}.{host}"))
        answers = json.loads(out.strip().splitlines()[-1])
        got = [(a.get("answer") or {}).get("build_id") for a in answers]
        if got != [build]:
            raise SystemExit(f"floor: {name} answered {got}, not [{build!r}]: {out[-1000:]}")
        mark(f"smoke {n}")
    # The deploy report's phases: install (upload, unpack, venv), migrate, restart (switch, each restart and smoke).
    phases = {"install": marks["upload"] + marks["install"], "migrate": marks["migrate"],
              "restart": sum(v for k, v in marks.items() if k.startswith(("switch", "restart ", "smoke ")))}
    return {"seconds": round(time.monotonic() - began, 2), "phases": {k: round(v, 1) for k, v in phases.items()},
            "steps": marks}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="floor", description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--host", required=True)
    p.add_argument("--transport", choices=("podman", "ssh"), default="podman")
    p.add_argument("--ssh-args", default="", help="options for ssh and scp (one string), e.g. '-i key -o ...'")
    p.add_argument("--artifact", required=True, type=Path)
    p.add_argument("--build-id", required=True)
    p.add_argument("--app", default="shop")
    p.add_argument("--process", default="worker")
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--celery-app", default="shopdemo.celery")
    p.add_argument("--migrate", default="bin/shop-migrate")
    a = p.parse_args(argv)
    result = floor(Transport(a.transport, a.host, a.ssh_args), a.artifact, a.build_id, a.app, a.process, a.instances,
                   a.celery_app, a.migrate)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
