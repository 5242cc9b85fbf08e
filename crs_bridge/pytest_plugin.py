"""pytest plugin (registered by the package's ``pytest11`` entry point): the fixture ``crs_bridge``.

A test that names it gets a started :class:`crs_bridge.client.BridgeClient`, a server of its own
that is stopped after the test::

    def test_imbalance(crs_bridge):
        s = crs_bridge.static()
        s.add_node("n1", 16, 64 << 30)
        assert s.calculate_node_imbalance() == 0.0

The server is the one :func:`crs_bridge.client.server_command` names (``$CRS_BRIDGE_COMMAND``
overrides it). For other options (serve flags, framing, a server shared by a module), use
:class:`~crs_bridge.client.BridgeClient` in a fixture of your own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .client import BridgeClient


@pytest.fixture
def crs_bridge() -> Iterator[BridgeClient]:
    """A crs-bridge server started for this test (stopped after it), as a client."""
    with BridgeClient() as client:
        yield client
