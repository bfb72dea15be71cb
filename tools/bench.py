"""Deploy benchmarks (`make bench`): every number a ratio measured in one run, on the same hosts. Not a test.

Starts a Redis host and 16 app hosts (bookworm, systemd as PID 1, podman), the demo app with one Celery process
type of 2 instances per host, deploys build 0 everywhere (not timed), then times:

  floor          tools/floor.py on host 1: the deploy's steps by hand, readiness and one smoke job per instance
  hosts-1        sturdy.workers.deploy A->B on host 1
  no-op          the same build again on host 1 (nothing to do)
  scale          the live build again on host 1 with 3 instances, then with 2 again (config-only releases)
  hosts-2/4/8/16 A->B on 2, 4, 8 and 16 hosts with the default batching (a canary, then the rest)
  serial 1       A->B on 8 hosts one host per batch (the default before the canary)
  backlog        A->B on host 1 while every slot runs a long task and more wait (restart phase against T)
  backlog-surge  the same with max_surge 100%: both instances restart at once while two surge instances consume
  one-window     hosts-1 with sturdy_worker_overlap_settle false: each instance watched before the next restarts
  instances      host 1 scaled to 4 instances (not timed), then A->B with the defaults, with overlap_settle false and
                 with max_surge 100%: what a host's restart phase costs per instance; then back to 2 (not timed)
  mitogen        hosts-1 and no-op again on Mitogen's podman transport (mitogen_linear)
  ssh            hosts-1, no-op, hosts-8 and hosts-16 over SSH (the images' sshd, a key of the bench's own, ControlPersist, pipelining),
                 then hosts-1 and no-op on Mitogen's SSH transport (mitogen_ssh)
  status         sturdy.workers.status on host 1 against a bare `systemctl show` play (best of 3 each)

Prints each against the floor (and hosts-N against hosts-1) with the CPU seconds the machine spent busy meanwhile
(controller and hosts: what a run costs the CPU-bound test suite), writes .bench/bench.json and, with matplotlib,
.bench/phases.png (each run's phases as a stacked bar). Hosts stay up for a look; `make bench-clean` removes them.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "molecule" / "_shared"))
# The Mitogen settings the scenarios run with, and their SSH key and address helpers.
from testhosts import address, on_mitogen, ssh_key  # noqa: E402

OUT = ROOT / ".bench"
NET, BROKER, IMAGE = "sturdy-bench", "sturdy-bench-broker", "localhost/sturdy-systemd:12"
HOSTS = [f"sturdy-bench-{n}" for n in range(1, 17)]
PHASES = ("preflight", "install", "migrate", "restart", "finish")  # the deploy report's, in order
TASK_SECONDS = 20  # the backlog's long tasks (max_task_runtime 30: the stop timeout covers them)
FORKS = len(HOSTS)

INVENTORY = """\
all:
  vars:
    ansible_connection: containers.podman.podman
    ansible_python_interpreter: /usr/bin/python3
    shop_redis_password: bench-only-password
    shop_dist: {out}/dist
    sturdy_app: shop
    sturdy_artifact: "{out}/dist/shop-{{{{ sturdy_build_id }}}}.tar.gz"
    sturdy_secrets:
      BROKER_URL: "redis://:{{{{ shop_redis_password }}}}@broker:6379/0"
    sturdy_secrets_required: [BROKER_URL]
    sturdy_migrate_command: [bin/shop-migrate]
    sturdy_deploy_broker: {{host: broker, port: 6379}}
    # A queue per host (host 1 takes the app's default queue, where shop-task sends): a deploy to some of the hosts
    # proves its real queue with no worker of another host, still on the old build, taking the smoke job.
    bench_queue: "{{{{ 'default' if inventory_hostname == '{first}' else 'bench.' ~ inventory_hostname }}}}"
    sturdy_processes:
      - name: worker
        adapter: celery
        celery_app: shopdemo.celery
        queues: ["{{{{ bench_queue }}}}"]
        command: [venv/bin/celery, -A, shopdemo.celery, worker, --concurrency, "2", --loglevel, INFO,
                  --without-gossip, --without-mingle, -Q, "{{{{ bench_queue }}}}"]
        instances: "{{{{ bench_instances | default(2) }}}}"
        max_task_runtime: 30
        max_surge: "{{{{ bench_surge | default(0) }}}}"
  children:
    brokers:
      hosts:
        {broker}:
    apps:
      hosts:
{apps}
"""


def busy_seconds() -> float:
    """CPU seconds this machine has spent busy since boot, all cores: the controller and the hosts alike (the hosts
    are containers here). A run's difference is what it costs a CPU-bound machine such as the test suite's."""
    with open("/proc/stat", encoding="ascii") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def controller_seconds() -> float:
    """CPU seconds (user and system) of this process's finished children: ansible-playbook and what it started."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sh(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, **kw)


