from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sturdy.workers.plugins.filter.batches import batches


def test_unset_is_a_canary_then_the_rest():
    for unset in (None, "", []):
        assert batches(unset) == [1, "100%"]


@pytest.mark.parametrize("given, expected", [
    (2, [2]), ("2", [2]), ("25%", ["25%"]), (" 25 % ", ["25%"]),
    ([1, "50%"], [1, "50%"]), ([1, 3, "100%"], [1, 3, "100%"]),
    # From the command line: -e 'sturdy_deploy_serial=[1,"50%"]' and -e 'sturdy_deploy_serial=[1,50%]'.
    ('[1,"50%"]', [1, "50%"]), ("[1,50%]", [1, "50%"]), ("[2]", [2]),
])
def test_what_ansibles_serial_takes_in_any_spelling(given, expected):
    assert batches(given) == expected


@pytest.mark.parametrize("bad", [0, "0", -1, "abc", "0%", "150%", "12.5%", [1, "x"], True, {"a": 1}])
def test_anything_else_is_refused_naming_the_variable_and_the_fix(bad):
    with pytest.raises(AnsibleFilterError, match=r"sturdy_deploy_serial=.* is not a batch size\. Give a count"):
        batches(bad)


def test_a_list_cut_at_a_space_by_key_value_parsing_is_refused_not_read_as_a_shorter_list():
    # -e 'sturdy_deploy_serial=[1, 50%]' reaches the play as '[1,': it must not become one batch of 1 host.
    with pytest.raises(AnsibleFilterError, match=r"cut short: a list on the command line needs no spaces"):
        batches("[1,")


def test_a_value_set_in_the_inventory_batches_the_play_as_the_tasks_read_it():
    # A play's serial sees no group_vars: sturdy_deploy_serial arrives undefined there, so the hosts' value is used.
    hostvars = {"app1": {"sturdy_deploy_serial": [1, "50%"]}, "app2": {"sturdy_deploy_serial": "[1,50%]"},
                "web1": {}}
    assert batches("", hostvars, ["app1", "app2", "web1"]) == [1, "50%"]
    # An extra var is in every host's hostvars too, and the value the play was given wins.
    assert batches(2, {"app1": {"sturdy_deploy_serial": 2}}, ["app1"]) == [2]
    assert batches("", {"app1": {}}, ["app1"]) == [1, "100%"]
    assert batches("", None, ["app1"]) == [1, "100%"]  # --syntax-check: a play has no hostvars


def test_hosts_holding_different_values_are_refused_naming_them():
    hostvars = {"app1": {"sturdy_deploy_serial": 2}, "app2": {"sturdy_deploy_serial": 2},
                "app3": {"sturdy_deploy_serial": "25%"}}
    with pytest.raises(AnsibleFilterError, match=r"differs between hosts \(\[2\] on app1, app2; \['25%'\] on app3\)"
                                                 r": one play batches every host with one value\. Set it once"):
        batches("", hostvars, ["app1", "app2", "app3"])
