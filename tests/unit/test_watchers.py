"""A node that a call found down gets its event stream closed, so its watcher reconnects:
only a reconnection marks a node back, and an open stream would never reconnect (pure)."""

import threading

from services.jobmonitor.watchers import Reachability, Watchers


def test_a_node_found_down_has_its_stream_closed_once():
    reach = Reachability(clock=lambda: 5.0)
    watchers = Watchers({}, reach, keeper=None, on_job=print, on_status_deleted=print,
                        resync=lambda: None, stop=threading.Event(), reconnect_max_s=1)  # fmt: skip
    closed: list[str] = []
    watchers._closers["events-n1"] = lambda: closed.append("n1")
    watchers._closers["events-n2"] = lambda: closed.append("n2")
    reach.lost("n1")
    reach.lost("n1")  # already down: nothing more to close
    assert closed == ["n1"] and reach.down() == {"n1"} and reach.lost_at({"n1"}) == 5.0
    assert reach.back("n1") and not reach.back("n1")
