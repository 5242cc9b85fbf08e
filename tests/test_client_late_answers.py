"""The public client after a read that timed out: the late answer is skipped, never handed to
the next call (the server is stopped with SIGSTOP, so the timeout fires whatever the load)."""

from __future__ import annotations

import os
import signal

import pytest

from crs_bridge.client import BridgeClient


def test_a_late_answer_is_not_the_next_calls_answer():
    with BridgeClient(timeout=30) as client:
        d = client.dynamic()
        d.add_node("n1", {"cpu": 4.0, "maxcpu": 8, "mem": 2 << 30, "maxmem": 16 << 30})
        d.add_node("n2", {"cpu": 1.0, "maxcpu": 8, "mem": 1 << 30, "maxmem": 16 << 30})
        os.kill(client.process.pid, signal.SIGSTOP)
        try:
            client.timeout = 0.1
            with pytest.raises(TimeoutError):
                d.list_nodes()
        finally:
            os.kill(client.process.pid, signal.SIGCONT)
            client.timeout = 30
        imbalance = d.calculate_node_imbalance()
        assert isinstance(imbalance, float) and imbalance > 0
        assert d.list_nodes() == ["n1", "n2"]
