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
