"""Shared test settings: hypothesis profiles scaled by CRS_PROPERTY_EXAMPLES."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Examples per property test; raise it for a long campaign (e.g. CRS_PROPERTY_EXAMPLES=5000).
PROPERTY_EXAMPLES = int(os.environ.get("CRS_PROPERTY_EXAMPLES", "200"))

settings.register_profile(
    "crs",
    max_examples=PROPERTY_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("crs")
