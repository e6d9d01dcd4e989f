"""Training: the loop (``loop.py``) and its small stateful parts, each with one job."""
