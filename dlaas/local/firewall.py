"""Host firewall rules that fence a platform's job containers in (iptables, IPv4).

Job containers run hostile code. Every job gets a bridge network of its own whose host
interface carries the platform's prefix (`jobspec.bridge_name`), and these rules, in two
chains of the platform's own, hold for every such interface:

- FORWARD: nothing is routed from or to a job bridge: not to another job's containers,
  another Docker network or another host. Frames bridged inside one job's bridge stay
  allowed: with br_netfilter loaded (bridge-nf-call-iptables=1) they pass FORWARD too and
  are told apart by `--physdev-is-bridged`; without it they never reach iptables.
- INPUT from a job bridge: TCP to the S3 port, and replies to connections the host opened;
  everything else is dropped: etcd, the gRPC services, the API, SeaweedFS's internals,
  anything else listening on 0.0.0.0, whichever host address a container aims at.
- INPUT to the S3 gateway's gRPC port from anything but loopback: dropped. SeaweedFS binds
  it on the S3 gateway's address (every interface: containers reach S3 through a bridge
  gateway) and has no flag to bind it elsewhere; it is unauthenticated.

IPv6 needs nothing: Docker turns IPv6 off inside containers on networks without it (the
job networks), and a container without NET_ADMIN cannot turn it on again.

`rules()` is pure: the chains, their rules and the jumps into them. `apply()` loads the
chains with one `iptables-restore --noflush` (one transaction: a chain is never seen
half-filled, so re-applying on a running platform opens no gap) and inserts the jumps
from INPUT and FORWARD where missing; `remove()` deletes the jumps and the chains. Both
are idempotent, and several platforms on one machine each touch only their own chains
(named after a hash of the platform id; every rule is commented with the id).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from dlaas.domain import jobspec

INSTALL_HINT = "install it (apt-get install -y iptables)"
# Built-in chains the platform's chains are jumped from, and the suffix of each.
HOOKS = {"INPUT": "IN", "FORWARD": "FWD"}


class FirewallError(RuntimeError):
    """The rules could not be read, applied or removed; the message says why."""


@dataclass(frozen=True)
class Ruleset:
    """One platform's rules: chain -> rules (iptables arguments after `-A chain`), and the
    jumps (built-in chain, arguments) that lead into them."""

    platform_id: str
    bridge_prefix: str
    chains: dict[str, list[list[str]]] = field(default_factory=dict)
    jumps: list[tuple[str, list[str]]] = field(default_factory=list)

    def restore_text(self) -> str:
        """The chains as `iptables-restore --noflush` input: each chain created or emptied,
        then filled, in one commit."""
        lines = ["*filter"]
        lines += [f":{chain} - [0:0]" for chain in self.chains]
        for chain, rules in self.chains.items():
            lines += [" ".join(map(_restore_word, ["-A", chain, *rule])) for rule in rules]
        lines.append("COMMIT")
        return "\n".join(lines) + "\n"


def _restore_word(word: str) -> str:
    # iptables-restore knows double quotes only (comment() keeps quotes out of comments).
    return f'"{word}"' if " " in word else word


def chain_name(platform_id: str, hook: str) -> str:
    """ "DLAAS-<8 hex of the platform id>-IN" (iptables allows 28 characters)."""
    digest = hashlib.sha256(platform_id.encode()).hexdigest()[:8]
    return f"DLAAS-{digest}-{HOOKS[hook]}"


def comment(platform_id: str) -> list[str]:
    # iptables keeps at most 256 characters of a comment; quotes would need escaping.
    safe = re.sub(r"[^A-Za-z0-9._:/@+-]", "_", platform_id)[:200]
    return ["-m", "comment", "--comment", f"dlaas platform {safe}"]


def rules(platform_id: str, s3_port: int, s3_grpc_port: int | None = None) -> Ruleset:
    """The rules fencing in platform `platform_id`'s job containers (see the module doc)."""
    if not platform_id:
        raise ValueError("platform_id must be non-empty")
    if not 0 < s3_port < 65536 or (s3_grpc_port is not None and not 0 < s3_grpc_port < 65536):
        raise ValueError(f"ports must be in 1..65535: s3 {s3_port}, s3 gRPC {s3_grpc_port}")
    note = comment(platform_id)
    bridges = jobspec.bridge_prefix(platform_id) + "+"
    inbound = chain_name(platform_id, "INPUT")
    forward = chain_name(platform_id, "FORWARD")
    inbound_rules = [
        ["-i", bridges, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", *note,
         "-j", "ACCEPT"],
        ["-i", bridges, "-p", "tcp", "--dport", str(s3_port), *note, "-j", "ACCEPT"],
        ["-i", bridges, *note, "-j", "DROP"],
    ]  # fmt: skip
    if s3_grpc_port:
        inbound_rules.append(
            ["!", "-i", "lo", "-p", "tcp", "--dport", str(s3_grpc_port), *note, "-j", "DROP"]
        )
    forward_rules = [
        # Bridged inside one bridge (one job's own network): not this chain's business.
        ["-m", "physdev", "--physdev-is-bridged", *note, "-j", "RETURN"],
        ["-i", bridges, *note, "-j", "DROP"],
        ["-o", bridges, *note, "-j", "DROP"],
    ]
    return Ruleset(
        platform_id=platform_id,
        bridge_prefix=jobspec.bridge_prefix(platform_id),
        chains={inbound: inbound_rules, forward: forward_rules},
        jumps=[("INPUT", [*note, "-j", inbound]), ("FORWARD", [*note, "-j", forward])],
    )


