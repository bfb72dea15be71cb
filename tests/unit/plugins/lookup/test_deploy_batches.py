from __future__ import annotations

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.sturdy.workers.plugins.lookup.deploy_batches import LookupModule


def run(variables):
    loader = DataLoader()
    return LookupModule(loader=loader, templar=Templar(loader=loader)).run([], variables=variables)


def test_the_play_takes_the_inventorys_value_when_no_extra_or_play_var_gives_it():
    groups = {"all": ["app1", "app2"]}
    inventory = {"app1": {"sturdy_deploy_serial": 1}, "app2": {"sturdy_deploy_serial": 1}}
    # A play's serial: no sturdy_deploy_serial among its variables, the hosts' values in hostvars.
    assert run({"groups": groups, "hostvars": inventory}) == [1]
    # Nothing anywhere: a canary, then the rest.
    assert run({"groups": groups, "hostvars": {"app1": {}, "app2": {}}}) == [1, "100%"]
    # --syntax-check: no hostvars.
    assert run({"groups": groups}) == [1, "100%"]
    # An extra var is in every host's hostvars and among the play's variables.
    assert run({"groups": groups, "sturdy_deploy_serial": "[2]",
                "hostvars": {"app1": {"sturdy_deploy_serial": "[2]"}, "app2": {"sturdy_deploy_serial": "[2]"}}}) == [2]
