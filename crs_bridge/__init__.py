"""crs-bridge: Proxmox VE's cluster resource scheduler over JSON-RPC.

The installed names live under this one package, so that no working directory can shadow them:
:mod:`crs_bridge.core` (the scheduling engine, the repository's ``core/``) and
:mod:`crs_bridge.bridge` (the JSON-RPC server, the repository's ``bridge/``).
"""
