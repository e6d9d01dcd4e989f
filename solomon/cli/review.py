"""`solomon review`: the merge-request note, how metrics and params moved between two revisions."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(commands: argparse._SubParsersAction) -> None:
    review = commands.add_parser(
        "review", help="the merge-request note: dvc metrics and params diff of two revisions (--post: to GitLab)"
    )
    review.add_argument("--base", required=True, help="the target branch's revision, e.g. origin/main")
    review.add_argument("--head", default="HEAD", help="the revision under review (default: HEAD)")
    review.add_argument("--repo", default=".", help="the git + DVC repository (default: here)")
    review.add_argument(
        "--post", action="store_true", help="create, or edit in place, the MR note (GitLab CI variables + token)"
    )
    review.add_argument("--token-env", default="SOLOMON_REVIEW_TOKEN", help="variable holding the API token")
    review.set_defaults(func=_review)


def _review(args: argparse.Namespace) -> None:
    from solomon.report.review import NotesApi, post_or_update, render_note

    pipeline = os.environ.get("CI_PIPELINE_URL")
    footer = f"<sub>Pipeline {pipeline}; this note is edited in place on every push.</sub>" if pipeline else ""
    body = render_note(Path(args.repo), args.base, args.head, footer)
    if not args.post:
        print(body, end="")
        return
    action, note_id = post_or_update(NotesApi.from_ci_environment(os.environ, args.token_env), body)
    print(f"review note {note_id} {action}")
