"""The `burst` command line (main.py builds it; one module per command group)."""

from burst.cli.main import app, main

__all__ = ["app", "main"]
