"""The firewall rules: what `rules()` builds (pure), and apply/remove on the real iptables
(idempotent, several platforms side by side, each removing only its own)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid

import pytest

from dlaas.domain import jobspec
from dlaas.local import firewall
from dlaas.local.firewall import FirewallError


def test_job_bridge_names_fit_linux_and_share_the_platform_prefix():
    a, b = jobspec.bridge_name("p1", "job-1"), jobspec.bridge_name("p1", "job-2")
    assert len(a) <= 15 and len(b) <= 15 and a != b
    assert a.startswith(jobspec.bridge_prefix("p1")) and b.startswith(jobspec.bridge_prefix("p1"))
    assert not jobspec.bridge_name("p2", "job-1").startswith(jobspec.bridge_prefix("p1"))
    # The extra engines' own bridges ("dlaas-br201") never carry a platform's prefix.
    assert not "dlaas-br201".startswith(jobspec.bridge_prefix("p1"))
    assert all(c in "0123456789abcdef" for c in jobspec.bridge_prefix("p1")[2:])


def _rule_text(ruleset) -> dict[str, list[str]]:
    return {chain: [" ".join(r) for r in rules] for chain, rules in ruleset.chains.items()}


def test_input_from_job_bridges_allows_the_s3_port_only_and_drops_the_rest():
    r = firewall.rules("p1", 8333, 18333)
    inbound = _rule_text(r)[firewall.chain_name("p1", "INPUT")]
    prefix = f"-i {jobspec.bridge_prefix('p1')}+"
    assert inbound[0].startswith(prefix) and "ESTABLISHED,RELATED" in inbound[0]
    assert inbound[1].startswith(f"{prefix} -p tcp --dport 8333") and inbound[1].endswith("ACCEPT")
    assert inbound[2].startswith(prefix) and inbound[2].endswith("-j DROP")
    # The gRPC port: from nowhere but loopback, whatever the source interface.
    assert inbound[3].startswith("! -i lo -p tcp --dport 18333") and inbound[3].endswith("DROP")
    assert all("dlaas platform p1" in rule for rule in inbound)


def test_nothing_is_routed_from_or_to_job_bridges_but_bridged_frames_pass():
    forward = _rule_text(firewall.rules("p1", 8333))[firewall.chain_name("p1", "FORWARD")]
    prefix = jobspec.bridge_prefix("p1") + "+"
    assert "--physdev-is-bridged" in forward[0] and forward[0].endswith("RETURN")
    assert forward[1].startswith(f"-i {prefix}") and forward[1].endswith("DROP")
    assert forward[2].startswith(f"-o {prefix}") and forward[2].endswith("DROP")


def test_no_grpc_rule_without_a_known_grpc_port_and_bad_ports_are_refused():
    inbound = firewall.rules("p1", 8333).chains[firewall.chain_name("p1", "INPUT")]
    assert len(inbound) == 3
    with pytest.raises(ValueError, match="ports"):
        firewall.rules("p1", 0)
    with pytest.raises(ValueError, match="platform_id"):
        firewall.rules("", 8333)


def test_restore_text_creates_or_empties_each_chain_in_one_commit():
    quoted = 'p "1"'
    text = firewall.rules(quoted, 8333).restore_text()
    lines = text.splitlines()
    assert lines[0] == "*filter" and lines[-1] == "COMMIT"
    assert f":{firewall.chain_name(quoted, 'INPUT')} - [0:0]" in lines
    # A comment is one double-quoted word; a quote in a platform id cannot break out.
    assert '--comment "dlaas platform p__1_"' in text


def test_another_platform_matching_the_same_prefix_is_found():
    mine = firewall.rules("p1", 8333)
    other_chain = "DLAAS-00000000-IN"
    listing = f"-A {other_chain} -i {mine.bridge_prefix}+ -j DROP\n-A INPUT -j ACCEPT\n"
    assert firewall.foreign_users_of_prefix(listing, mine) == [listing.splitlines()[0]]
    own = f"-A {firewall.chain_name('p1', 'INPUT')} -i {mine.bridge_prefix}+ -j DROP"
    assert firewall.foreign_users_of_prefix(own, mine) == []


# --------------------------------------------------------------------------- real iptables


@pytest.fixture
def platforms():
    if os.geteuid() != 0:
        pytest.skip("iptables needs root")
    ids = [f"t-fw-{uuid.uuid4().hex[:10]}" for _ in range(2)]
    yield ids
    for pid in ids:
        with contextlib.suppress(FirewallError):
            firewall.remove(pid)


def _jumps(hook: str, chain: str) -> int:
    out = subprocess.run(
        ["iptables", "-w", "10", "-S", hook], capture_output=True, text=True, check=True
    )
    return sum(1 for line in out.stdout.splitlines() if line.split()[-1:] == [chain])


def test_apply_is_idempotent_and_updates_the_port_in_place(platforms):
    pid = platforms[0]
    try:
        firewall.apply(pid, 8333, 18333)
    except FirewallError as e:
        pytest.skip(f"no iptables here: {e}")
    firewall.apply(pid, 8444, 18333)
    rules = firewall.installed(pid)
    assert _jumps("INPUT", firewall.chain_name(pid, "INPUT")) == 1
    assert _jumps("FORWARD", firewall.chain_name(pid, "FORWARD")) == 1
    assert any("--dport 8444" in r for r in rules) and not any("--dport 8333" in r for r in rules)
    assert len(rules) == 2 + 4 + 3  # two jumps, the INPUT chain, the FORWARD chain


def test_platforms_side_by_side_each_remove_only_their_own(platforms):
    first, second = platforms
    try:
        firewall.apply(first, 8333)
    except FirewallError as e:
        pytest.skip(f"no iptables here: {e}")
    firewall.apply(second, 9333)
    assert firewall.remove(first) is True
    assert firewall.installed(first) == []
    assert len(firewall.installed(second)) == 2 + 3 + 3
    assert firewall.remove(first) is False  # nothing left: idempotent
    assert firewall.remove(second) is True and firewall.installed(second) == []
