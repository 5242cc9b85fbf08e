"""``python -m crs_bridge``: the ``crs-bridge`` command."""

import sys

from .cli import main

sys.exit(main())
