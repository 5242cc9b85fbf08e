"""crs-bridge: Proxmox VE's cluster resource scheduler over JSON-RPC.

The installed names live under this one package, so that no working directory can shadow them:
:mod:`crs_bridge.core` (the scheduling engine, the repository's ``core/``),
:mod:`crs_bridge.bridge` (the JSON-RPC server, the repository's ``bridge/``), and beside them the
tools that talk to a server: :mod:`crs_bridge.client` (the public Python client, with its pytest
fixture in :mod:`crs_bridge.pytest_plugin`) and the ``crs-bridge`` command (:mod:`crs_bridge.cli`,
with :mod:`~crs_bridge.render`, :mod:`~crs_bridge.replay`, :mod:`~crs_bridge.doctor` and
:mod:`~crs_bridge.review`).
"""
