from __future__ import annotations

from ansible_collections.sturdy.workers.plugins.filter.running_builds import running_builds


def test_each_build_names_the_instances_running_it_and_stopped_ones_are_left_out():
    units = {
        "h2": {"shop-worker@1.service": {"Cwd": "/srv/shop/releases/b5"},
               "shop-worker@2.service": {"Cwd": "/srv/shop/releases/b2/app"}},
        "h1": {"shop-worker@1.service": {"Cwd": "/srv/shop/releases/b2"},
               "shop-worker@2.service": {"Cwd": None}, "shop-web@1.service": {"Cwd": "/"}},
        "h3": None,
    }
    assert running_builds(units, "/srv/shop/releases/") == {
        "b2": ["h1 shop-worker@1.service", "h2 shop-worker@2.service"], "b5": ["h2 shop-worker@1.service"]}
