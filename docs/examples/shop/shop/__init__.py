"""A shop agent for convdb: see docs/own-agent.md."""
