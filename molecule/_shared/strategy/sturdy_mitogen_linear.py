"""Mitogen's mitogen_linear strategy, listing the installed collections once per run instead of once per task.

Mitogen's planner lists every collection directory (all those the `ansible` package bundles) whenever a worker
process first runs a collection module, and every task runs in a fresh worker: measured on a no-op deploy, the
listing was 15% of the controller's CPU. The list is made here, in the parent, before any worker forks.
A play on the controller alone (molecule's create and destroy, whose podman jobs run async) runs on the stock
linear strategy: Mitogen's async jobs are not where their async_status looks. Test harness only: the collection
never depends on Mitogen.
"""

from __future__ import annotations

import ansible.collections.list
import ansible_mitogen.affinity
import ansible_mitogen.loaders
import ansible_mitogen.planner
import ansible_mitogen.strategy

# Mitogen pins its processes to CPUs: on a 2-CPU machine the multiplexer gets one, and the controller, every worker,
# every `podman exec` into a test host and everything the modules run there (pip, migrations, celery calls) share
# the other. Measured: a release install on three hosts took 45 s pinned, 22 s on the stock strategy. No pinning.
ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()

Base = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, Base):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        found = [path.decode("utf-8") for path in ansible.collections.list.list_collection_dirs()]
        ansible_mitogen.planner._load_collections = lambda invocation: invocation._extra_sys_paths.update(found)

    def run(self, iterator, play_context, result=0):
        hosts = self._inventory.get_hosts(iterator._play.hosts)
        if hosts and all(host.name in ("localhost", "127.0.0.1") for host in hosts):
            return Base.run(self, iterator, play_context)
        return super().run(iterator, play_context, result)
