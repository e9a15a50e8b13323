"""The `memplane` command line."""
