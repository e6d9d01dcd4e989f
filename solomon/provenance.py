"""Where a run came from: the git commit and whether code or params differed from it."""

from __future__ import annotations

import subprocess

from solomon import records

# The pipeline's own outputs change during every run; they do not make a checkout dirty. (Every other output
# is DVC-tracked, so git ignores it; `reports/` holds the step logs, reports/latest.json and the run directories.)
PIPELINE_OUTPUTS = (records.DVC_LOCK, records.METRICS, records.REPORTS_DIR)


def git_state() -> dict:
    def git(*args: str) -> str | None:
        try:
            # --no-optional-locks: a status refreshes git's index under index.lock; a process killed meanwhile
            # (a killed `dvc repro`) would leave that lock and break every later git command in the checkout.
            command = ["git", "--no-optional-locks", *args]
            done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=10)
            return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", *(f":!{p}" for p in PIPELINE_OUTPUTS))
    return {"commit": commit, "dirty": bool(status) if status is not None else None}
