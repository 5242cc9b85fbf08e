"""Introspection against the real server: ``rpc.discover`` is a valid OpenRPC document listing
every method of the contract (rpc.md, wire.md), and ``bridge.info`` says what it should."""

from __future__ import annotations

from importlib import metadata

import jsonschema
import pytest

from crs_bridge.client import BridgeClient

#: A minimal OpenRPC 1.x meta-schema: the REQUIRED fields of the OpenRPC specification's
#: OpenRPC, Info, Method, Content Descriptor and Error objects (a Reference Object wherever the
#: specification allows one), and the allowed values of paramStructure.
REFERENCE = {"type": "object", "required": ["$ref"], "properties": {"$ref": {"type": "string"}}}
CONTENT_DESCRIPTOR = {
    "type": "object",
    "required": ["name", "schema"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "schema": {"type": ["object", "boolean"]},
        "required": {"type": "boolean"},
        "summary": {"type": "string"},
        "description": {"type": "string"},
    },
}
ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
}
OPENRPC_META_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["openrpc", "info", "methods"],
    "properties": {
        "openrpc": {"type": "string", "pattern": r"^1\.\d+\.\d+$"},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "properties": {"title": {"type": "string"}, "version": {"type": "string"}},
        },
        "methods": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "params"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "params": {"type": "array", "items": {"anyOf": [CONTENT_DESCRIPTOR, REFERENCE]}},
                    "result": {"anyOf": [CONTENT_DESCRIPTOR, REFERENCE]},
                    "errors": {"type": "array", "items": {"anyOf": [ERROR, REFERENCE]}},
                    "paramStructure": {"enum": ["by-name", "by-position", "either"]},
                },
            },
        },
        "components": {
            "type": "object",
            "properties": {
                "schemas": {"type": "object", "additionalProperties": {"type": ["object", "boolean"]}},
                "errors": {"type": "object", "additionalProperties": ERROR},
            },
        },
    },
}

#: The contract's methods (rpc.md, wire.md) with each scheduler.* method's positional params per
#: mode, in binding order.
HEADLINE = [
    "score_best_balancing_migrations",
    "select_best_balancing_migration",
    "calculate_node_imbalance",
    "score_nodes_to_start_resource",
]
BINDING = {
    "add_node": {"static": ["nodename", "maxcpu", "maxmem"], "dynamic": ["nodename", "stats"]},
    "remove_node": {"static": ["nodename"], "dynamic": ["nodename"]},
    "list_nodes": {"static": [], "dynamic": []},
    "contains_node": {"static": ["nodename"], "dynamic": ["nodename"]},
    "add_service": {"static": ["sid", "service"]},
    "add_resource": {"dynamic": ["sid", "resource"]},
    "add_service_usage_to_node": {"static": ["nodename", "sid", "service_stats"]},
    "remove_service_usage": {"static": ["sid"]},
    "remove_resource": {"dynamic": ["sid"]},
    "calculate_node_imbalance": {"static": [], "dynamic": []},
    "score_best_balancing_migration_candidates": {
        "static": ["candidates", "limit"],
        "dynamic": ["candidates", "limit"],
    },
    "score_best_balancing_migration_candidates_topsis": {
        "static": ["candidates", "limit"],
        "dynamic": ["candidates", "limit"],
    },
    "score_nodes_to_start_service": {"static": ["service_stats"]},
    "score_nodes_to_start_resource": {"dynamic": ["resource_stats"]},
    "select_best_balancing_migration": {
        "static": ["candidates", "imbalance_threshold"],
        "dynamic": ["candidates", "imbalance_threshold"],
    },
    "select_best_balancing_migration_topsis": {"static": ["candidates"], "dynamic": ["candidates"]},
}
SERVICE = ["scheduler.new", "scheduler.free", "rpc.discover", "bridge.info", "shutdown"]


@pytest.fixture(scope="module")
def bridge():
    with BridgeClient() as client:
        yield client


