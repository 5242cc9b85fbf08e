"""Shared test settings (hypothesis profiles scaled by CRS_PROPERTY_EXAMPLES) and the fixtures
that check results against the server's published schemas (a module provides ``bridge``)."""

from __future__ import annotations

import os

import jsonschema
import pytest
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


@pytest.fixture(scope="module")
def result_validators(bridge):
    doc = bridge.call("rpc.discover")
    return {
        m["name"]: jsonschema.Draft202012Validator({**m["result"]["schema"], "components": doc["components"]})
        for m in doc["methods"]
    }


@pytest.fixture
def rpc(bridge, result_validators):
    """Call a method and check its result against the published result schema."""

    def call(method, params=None):
        result = bridge.call(method, params)
        result_validators[method].validate(result)
        return result

    return call
