from __future__ import annotations

import pytest
from ansible.errors import AnsibleLookupError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.sturdy.workers.plugins.lookup.deploy_batches import LookupModule


def run(terms, variables):
    loader = DataLoader()
    return LookupModule(loader=loader, templar=Templar(loader=loader)).run(terms, variables=variables)


SHOP = {"app1": {"sturdy_deploy_serial": [1, "50%"]}, "app2": {"sturdy_deploy_serial": "[1,50%]"}}
BILLING = {"bill1": {"sturdy_deploy_serial": 1}}


def test_the_preflight_reads_the_value_the_tasks_see_and_checks_only_the_plays_hosts():
    hostvars = SHOP | BILLING
    # An inventory of two apps, each with its own value: deploying one of them is not refused for the other.
    assert run([["app1", "app2"]], {"sturdy_deploy_serial": [1, "50%"], "hostvars": hostvars}) == [1, "50%"]
    assert run([["bill1"]], {"sturdy_deploy_serial": 1, "hostvars": hostvars}) == [1]
    # A play var the inventory does not hold wins for every host.
    assert run([["app1", "bill1"]], {"sturdy_deploy_serial": 3, "hostvars": hostvars}) == [3]


def test_the_plays_hosts_holding_different_values_are_refused_naming_them():
    hostvars = SHOP | BILLING
    with pytest.raises(AnsibleLookupError, match=r"differs between the play's hosts \(\[1, '50%'\] on app1, app2; "
                                                 r"\[1\] on bill1\): one play batches every host with one value"):
        run([["app1", "app2", "bill1"]], {"sturdy_deploy_serial": [1, "50%"], "hostvars": hostvars})


def test_asked_for_the_problem_it_returns_the_line_instead_of_raising():
    loader = DataLoader()
    lookup = LookupModule(loader=loader, templar=Templar(loader=loader))
    hostvars = SHOP | BILLING
    differing = {"sturdy_deploy_serial": [1, "50%"], "hostvars": hostvars}
    (line,) = lookup.run([["app1", "app2", "bill1"]], variables=differing, problem=True)
    assert line.startswith("sturdy_deploy_serial differs between the play's hosts"), line
    (line,) = lookup.run([["bill1"]], variables={"sturdy_deploy_serial": "abc", "hostvars": {}}, problem=True)
    assert line.startswith("sturdy_deploy_serial='abc'"), line
    assert lookup.run([["bill1"]], variables={"sturdy_deploy_serial": 1, "hostvars": hostvars}, problem=True) == []


def test_a_plays_serial_takes_an_extra_or_play_var_or_else_what_this_runs_preflight_read():
    groups = {"all": ["app1", "app2", "bill1"]}
    assert run([], {"groups": groups, "sturdy_deploy_serial": "[2]", "hostvars": SHOP | BILLING}) == [2]
    # No inventory variable reaches a play's serial: the preflight's reading does, the latest run's.
    runs = {"app1": {"__sturdy_deploy_run": {"started": "1765000100.5", "batches": [1, "50%"]}},
            "app2": {"__sturdy_deploy_run": {"started": "1765000100.5", "batches": [1, "50%"]}},
            "bill1": {"__sturdy_deploy_run": {"started": "1765000000.0", "batches": [1]}}}
    assert run([], {"groups": groups, "hostvars": runs}) == [1, "50%"]
    # Nothing read: a canary, then the rest. --syntax-check and a playbook's first play have no hostvars.
    assert run([], {"groups": groups, "hostvars": {"app1": {}, "app2": {}, "bill1": {}}}) == [1, "100%"]
    assert run([], {"groups": groups}) == [1, "100%"]
