dvc exp show --md --only-changed --drop 'Created$|State$|Executor$|.*/|.*\.(json|lock|py)$|(models|anchors|corpus)$'
