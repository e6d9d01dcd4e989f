"""The ``solomon`` command (the console script ``solomon.cli:main``): ``main`` builds the parser from the command
modules (``runs``, ``pipeline``, ``audit``, ``export``, ``serve``, ``lineage``, ``review``, ``track``) on what they
share (``arguments``)."""

from solomon.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
