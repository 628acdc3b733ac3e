"""LeaderElection's campaign against an in-memory etcd (the real one: test_lcm_resilience)."""

from __future__ import annotations

from types import SimpleNamespace

from dlaas.adapters.leader import LeaderElection


class FakeLease:
    def __init__(self, etcd: FakeEtcd):
        self.etcd = etcd
        self.revoked = False

    def revoke(self) -> None:
        self.revoked = True
        self.etcd.writes += 1


class FakeEtcd:
    """Just what a campaign uses; counts the requests that go through etcd's raft log."""

    def __init__(self):
        self.kv: dict[str, bytes] = {}
        self.writes = 0
        self.transactions = SimpleNamespace(
            version=lambda key: key,  # the compare itself is not looked at
            put=lambda key, value, lease=None: (key, value),
        )

    def get(self, key: str):
        return self.kv.get(key), None

    def lease(self, ttl: int) -> FakeLease:
        self.writes += 1
        return FakeLease(self)

    def transaction(self, compare, success, failure):
        self.writes += 1
        ((key, value),) = success
        if key in self.kv:
            return False, []
        self.kv[key] = value.encode()
        return True, []


def test_a_standby_writes_nothing_while_the_key_is_held_and_takes_it_once_gone():
    etcd = FakeEtcd()
    etcd.kv["leader"] = b"a"
    b = LeaderElection(etcd, "leader", "b")
    for _ in range(50):  # ten seconds of looks at the default poll_s
        assert b._campaign() is False
    assert etcd.writes == 0

    del etcd.kv["leader"]  # a's lease expired
    assert b._campaign() is True
    assert etcd.kv["leader"] == b"b"


def test_a_campaign_that_loses_the_race_gives_its_lease_back():
    etcd = FakeEtcd()
    b = LeaderElection(etcd, "leader", "b")
    real_transaction = etcd.transaction

    def racing(compare, success, failure):
        etcd.kv["leader"] = b"c"  # c's campaign landed between b's look and b's transaction
        return real_transaction(compare, success, failure)

    etcd.transaction = racing
    assert b._campaign() is False
    assert b._lease is None
