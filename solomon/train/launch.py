"""torchrun for one node of a multi-node run, ending with one line instead of a traceback when the job cannot go on.

``python -m solomon.train.launch <torchrun's arguments>`` is ``python -m torch.distributed.run`` (the same parser,
agent and restarts), except how it ends: a rendezvous that times out (a node lost for good, or one that never
started) and a worker group that failed past ``--max-restarts`` each end with one ``error:`` line saying what
happened and how to resume, after torchrun's own report. ``distributed.torchrun_command`` builds its command line.
"""

from __future__ import annotations

import os
import sys

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousError
from torch.distributed.run import main as torchrun

from solomon.lifeline import LAUNCHER_ENV

# torchrun's agents share their rendezvous TCPStore with the workers by default, and that store outlives a restart
# with the previous attempt's keys in it: a restarted rank can read a peer's old gloo address and fail ("Connection
# refused"), using up the restart (pytorch/pytorch#135712: each agent counts its restarts alone, so no prefix keeps
# attempts apart; docs/kubernetes.md says how often it happened). With sharing off, rank 0's worker hosts a new
# store on a new port for every attempt.
UNSHARED_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
RESUME = "the last checkpoint stays: the same command on every node (or `dvc repro` on one) resumes from it"


def main(argv: list[str] | None = None) -> None:
    os.environ.update(UNSHARED_STORE)  # before the agent starts: it decides per rendezvous round
    os.environ[LAUNCHER_ENV] = str(os.getpid())  # the workers, each leading its own session, check they hang from it
    try:
        torchrun(argv)
    except RendezvousError as exc:  # a timeout (join_timeout), a closed rendezvous, a store that is gone
        reason = f" ({exc})" if str(exc) else ""
        print(f"error: the nodes did not meet again: {type(exc).__name__}{reason}; {RESUME}", file=sys.stderr)
        sys.exit(1)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        print(f"error: rank {rank} failed (exit {failure.exitcode}) and no restart is left; {RESUME}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
