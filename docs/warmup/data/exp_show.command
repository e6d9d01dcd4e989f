dvc exp show --md --only-changed --drop Created|State|Executor|bytes|seconds|run_id