def hosts_up() -> None:
    if subprocess.run(["podman", "network", "exists", NET], check=False).returncode != 0:
        sh("podman", "network", "create", NET, stdout=subprocess.DEVNULL)
    for name in [BROKER, *HOSTS]:
        alias = "broker" if name == BROKER else name
        if subprocess.run(["podman", "container", "exists", name], check=False).returncode != 0:
            sh("podman", "run", "-d", "--name", name, "--hostname", alias, "--network", NET, "--network-alias", alias,
               "--systemd=always", "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE", IMAGE, "/sbin/init",
               stdout=subprocess.DEVNULL)
        sh("podman", "start", name, stdout=subprocess.DEVNULL)
    for name in [BROKER, *HOSTS]:
        for dummy in range(120):
            state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], capture_output=True,
                                   text=True, check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)


def clean() -> None:
    for name in [BROKER, *HOSTS]:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, check=False)
    subprocess.run(["podman", "network", "rm", NET], capture_output=True, check=False)
    print(f"bench hosts and network removed ({OUT} kept)")


class Bench:
    def __init__(self):
        OUT.mkdir(exist_ok=True)
        (OUT / "ansible.cfg").write_text(
            f"[defaults]\ngathering = explicit\nforks = {FORKS}\ninventory = {OUT}/inventory.yml\n"
            "[connection]\npipelining = true\n")
        (OUT / "inventory.yml").write_text(INVENTORY.format(
            out=OUT, broker=BROKER, first=HOSTS[0], apps="\n".join(f"        {h}:" for h in HOSTS)))
        self.env = dict(os.environ, ANSIBLE_CONFIG=str(OUT / "ansible.cfg"), MOLECULE_EPHEMERAL_DIRECTORY=str(OUT))
        self.results: dict[str, dict] = {}
        self.cpu = self.controller = 0.0
        # Build IDs of this run only: a second run on the same hosts deploys releases they have not seen either.
        self.stamp, self.builds = time.strftime("%Y%m%d.%H%M%S"), 0

    def play(self, *args: str, env: dict | None = None, log: str = "play") -> float:
        """Run ansible-playbook; its wall seconds (the machine's busy CPU seconds meanwhile in self.cpu, and the share
        of the controller's processes, ansible-playbook and the podman or ssh clients it starts, in self.controller)."""
        began, cpu, mine = time.monotonic(), busy_seconds(), controller_seconds()
        with open(OUT / f"{log}.log", "w", encoding="utf-8") as fh:
            done = subprocess.run(["ansible-playbook", *args], env=env or self.env, stdout=fh, stderr=subprocess.STDOUT,
                                  check=False)
        if done.returncode != 0:
            raise SystemExit(f"bench: ansible-playbook {' '.join(args)} failed: see {OUT}/{log}.log")
        self.cpu, self.controller = busy_seconds() - cpu, controller_seconds() - mine
        return time.monotonic() - began

    def build(self) -> str:
        """A new build of the demo app (each timed deploy installs a release the hosts have not seen)."""
        self.builds += 1
        build = f"{self.stamp}-b{self.builds}"
        sh(sys.executable, str(ROOT / "tests" / "apps" / "build_artifact.py"), "--build-id", build, "--out",
           str(OUT / "dist"), "--cache", str(ROOT / ".build" / "artifact-cache"), stdout=subprocess.DEVNULL)
        return build

    def last(self) -> str:
        return f"{self.stamp}-b{self.builds}"

    def deploy(self, label: str, hosts: list[str], build: str, env: dict | None = None, *extra: str) -> dict:
        report = OUT / f"report-{label.replace(' ', '-')}.json"
        seconds = self.play("sturdy.workers.deploy", "-e", f"sturdy_build_id={build}", "-e",
                            f"sturdy_deploy_hosts={':'.join(hosts)}", "-e", f"sturdy_deploy_report={report}", *extra,
                            env=env, log=f"deploy-{label.replace(' ', '-')}")
        rep = json.loads(report.read_text())
        if rep["result"] != "success":
            raise SystemExit(f"bench: deploy {label} did not succeed: {rep['message']}")
        self.results[label] = {"seconds": round(seconds, 1), "cpu": round(self.cpu, 1),
                               "controller cpu": round(self.controller, 1), "phases": rep["phases"],
                               "hosts": len(hosts),
                               # Hosts where nothing differed from their last deploy (a no-op's must be all).
                               "unchanged": sum(bool(h.get("unchanged")) for h in rep["hosts"].values())}
        if "no-op" in label and self.results[label]["unchanged"] != len(hosts):
            raise SystemExit(f"bench: the {label} deploy was not a no-op: "
                             + "; ".join(f"{n}: {h.get('differs')}" for n, h in rep["hosts"].items()))
        return self.results[label]

    def floor(self, label: str, host: str, build: str, *transport: str) -> dict:
        cpu = busy_seconds()
        out = sh(sys.executable, str(ROOT / "tools" / "floor.py"), "--host", host, "--artifact",
                 str(OUT / "dist" / f"shop-{build}.tar.gz"), "--build-id", build, *transport,
                 stdout=subprocess.PIPE).stdout
        self.results[label] = json.loads(out) | {"hosts": 1, "cpu": round(busy_seconds() - cpu, 1)}
        return self.results[label]

    def backlog(self, host: str, label: str = "backlog", *extra: str) -> None:
        """Every slot of host 1 busy with TASK_SECONDS tasks for longer than the deploy takes, then the deploy; the
        backlog is drained before the next part."""
        key, count = f"bench-{time.time():.0f}", 24  # 4 slots x 6 rounds of 20 s: 120 s of work
        sh("podman", "exec", host, "/usr/local/sbin/shop-task", "--sleep", key, str(TASK_SECONDS), str(count),
           stdout=subprocess.DEVNULL)
        time.sleep(3)
        self.deploy(label, [host], self.build(), None, *extra)
        for dummy in range(90):
            runs = json.loads(sh("podman", "exec", host, "/usr/local/sbin/shop-task", "--sleep", "--runs", key,
                                 str(count), capture_output=True).stdout)
            if runs["done"] >= count:
                break
            time.sleep(5)

    def status(self) -> None:
        bare = OUT / "bare-show.yml"
        bare.write_text("- name: A bare systemctl show of the app's units\n  hosts: sturdy-bench-1\n"
                        "  gather_facts: false\n  become: true\n  tasks:\n    - name: Show them\n"
                        "      ansible.builtin.command: systemctl show --property=Id,ActiveState,NRestarts,MainPID "
                        "-- shop-*@*.service\n      changed_when: false\n")
        self.play(str(bare), log="bare-show")
        show = min(self.play(str(bare), log="bare-show") for dummy in range(3))
        status = min(self.play("sturdy.workers.status", "-e", "sturdy_status_hosts=sturdy-bench-1", log="status")
                     for dummy in range(3))
        self.results["bare show"] = {"seconds": round(show, 1)}
        self.results["status"] = {"seconds": round(status, 1)}

    def run(self, parts: list[str]) -> None:
        """Every part in order; a subset (`python tools/bench.py floor hosts-1 backlog`) on hosts set up before."""
        def hosts(n: int) -> None:
            self.deploy(f"hosts-{n}", HOSTS[:n], self.build())

        def ssh() -> None:
            # The test images run sshd (testbed/build-image.sh): only the key is the bench's own.
            key, addresses = ssh_key(OUT / "ssh", HOSTS), {h: address(h) for h in HOSTS}
            inventory = OUT / "inventory-ssh.yml"
            inventory.write_text(INVENTORY.format(out=OUT, broker=BROKER, first=HOSTS[0], apps="\n".join(
                f"        {h}: {{ansible_connection: ssh, ansible_host: {addresses[h]}, ansible_user: root}}"
                for h in HOSTS)))
            options = ("-o ControlMaster=auto -o ControlPersist=120s -o ControlPath=/tmp/bench-ssh-%C "
                       "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")
            env = dict(self.env, ANSIBLE_INVENTORY=str(inventory),
                       ANSIBLE_PRIVATE_KEY_FILE=str(key), ANSIBLE_SSH_ARGS=options)
            self.floor("ssh floor", f"root@{addresses[HOSTS[0]]}", self.build(), "--transport", "ssh", "--ssh-args",
                       f"-i {key} {options}")
            self.deploy("ssh hosts-1", HOSTS[:1], self.build(), env)
            self.deploy("ssh no-op", HOSTS[:1], self.last(), env)
            self.deploy("ssh hosts-8", HOSTS[:8], self.build(), env)
            self.deploy("ssh hosts-16", HOSTS, self.build(), env)
            # Mitogen's strategy takes ansible_connection=ssh over with its own SSH transport (mitogen_ssh).
            self.deploy("mitogen_ssh hosts-1", HOSTS[:1], self.build(), on_mitogen(env))
            self.deploy("mitogen_ssh no-op", HOSTS[:1], self.last(), on_mitogen(env))

        def instances() -> None:
            four = ("-e", "bench_instances=4")
            self.deploy("setup 4 instances", HOSTS[:1], self.last(), None, *four)
            self.deploy("4 instances", HOSTS[:1], self.build(), None, *four)
            self.deploy("4 instances one-window", HOSTS[:1], self.build(), None, *four, "-e",
                        "sturdy_worker_overlap_settle=false")
            self.deploy("4 instances surge", HOSTS[:1], self.build(), None, *four, "-e", "bench_surge=100%")
            self.deploy("setup 2 instances", HOSTS[:1], self.last(), None)

        def mitogen() -> None:
            env = on_mitogen(self.env)
            self.deploy("mitogen hosts-1", HOSTS[:1], self.build(), env=env)
            self.deploy("mitogen no-op", HOSTS[:1], self.last(), env=env)

        steps = {
            "setup": lambda: (hosts_up(), self.play(str(ROOT / "molecule" / "deploy" / "prepare.yml"), log="prepare"),
                              self.deploy("setup", HOSTS, self.build())),
            "floor": lambda: self.floor("floor", HOSTS[0], self.build()),
            "hosts-1": lambda: hosts(1),
            "no-op": lambda: self.deploy("no-op", HOSTS[:1], self.last()),
            "scale": lambda: (self.deploy("scale up", HOSTS[:1], self.last(), None, "-e", "bench_instances=3"),
                              self.deploy("scale down", HOSTS[:1], self.last(), None, "-e", "bench_instances=2")),
            "hosts-2": lambda: hosts(2), "hosts-4": lambda: hosts(4), "hosts-8": lambda: hosts(8),
            "hosts-16": lambda: hosts(16),
            "serial-1": lambda: self.deploy("hosts-8 serial 1", HOSTS[:8], self.build(), None, "-e",
                                            "sturdy_deploy_serial=1"),
            "backlog": lambda: self.backlog(HOSTS[0]),
            "backlog-surge": lambda: self.backlog(HOSTS[0], "backlog surge", "-e", "bench_surge=100%"),
            "one-window": lambda: self.deploy("hosts-1 one-window", HOSTS[:1], self.build(), None, "-e",
                                              "sturdy_worker_overlap_settle=false"),
            "instances": instances,
            "mitogen": mitogen,
            "ssh": ssh,
            "status": self.status,
        }
        unknown = [p for p in parts if p not in steps]
        if unknown:
            raise SystemExit(f"bench: no part {', '.join(unknown)}; the parts: {' '.join(steps)}")
        for name, step in steps.items():
            if not parts or name in parts:
                step()


