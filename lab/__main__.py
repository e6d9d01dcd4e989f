"""``python -m lab``: see lab/cli.py."""

from lab.cli import main

main()
