"""The OpenRPC document ``rpc.discover`` returns, generated from the method registry.

Every method's params come from its params model(s) in :mod:`bridge.models` (one content
descriptor per field, in positional order) and its result from its result type, all through one
pydantic JSON-schema generation whose shared definitions land in ``components.schemas``. Nothing
here is written by hand per method, so the document cannot drift from what the server validates.

A ``scheduler.*`` method may have different params per mode (``add_node``); its descriptors are
then the union by name (those not in every mode are optional and say which mode takes them; one
whose shape differs by mode, ``scheduler.apply``'s ``mutations``, has the ``anyOf`` of the
shapes), and the extension ``x-modes`` gives each mode's positional order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import TypeAdapter

from .codes import INVALID_PARAMS, METHOD_NOT_FOUND, SCHEDULING_ERROR, UNKNOWN_HANDLE
from .registry import ANY_MODE, MethodSpec

OPENRPC_VERSION = "1.3.2"
_REF = "#/components/schemas/{model}"

ERRORS = {
    "InvalidParams": {
        "code": INVALID_PARAMS,
        "message": "params fail validation: names each bad field; data.errors = [{loc, msg}]",
    },
    "SchedulingError": {"code": SCHEDULING_ERROR, "message": "a scheduling error, with upstream's exact text"},
    "UnknownHandle": {"code": UNKNOWN_HANDLE, "message": "unknown or freed scheduler handle (named)"},
    "MethodUnavailable": {
        "code": METHOD_NOT_FOUND,
        "message": "the scheduler's mode has no such method (method and mode named)",
    },
}


def _method_errors(spec: MethodSpec) -> list[str]:
    if spec.stateful:
        return ["InvalidParams", "UnknownHandle", "MethodUnavailable", "SchedulingError"]
    if spec.name == "scheduler.free":
        return ["InvalidParams", "UnknownHandle"]
    if spec.name == "scheduler.new":
        return ["InvalidParams"]
    if spec.name.startswith(("rpc.", "bridge.", "shutdown", "debug.")):
        return []
    return ["InvalidParams", "UnknownHandle", "SchedulingError"]


def openrpc_document(specs: Iterable[MethodSpec], version: str) -> dict[str, Any]:
    """The OpenRPC 1.3 document describing ``specs`` (server ``version`` in ``info``)."""
    specs = list(specs)
    inputs = []
    for spec in specs:
        for mode, variant in spec.variants.items():
            inputs.append(((spec.name, mode), "validation", TypeAdapter(variant.params)))
        inputs.append(((spec.name, "result"), "serialization", TypeAdapter(spec.result)))
    schemas, defs = TypeAdapter.json_schemas(inputs, ref_template=_REF)
    components = dict(defs.get("$defs", {}))
    params_models = {variant.params.__name__ for spec in specs for variant in spec.variants.values()}

    def resolve(schema: dict) -> dict:
        ref = schema.get("$ref", "")
        return components[ref.rsplit("/", 1)[-1]] if ref.startswith("#/components/schemas/") else schema

    methods = []
    for spec in specs:
        by_mode = {mode: resolve(schemas[((spec.name, mode), "validation")]) for mode in spec.variants}
        result = schemas[((spec.name, "result"), "serialization")]
        methods.append(_method(spec, by_mode, result))
    # Params models are expanded into content descriptors; keep only what descriptors refer to.
    for name in params_models:
        components.pop(name, None)
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "crs-bridge",
            "version": version,
            "description": "Proxmox VE's cluster resource scheduler over JSON-RPC 2.0 on stdio "
            "(semantics of proxmox-resource-scheduling 2.0.0/2.1.0 and libpve-rs-perl 0.13.0).",
        },
        "methods": methods,
        "components": {"schemas": components, "errors": ERRORS},
    }


def _method(spec: MethodSpec, by_mode: dict[str, dict], result: dict) -> dict[str, Any]:
    method: dict[str, Any] = {
        "name": spec.name,
        "summary": spec.summary,
        "paramStructure": "either" if spec.positional else "by-name",
        "params": _descriptors(by_mode),
        "result": {"name": "result", "schema": result},
        "errors": [{"$ref": f"#/components/errors/{name}"} for name in _method_errors(spec)],
    }
    if spec.stateful:
        method["x-modes"] = {mode: list(schema.get("properties", {})) for mode, schema in by_mode.items()}
    return method


def _shape(schema: dict) -> dict:
    """A param's schema without its description (which goes to the descriptor)."""
    return {k: v for k, v in schema.items() if k != "description"}


def _descriptors(by_mode: dict[str, dict]) -> list[dict[str, Any]]:
    """One content descriptor per param name, in positional order (union over modes)."""
    found: dict[str, dict[str, Any]] = {}
    modes_of: dict[str, list[str]] = {}
    for mode, schema in by_mode.items():
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            prop = {k: v for k, v in prop.items() if k != "title"}
            descriptor = found.setdefault(name, {"name": name, "schema": prop, "required": name in required})
            descriptor["required"] = descriptor["required"] and name in required
            if _shape(prop) != _shape(descriptor["schema"]):  # a param whose shape depends on the mode
                shapes = descriptor["schema"].get("anyOf", [_shape(descriptor["schema"])])
                descriptor["schema"] = {"anyOf": [*shapes, _shape(prop)]}
            if "description" in prop:
                descriptor["description"] = prop["description"]
            modes_of.setdefault(name, []).append(mode)
    for name, modes in modes_of.items():
        if ANY_MODE not in modes and len(modes) < len(by_mode):
            found[name]["required"] = False
            note = f"{' and '.join(modes)} mode only"
            found[name]["description"] = (
                f"{found[name]['description']} ({note})" if "description" in found[name] else note
            )
    return list(found.values())