def summary(results: dict) -> list[str]:
    """One line per part measured: seconds, the ratio the issue's targets name, the phases."""
    r = {k: v["seconds"] for k, v in results.items()}
    lines = [f"machine: {os.cpu_count()} cores; podman transport, pipelining on, forks {FORKS}, serial default",
             f"{'run':<24}{'seconds':>8}{'cpu s':>7}{'ctl s':>7}{'ctl/h':>6}  {'ratio':<36} phases"]

    def line(name: str, against: str = "", what: str = "") -> None:
        if name not in r:
            return
        if not against:
            ratio = what
        elif against in r:
            ratio = f"{r[name] / r[against]:.2f} x {what or against}"
        else:
            ratio = f"(no {against} in this run)"
        phases = dict(sorted(results[name].get("phases", {}).items(), key=lambda kv: PHASES.index(kv[0])))
        cpu, ctl = results[name].get("cpu", ""), results[name].get("controller cpu", "")
        # The controller's CPU seconds per host of the run.
        per_host = f"{ctl / results[name]['hosts']:.1f}" if ctl != "" and results[name].get("hosts") else ""
        lines.append(f"{name:<24}{r[name]:>8.1f}{cpu:>7}{ctl:>7}{per_host:>6}  {ratio:<36} "
                     + " ".join(f"{k} {v}" for k, v in phases.items()))

    line("floor", what="1.00")
    line("hosts-1", "floor")
    line("no-op", "hosts-1")
    line("scale up", "hosts-1", "hosts-1 (2 -> 3 instances)")
    line("scale down", "hosts-1", "hosts-1 (3 -> 2 instances)")
    line("hosts-1 one-window", "floor")
    for n in (2, 4, 8, 16):
        line(f"hosts-{n}", "hosts-1")
    line("hosts-16", "hosts-8", "hosts-8")
    for name in ("4 instances", "4 instances one-window", "4 instances surge"):
        restart = results.get(name, {}).get("phases", {}).get("restart")
        if restart is not None and "hosts-1" in results:
            line(name, what=f"restart {restart / results['hosts-1']['phases']['restart']:.2f} x hosts-1's (2)")
    line("hosts-8 serial 1", "hosts-1", "hosts-1 (one host per batch)")
    if "backlog" in results:
        restart = results["backlog"]["phases"].get("restart", 0)
        line("backlog", what=f"restart {restart / TASK_SECONDS:.2f} x T={TASK_SECONDS}s (2 instances)")
    if "backlog surge" in results:
        restart = results["backlog surge"]["phases"].get("restart", 0)
        line("backlog surge", what=f"restart {restart / TASK_SECONDS:.2f} x T (max_surge 100%)")
    line("mitogen hosts-1", "hosts-1", "hosts-1 stock")
    line("mitogen no-op", "no-op", "no-op stock")
    line("ssh floor", "floor", "floor over podman")
    line("ssh hosts-1", "ssh floor")
    line("ssh no-op", "ssh hosts-1")
    line("ssh hosts-8", "ssh hosts-1")
    line("ssh hosts-16", "ssh hosts-1")
    line("ssh hosts-16", "ssh hosts-8", "ssh hosts-8")
    line("mitogen_ssh hosts-1", "ssh hosts-1", "ssh hosts-1 stock")
    line("mitogen_ssh no-op", "ssh no-op", "ssh no-op stock")
    line("status", "bare show", "a bare systemctl show play")
    line("bare show", what="")
    return lines


