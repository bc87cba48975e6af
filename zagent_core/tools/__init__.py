"""Running one tool of any kind: manifests, argument validation, invocation, the process runner and its supervisor, results, notes, background tasks, in-process tools and MCP servers' tools."""