@pytest.fixture(scope="module")
def document(bridge):
    return bridge.call("rpc.discover")


@pytest.fixture(scope="module")
def methods(document):
    return {m["name"]: m for m in document["methods"]}


def test_document_is_valid_openrpc(document):
    jsonschema.Draft202012Validator.check_schema(OPENRPC_META_SCHEMA)
    jsonschema.validate(document, OPENRPC_META_SCHEMA, cls=jsonschema.Draft202012Validator)
    assert document["info"]["version"] == metadata.version("crs-bridge")


def test_every_contract_method_is_listed_with_params_and_result(methods):
    expected = HEADLINE + [f"scheduler.{name}" for name in BINDING] + SERVICE
    assert set(expected) <= set(methods)
    for name in expected:
        method = methods[name]
        assert isinstance(method["params"], list), name
        assert all(isinstance(p["schema"], dict) and p["schema"] for p in method["params"]), name
        assert "schema" in method["result"], name


def test_schemas_are_valid_and_every_reference_resolves(document):
    components = document["components"]["schemas"]
    refs = []

    def walk(node):
        if isinstance(node, dict):
            assert not {"ge", "gt", "le", "lt"} & node.keys(), node  # pydantic spellings, not JSON Schema's
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs
    for ref in refs:
        section, name = ref.removeprefix("#/components/").split("/")
        assert name in document["components"][section], ref
    for schema in components.values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_scheduler_methods_take_the_bindings_params_in_order(methods):
    for name, by_mode in BINDING.items():
        method = methods[f"scheduler.{name}"]
        assert method["paramStructure"] == "either"
        assert method["x-modes"] == {mode: ["scheduler", *params] for mode, params in by_mode.items()}, name
        assert method["params"][0]["name"] == "scheduler" and method["params"][0]["required"] is True


def test_headline_methods_take_named_params(methods):
    for name in HEADLINE:
        params = {p["name"]: p for p in methods[name]["params"]}
        assert methods[name]["paramStructure"] == "by-name"
        assert {"usage", "scheduler"} <= set(params)
        assert not params["usage"]["required"] and not params["scheduler"]["required"]
    limit = {p["name"]: p for p in methods["score_best_balancing_migrations"]["params"]}["limit"]
    assert limit["required"] is True and limit["schema"]["minimum"] == 0


def test_param_schemas_accept_what_the_server_accepts(document, methods, bridge):
    """A valid call's params validate against the published param schemas."""
    components = document["components"]
    usage = {"mode": "static", "nodes": [{"name": "a", "maxcpu": 4, "maxmem": 2**33}], "resources": []}
    params = {"usage": usage, "candidates": [], "limit": 1, "method": "topsis"}
    assert bridge.call("score_best_balancing_migrations", params) == []
    for descriptor in methods["score_best_balancing_migrations"]["params"]:
        if descriptor["name"] in params:
            schema = {**descriptor["schema"], "components": components}
            jsonschema.validate(params[descriptor["name"]], schema, cls=jsonschema.Draft202012Validator)


def test_bridge_info(bridge):
    info = bridge.call("bridge.info")
    assert info["version"] == metadata.version("crs-bridge")
    assert set(info["upstream"]["crate"]) == {"2.0.0", "2.1.0"}
    assert info["upstream"]["libpve-rs-perl"] == "0.13.0"
    assert set(info["imbalance_formulas"]) == {"normalized", "raw"} and info["default_imbalance"] == "raw"
    assert set(info["framings"]) == {"ndjson", "content-length"}
    assert info["limits"]["max_message_bytes"] > 0
    live = info["schedulers"]
    handle = bridge.call("scheduler.new", {"mode": "static"})["scheduler"]
    assert bridge.call("bridge.info")["schedulers"] == live + 1
    bridge.call("scheduler.free", [handle])
    assert bridge.call("bridge.info")["schedulers"] == live
