from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.singleton_host import singleton_host

BEAT = {"name": "beat", "singleton": True}
WORKER = {"name": "worker"}
HOSTVARS = {
    "redis1": {},
    "app1": {"sturdy_app": "ledger", "sturdy_processes": [WORKER]},
    "app2": {"sturdy_app": "ledger", "sturdy_processes": [WORKER, BEAT]},
    "app3": {"sturdy_app": "ledger", "sturdy_processes": [WORKER, BEAT]},
    "shop1": {"sturdy_app": "shop", "sturdy_processes": [BEAT]},
}
INVENTORY = ["shop1", "redis1", "app1", "app2", "app3"]


def test_the_first_inventory_host_declaring_the_apps_singleton_whatever_the_play_holds():
    # A --limit to app3, or a batch that holds app3 only, still names app2: app3 never starts a second scheduler.
    for play in (["app1", "app2", "app3"], ["app3"], ["app1", "app3"]):
        assert singleton_host("", "ledger", INVENTORY, HOSTVARS, play) == "app2"
    assert singleton_host("", "shop", INVENTORY, HOSTVARS, ["shop1"]) == "shop1"


def test_a_host_removed_from_the_inventory_hands_it_to_the_next_one():
    assert singleton_host("", "ledger", ["app1", "app3"], HOSTVARS, ["app1", "app3"]) == "app3"


def test_a_named_host_wins():
    assert singleton_host("app3", "ledger", INVENTORY, HOSTVARS, ["app1"]) == "app3"


def test_processes_given_as_play_variables_fall_back_to_the_first_host_of_the_play():
    assert singleton_host("", "other", INVENTORY, HOSTVARS, ["app3", "app1"]) == "app3"
    assert singleton_host("", "other", INVENTORY, HOSTVARS, []) == ""
