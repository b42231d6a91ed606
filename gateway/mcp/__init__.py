"""The MCP door: the official SDK's streamable HTTP server (`server`) and the
four tools over the core (`tools`)."""
