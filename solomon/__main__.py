"""``python -m solomon``: the ``solomon`` command, for where the console script is not on PATH (an emulated CPU)."""

from solomon.cli import main

main()
