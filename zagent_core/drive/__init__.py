"""What every driver of sessions shares (the CLI, the worker, mcp serve, the pytest plugin): opening the engine, choosing the model, settling a session without one, driving it."""