def chart(results: dict, path: Path) -> str:
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
        matplotlib.use("Agg")
        from matplotlib import pyplot  # pylint: disable=import-outside-toplevel
    except ImportError:
        return "no chart: matplotlib is not installed (make bench installs requirements-bench.txt)"
    runs = [k for k, v in results.items() if v.get("phases") and k != "setup"]
    if not runs:
        return "no chart: no timed deploy in this run"
    names = [p for p in PHASES if any(p in results[k]["phases"] for k in runs)]
    fig, ax = pyplot.subplots(figsize=(10, 0.5 * len(runs) + 1.5))
    left = [0.0] * len(runs)
    for phase in names:
        widths = [results[k]["phases"].get(phase, 0) for k in runs]
        ax.barh(runs, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    ax.legend(ncol=len(names), loc="lower right", fontsize="small")
    ax.set_title("sturdy.workers deploy phases (make bench, one run)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"chart: {path}"


def main(argv: list[str]) -> int:
    if argv[1:] == ["clean"]:
        clean()
        return 0
    bench = Bench()
    try:
        bench.run(argv[1:])
    finally:
        (OUT / "bench.json").write_text(json.dumps(bench.results, indent=2, sort_keys=True) + "\n")
    lines = summary(bench.results)
    lines.append(chart(bench.results, OUT / "phases.png"))
    (OUT / "bench.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
