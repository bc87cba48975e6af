"""Sessions: the engine, a session's parts (appends, calls, people, background tasks, resume, turns) and the leases that keep one driver per session."""
