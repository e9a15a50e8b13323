"""Workspace lifecycle, API keys, authentication and usage."""
