"""crs-bridge: the JSON-RPC server over the scheduling engine in :mod:`core`."""

import os

#: The release (the one place it is written: pyproject.toml reads it from here).
__version__ = "0.1.0"
#: The upstream releases whose answers this one gives (``bridge.info``; ``crs-bridge doctor``
#: checks the installed ones against them).
UPSTREAM = {"crate": ["2.0.0", "2.1.0"], "libpve-rs-perl": "0.13.0", "pve-ha-manager": "5.2.0"}

# The engine does no BLAS work that threads would speed up, while OpenBLAS starts a spinning
# thread per core as NumPy is imported (docs/performance.md): one thread, unless the environment
# says otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
