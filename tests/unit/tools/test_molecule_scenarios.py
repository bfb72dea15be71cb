"""The molecule scenarios run side by side (tools/molecule_lanes.sh): podman's container and network names are
global, so two scenarios naming the same host remove each other's containers."""

from __future__ import annotations

from pathlib import Path

import yaml

MOLECULE = Path(__file__).resolve().parents[3] / "molecule"


def test_no_two_scenarios_share_a_container_or_a_network():
    seen: dict[str, str] = {}
    for config in sorted(MOLECULE.glob("*/molecule.yml")):
        scenario = config.parent.name
        platforms = yaml.safe_load(config.read_text())["platforms"]
        names = {p["name"] for p in platforms} | {f"network {p['network']}" for p in platforms if p.get("network")}
        for name in names:
            assert name not in seen, f"{name} is in the {seen[name]} and {scenario} scenarios"
            seen[name] = scenario
    assert len(seen) >= 10
