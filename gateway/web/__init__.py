"""The HTTP door: REST API, webhooks, MCP mount, dashboard and playbook."""
