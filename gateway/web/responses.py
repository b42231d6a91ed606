"""The JSON response every route answers with: starlette's, rendered by `gateway.core.jsonio`."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse as _StarletteJSONResponse

from gateway.core import jsonio


class JSONResponse(_StarletteJSONResponse):
    def render(self, content: Any) -> bytes:
        return jsonio.dumps(content)
