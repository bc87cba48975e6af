"""The agent: its loop, the conversation the model sees, sub-agents (children) and the model providers (models/)."""