def foreign_users_of_prefix(listing: str, ruleset: Ruleset) -> list[str]:
    """Rules of other platforms' chains (in `iptables -S` output) that match this
    platform's bridge prefix: two platform ids whose hashes share the prefix. Pure."""
    ours = set(ruleset.chains)
    clashes = []
    for line in listing.splitlines():
        words = line.split()
        if (
            len(words) > 2
            and words[0] == "-A"
            and words[1].startswith("DLAAS-")
            and words[1] not in ours
            and f"{ruleset.bridge_prefix}+" in words
        ):
            clashes.append(line)
    return clashes


# --------------------------------------------------------------------------- adapter


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/sbin/{name}") if os.access(p, os.X_OK)), None
    )
    if found is None:
        raise FirewallError(f"{name} not found: the platform fences job containers in with "
                            f"host firewall rules; {INSTALL_HINT}")  # fmt: skip
    return found


def _run(name: str, *args: str, stdin: str | None = None, check: bool = True):
    try:
        done = subprocess.run(
            [_binary(name), "-w", "10", *args],
            input=stdin, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise FirewallError(f"{name} {' '.join(args[:2])} failed: {e}") from None
    if check and done.returncode != 0:
        hint = " (it needs root: CAP_NET_ADMIN)" if os.geteuid() != 0 else ""
        raise FirewallError(
            f"{name} {' '.join(args)} refused{hint}: {done.stderr.strip() or done.returncode}"
        )
    return done


def apply(platform_id: str, s3_port: int, s3_grpc_port: int | None = None) -> Ruleset:
    """Install (or update in place) the platform's rules; return them. Idempotent."""
    ruleset = rules(platform_id, s3_port, s3_grpc_port)
    clashes = foreign_users_of_prefix(_run("iptables", "-S").stdout, ruleset)
    if clashes:
        raise FirewallError(
            f"another platform's firewall rules already match job bridges "
            f"{ruleset.bridge_prefix}+ ({clashes[0]}): give this platform another id"
        )
    _run("iptables-restore", "--noflush", stdin=ruleset.restore_text())
    for hook, args in ruleset.jumps:
        if _run("iptables", "-C", hook, *args, check=False).returncode != 0:
            # First: the fence must hold before anything else in the chain accepts.
            _run("iptables", "-I", hook, "1", *args)
    return ruleset


def remove(platform_id: str) -> bool:
    """Delete the platform's jumps and chains; True if there was anything. Idempotent."""
    chains = [chain_name(platform_id, hook) for hook in HOOKS]
    found = False
    for hook in HOOKS:
        for line in _run("iptables", "-S", hook).stdout.splitlines():
            words = shlex.split(line)
            if words[:2] == ["-A", hook] and any(c in words for c in chains):
                _run("iptables", "-D", hook, *words[2:], check=False)
                found = True
    for chain in chains:
        if _run("iptables", "-F", chain, check=False).returncode == 0:
            _run("iptables", "-X", chain, check=False)
            found = True
    return found


def installed(platform_id: str) -> list[str]:
    """The platform's rules as `iptables -S` prints them (empty when none)."""
    chains = [chain_name(platform_id, hook) for hook in HOOKS]
    out = []
    for hook in (*HOOKS, *chains):
        done = _run("iptables", "-S", hook, check=False)
        out += [
            line
            for line in done.stdout.splitlines()
            if line.startswith("-A ") and any(c in line.split() for c in chains)
        ]
    return out
