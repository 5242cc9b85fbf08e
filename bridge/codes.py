"""The JSON-RPC error codes the server answers with (spec ``rpc.md``, Errors), in one place."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: The engine refused the call (upstream's text exactly).
SCHEDULING_ERROR = -32000
#: A scheduler handle that was never issued or was freed.
UNKNOWN_HANDLE = -32001
