"""Multi-node training on two simulated hosts (tests/netns.py): torchrun's c10d rendezvous across a veth pair,
one rank per node, the tiny pipeline's train stage. The two-node run trains the bytes of the one-node two-process
run; a lost worker is restarted by torchrun and the run still ends with those bytes; a lost node ends the survivor
in bounded time and a later one-node run resumes; a node that does not share the checkpoints is refused.

They need root and `ip` (they skip, saying why, elsewhere); `make multinode` runs them
alone, `make test-long` with the other minute-long tests.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, digest, run_train, train_args, wait_until, workdir
from netns import TwoHosts, leftover_namespaces, unavailable, worker_pid

from solomon.pipeline import pipeline_env
from solomon.records import STEP_LOG
from solomon.train.distributed import torchrun_command
from solomon.train.hooks import pause_environment

pytestmark = [pytest.mark.slow, pytest.mark.long]  # about 2 minutes in all
COUNTER = itertools.count()
TWO_RANKS = {"train": {"nproc": 2, "accum_steps": 1, "threads": 1}}
PORT = 29400
JOIN_TIMEOUT_S = 20  # how long a rendezvous waits for a node that does not come (torchrun's default: 600)
RUN_TIMEOUT_S = 300
REPORTS = ("train_log.tsv", "train_evals.jsonl", "train_metrics.json", "train_run.json")


def node_command(built_repo: Path, cwd: Path, rdzv_id: str, max_restarts: int = 0) -> list[str]:
    """What each node runs: torchrun (the chart's flags, from the same builder) and the train stage's command."""
    launcher = torchrun_command(2, 1, f"node0:{PORT}", rdzv_id, max_restarts, JOIN_TIMEOUT_S)
    return [sys.executable, *launcher, *train_args(built_repo, cwd)[1:]]


def outcome(cwd: Path) -> dict:
    """What a run made: the model's SHA256, the step log's deterministic columns, the evaluations and results."""
    lines = [line.split("\t") for line in (cwd / STEP_LOG).read_text().splitlines()]
    keep = [i for i, name in enumerate(lines[0]) if name != "tokens_per_s"]
    return {
        "model": digest(cwd / "models/model.safetensors"),
        "steps": [[row[i] for i in keep] for row in lines],
        "evals": (cwd / "reports/train_evals.jsonl").read_text(),
        "metrics": (cwd / "reports/train_metrics.json").read_text(),
    }


def finish(agents: list[subprocess.Popen], logs: list[Path], timeout: float = RUN_TIMEOUT_S) -> list[int]:
    deadline = time.monotonic() + timeout
    for node, agent in enumerate(agents):
        try:
            agent.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            states = ", ".join(f"node {n}: {'running' if a.poll() is None else f'exit {a.returncode}'}"
                               for n, a in enumerate(agents))  # fmt: skip
            tails = "".join(f"\n--- node {n}'s log:\n{log.read_text()[-3000:]}" for n, log in enumerate(logs))
            raise AssertionError(f"node {node} still running after {timeout:g} s ({states}){tails}") from None
    return [agent.returncode for agent in agents]


def start_nodes(hosts: TwoHosts, built_repo: Path, cwds: list[Path], rdzv_id: str, max_restarts: int = 0,
                env: dict | None = None) -> tuple[list[subprocess.Popen], list[Path]]:  # fmt: skip
    logs = [cwds[0].parent / f"{rdzv_id}-node{n}.log" for n in (0, 1)]
    commands = [node_command(built_repo, cwd, rdzv_id, max_restarts) for cwd in cwds]
    agents = [hosts.start(n, commands[n], cwds[n], env or pipeline_env(), logs[n]) for n in (0, 1)]
    return agents, logs


@pytest.fixture(scope="module")
def two_hosts_possible() -> None:
    """Skip, saying why, where two hosts cannot be simulated."""
    if reason := unavailable():
        pytest.skip(f"two simulated hosts: {reason}")


@pytest.fixture(scope="module")
def one_node(two_hosts_possible, built_repo: Path, tmp_path_factory) -> dict:
    """An uninterrupted one-node, two-process run (torchrun --standalone, as the stage starts itself)."""
    cwd = workdir(built_repo, tmp_path_factory.mktemp("one-node"), TWO_RANKS)
    started = time.monotonic()
    done = run_train(built_repo, cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"one node, two processes: {time.monotonic() - started:.1f} s")
    return outcome(cwd)


@pytest.fixture
def hosts(two_hosts_possible):
    """Two simulated hosts, deleted afterwards whatever happens (and checked to be gone)."""
    tag = f"{os.getpid() % 10000:04d}{next(COUNTER)}"
    with TwoHosts(tag) as made:
        yield made
    assert not [name for name in leftover_namespaces() if name in made.namespaces]


def test_two_nodes_train_the_bytes_of_one_node_with_two_processes(hosts, built_repo, tmp_path, one_node) -> None:
    cwd = workdir(built_repo, tmp_path / "run", TWO_RANKS)
    started = time.monotonic()
    agents, logs = start_nodes(hosts, built_repo, [cwd, cwd], "same-bytes")
    assert finish(agents, logs) == [0, 0], logs[0].read_text()[-3000:] + logs[1].read_text()[-3000:]
    print(f"two nodes, one process each: {time.monotonic() - started:.1f} s")
    assert outcome(cwd) == one_node
    starts = json.loads((cwd / "reports/train_run.json").read_text())["starts"]
    assert starts == [{"from_step": 0, "torchrun_restarts": [0, 0]}]


def test_a_lost_worker_is_restarted_by_torchrun_and_the_run_ends_bit_identical(
    built_repo, tmp_path, one_node, hosts
) -> None:
    cwd = workdir(built_repo, tmp_path / "run", TWO_RANKS)
    release = tmp_path / "release"
    env = pipeline_env() | pause_environment(13, release)  # every rank waits after step 13 (checkpoint: 10)
    agents, logs = start_nodes(hosts, built_repo, [cwd, cwd], "lost-worker", max_restarts=1, env=env)
    wait_until(lambda: Path(f"{release}.paused").exists(), "step 13", process=agents[0], timeout=RUN_TIMEOUT_S)
    worker = worker_pid(agents[1])
    os.kill(worker, signal.SIGKILL)  # node 1's training process, not its agent
    killed = time.monotonic()
    release.touch()  # the restarted ranks pass step 13 without waiting
    assert finish(agents, logs) == [0, 0], logs[0].read_text()[-3000:] + logs[1].read_text()[-3000:]
    print(f"restarted and finished {time.monotonic() - killed:.1f} s after node 1's worker was killed")
    assert outcome(cwd) == one_node
    assert "train: resuming from" in logs[0].read_text()
    first, again = json.loads((cwd / "reports/train_run.json").read_text())["starts"]
    assert first == {"from_step": 0, "torchrun_restarts": [0, 0]}
    # node 1's agent counted its worker's failure; node 0's counts one too when its worker failed first (on the
    # collective with the dead rank) rather than being restarted for node 1's new rendezvous round
    assert again["from_step"] == 10 and again["torchrun_restarts"][1] == 1, again


def test_a_lost_node_ends_the_survivor_in_bounded_time_and_one_node_resumes(
    built_repo, tmp_path, one_node, hosts
) -> None:
    cwd = workdir(built_repo, tmp_path / "run", TWO_RANKS)
    release = tmp_path / "release"
    env = pipeline_env() | pause_environment(13, release)
    agents, logs = start_nodes(hosts, built_repo, [cwd, cwd], "lost-node", max_restarts=1, env=env)
    wait_until(lambda: Path(f"{release}.paused").exists(), "step 13", process=agents[0], timeout=RUN_TIMEOUT_S)
    hosts.kill_node(1)  # the host is gone, agent and worker, and does not come back
    killed = time.monotonic()
    release.touch()
    code = finish(agents[:1], logs[:1], timeout=JOIN_TIMEOUT_S + 90)[0]
    ended_after = time.monotonic() - killed
    output = logs[0].read_text()
    print(f"node 0 ended {ended_after:.1f} s after node 1 was lost (exit {code}); its last lines:")
    print("\n".join(output.splitlines()[-5:]))
    assert code != 0
    assert ended_after < JOIN_TIMEOUT_S + 90
    assert output.splitlines()[-1].startswith("error: the nodes did not meet again: RendezvousTimeoutError")

    resumed = run_train(built_repo, cwd)  # one node, two local processes: the same world size
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr
    assert outcome(cwd) == one_node


def test_a_node_that_does_not_share_the_checkpoints_is_refused(hosts, built_repo, tmp_path) -> None:
    cwd = workdir(built_repo, tmp_path / "node0", TWO_RANKS)
    train_args(built_repo, cwd)  # its data/ links
    elsewhere = tmp_path / "node1"
    shutil.copytree(cwd, elsewhere, symlinks=True)  # node 1 sees another directory: not a shared volume
    agents, logs = start_nodes(hosts, built_repo, [cwd, elsewhere], "not-shared")
    codes = finish(agents, logs, timeout=120)
    assert codes[0] != 0 and codes[1] != 0
    for log, who in zip(logs, ("rank 1", "rank 1 (this one)"), strict=True):
        line = f"error: {who} cannot see what rank 0 writes in the checkpoints directory"
        assert line in log.read_text(), log.read_text()[-3000:]
    assert not (cwd / "models").exists() and not (elsewhere / "models").exists()


def test_the_chart_runs_the_command_the_nodes_ran() -> None:
    """The training chart's rendered command: the builder's torchrun flags, then dvc.yaml's train command."""
    helm = shutil.which("helm") or shutil.which("helm", path=str(Path(sys.executable).parent))
    if helm is None:
        pytest.skip("helm is neither on PATH nor in .venv/bin (`make helm`)")
    import yaml

    from solomon.pipeline import stages

    values = ["nodes=2", "processesPerNode=1", f"rendezvousPort={PORT}", "restarts=1", f"joinTimeout={JOIN_TIMEOUT_S}"]
    sets = [arg for value in ["image.tag=test", *values] for arg in ("--set", value)]
    rendered = subprocess.run([helm, "template", "run-1", str(ROOT / "k8s/train"), *sets], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    job = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    stage = shlex.split(stages(ROOT)["train"]["cmd"])
    assert command == ["python", *torchrun_command(2, 1, f"run-1-0.run-1:{PORT}", "run-1", 1, JOIN_TIMEOUT_S),
                       *stage[1:]]  # fmt: skip
