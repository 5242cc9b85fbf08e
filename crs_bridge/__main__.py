"""``python -m crs_bridge``: the ``crs-bridge`` command."""

import sys

from .bridge.cli import main

sys.exit(main())
