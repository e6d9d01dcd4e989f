"""The experiments behind ``docs/``: each page's runs as exact ``dvc exp run`` commands, run in a scratch copy of
the pipeline (the default corpus), their results checked in as data beside the page, and the page's commands,
tables and figures rebuilt from that data alone — so a page can be redrawn without retraining, and cannot show
numbers its commands did not produce.

- ``spec``: ``docs/experiments.yaml`` read and checked, and the exact commands of each page's runs;
- ``results``: a page's data directory, its files and what reading them tells (``read_results``, ``stale_runs``);
- ``runner``: ``python -m lab docs run``, the commands run with DVC in a scratch repository, their results kept;
- ``render``: ``python -m lab docs render``, a page's generated block and charts from its data alone.
"""
