"""Refusals an agent reads: one code, one plain sentence, the REST error body.

A tool that refuses answers a tool error (`isError: true`): its text is
`code: sentence`, what the agent reads, and its `_meta` carries the same
`{"code", "message"}` the REST API answers in its error body, under
`relayroom/error`, for a program that branches on the code.  Not in
`structuredContent`: clients (the TypeScript SDK's, so the Inspector's)
check structured content against the tool's output schema even on an
error, and the error body is not a recall result.  The SDK's
own wording ("Error executing tool recall: 1 validation error for
recallArguments ...", a pydantic dump with a documentation link) never
reaches the agent: arguments that fail the published schema become one
sentence naming the argument and what it must be.

A resource or prompt that refuses answers a JSON-RPC error (that is what
those methods have), carrying the same body in its `data`.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from mcp import MCPError
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from gateway.core.errors import GatewayError, NotFound

# JSON-RPC codes of the MCP specification for resources/read and prompts/get.
RESOURCE_NOT_FOUND = -32002
INVALID_PARAMS = -32602

_SHOWN_VALUE_CHARS = 40


class RefusedTool(ToolError):
    """A tool refusal that already carries its contract code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def refused(exc: GatewayError) -> RefusedTool:
    return RefusedTool(exc.code, exc.message)


ERROR_META = "relayroom/error"


def error_result(code: str, message: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=f"{code}: {message}")],
        is_error=True,
        _meta={ERROR_META: {"code": code, "message": message}},
    )


def tool_error_result(tool: str, exc: ToolError, tool_names: Iterable[str]) -> CallToolResult:
    """The agent-facing form of whatever the SDK raised for this tool call."""
    found = _find(exc, RefusedTool)
    if found is not None:
        return error_result(found.code, found.message)
    invalid = _find(exc, ValidationError)
    if invalid is not None:
        return error_result("invalid_argument", arguments_sentence(tool, invalid))
    names = sorted(tool_names)
    if tool not in names:
        return error_result("unknown_tool", f"there is no tool {_shown(tool)}; the tools are {_listed(names, 'and')}.")
    # Any other ToolError is the SDK's deliberate refusal: keep its text, which
    # names no value of the caller's beyond what the caller sent.
    return error_result("tool_failed", str(exc))


def unknown_arguments(tool: str, arguments: dict[str, Any], schema: dict[str, Any]) -> CallToolResult | None:
    """The tool error for arguments the tool does not take (`unknown_argument`,
    naming them), or None when every argument is one of its own."""
    known = list(schema.get("properties", {}))
    unknown = sorted(name for name in arguments if name not in known)
    if not unknown:
        return None
    return error_result(
        "unknown_argument",
        f"{tool} takes no argument {_listed([_shown(name) for name in unknown[:5]])}; its arguments are "
        f"{_listed(known, 'and')}. Nothing was done.",
    )


def _find(exc: BaseException, kind: type[Any]) -> Any:
    seen: BaseException | None = exc
    for _ in range(5):  # the SDK wraps a tool's own exception at most twice
        if seen is None:
            return None
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__
    return None


def arguments_sentence(tool: str, exc: ValidationError) -> str:
    """One sentence for all the arguments that failed, each said once."""
    parts: list[str] = []
    seen: set[str] = set()
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error.get("loc", ()) if not str(part).startswith(("literal[", "function-"))]
        name = loc[0] if loc else "the arguments"
        if name in seen:
            continue
        seen.add(name)
        parts.append(_problem(name, error))
        if len(parts) == 3:
            break
    if not parts:
        return f"the arguments of {tool} do not match its published input schema."
    return "; ".join(parts) + "."


def _problem(name: str, error: Any) -> str:
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "missing":
        return f"{name} is required"
    if kind == "missing_argument":
        return f"{name} is required"
    if kind == "unexpected_keyword_argument" or kind == "extra_forbidden":
        return f"{name} is not one of the arguments"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        choices = [c.strip().strip("'\"") for c in str(expected).replace(" or ", ",").split(",") if c.strip()]
        return f"{name} must be one of {_listed(choices)}, not {_shown(value)}"
    if kind in ("string_too_short",):
        minimum = ctx.get("min_length", 1)
        return f"{name} must not be empty" if minimum == 1 else f"{name} must be at least {minimum} characters"
    if kind == "string_too_long":
        return f"{name} must be at most {ctx.get('max_length')} characters (it has {_length(value)})"
    if kind in ("less_than_equal", "less_than", "greater_than_equal", "greater_than"):
        words = {
            "less_than_equal": ("at most", "le"), "less_than": ("less than", "lt"),
            "greater_than_equal": ("at least", "ge"), "greater_than": ("greater than", "gt"),
        }[kind]
        bound = next((v for k, v in ctx.items() if k in ("le", "lt", "ge", "gt")), "?")
        return f"{name} must be {words[0]} {_number(bound)}, not {_shown(value)}"
    if kind in ("string_type", "string_sub_type", "string_unicode"):
        return f"{name} must be a string"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{name} must be a whole number"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"{name} must be a finite number"
    if kind in ("bool_type", "bool_parsing"):
        return f"{name} must be true or false"
    message = str(error.get("msg", "is not valid")).rstrip(".")
    return f"{name}: {message[:1].lower()}{message[1:]}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_VALUE_CHARS else text[: _SHOWN_VALUE_CHARS - 3] + "..."


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _length(value: Any) -> str:
    return str(len(value)) if isinstance(value, str) else "more"


def _listed(items: list[str], conjunction: str = "or") -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def prompt_error(name: str, exc: Exception, prompt_names: Iterable[str]) -> MCPError:
    """The SDK says a prompt failed with a bare ValueError; say why in the contract's shape."""
    names = sorted(prompt_names)
    invalid = _find(exc, ValidationError)
    if name not in names:
        code, message = "unknown_prompt", f"there is no prompt {_shown(name)}; the prompts are {_listed(names, 'and')}."
    elif invalid is not None:
        code, message = "invalid_argument", arguments_sentence(name, invalid)
    elif str(exc).startswith("Missing required arguments"):
        missing = re.findall(r"'([^']*)'", str(exc)) or ["an argument"]
        code, message = "invalid_argument", f"{_listed(missing, 'and')} {'is' if len(missing) == 1 else 'are'} required."
    else:
        code, message = "prompt_failed", f"the prompt {name} could not be rendered."
    return MCPError(code=INVALID_PARAMS, message=f"{code}: {message}", data={"error": {"code": code, "message": message}})


def unknown_resource(uri: str, names: list[str]) -> MCPError:
    code, message = "resource_not_found", f"there is no resource {_shown(uri)}; the resources are {_listed(names, 'and')}."
    return MCPError(code=RESOURCE_NOT_FOUND, message=f"{code}: {message}",
                    data={"error": {"code": code, "message": message}, "uri": uri})


def request_error(exc: GatewayError, uri: str | None = None) -> MCPError:
    """A resources/read or prompts/get refusal as a JSON-RPC error with the contract body."""
    data: dict[str, Any] = {"error": {"code": exc.code, "message": exc.message}}
    if uri is not None:
        data["uri"] = uri
    code = RESOURCE_NOT_FOUND if isinstance(exc, NotFound) and uri is not None else INVALID_PARAMS
    return MCPError(code=code, message=f"{exc.code}: {exc.message}", data=data)
