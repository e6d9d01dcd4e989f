"""MLflow tracking: the only package that imports mlflow.

One MLflow run per training run, found again by its run id (tag ``solomon.run_id``; the same id names the run
directory), so a killed and resumed run, and every report made of it, land in the same MLflow run.

- ``store``: where the store is, and finding or opening the MLflow run of a training run (the shared base; its
  openers give MLflow's HTTP client fail-fast defaults); its ``redact`` takes credentials
  out of every URI and message shown, so the store's URI is never printed, logged or recorded as given;
- ``live``: ``LiveTracker`` streams the training loop's steps, evaluations and samples while it trains;
- ``replay``: ``sync_run`` logs a run directory, adding only what is missing (the report stage, and
  ``solomon track sync <run-id>`` after an outage), and returns the MLflow run that registration uses;
- ``registry``: model versions and aliases (``solomon promote``, ``solomon track register``);
- ``server``: a self-hosted MLflow server on loopback.

The local logs are the record of truth; MLflow is a view of them. Where: ``MLFLOW_TRACKING_URI`` when set (a
server such as ``http://127.0.0.1:5000``, or any database URI); otherwise the embedded default, SQLite in
``mlflow.db`` at the repository root with artifacts in ``mlartifacts/`` beside it. Never the deprecated
``./mlruns`` file store.
"""
