"""A process holding a lifeline stops once a process that launched it is gone (solomon/lifeline.py): real processes,
real signals; which launchers it watches (its shell and the rest of its process group; a group leader's parent unless
`nohup`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil

PROBE = "import json; from solomon.lifeline import launchers; print(json.dumps([p.pid for p in launchers()]))"
HOLD = "import time; from solomon import lifeline; lifeline.hold(0.05); print('holding', flush=True); time.sleep(60)"


def test_the_launchers_are_the_process_group_above_this_process() -> None:
    shell = subprocess.run(
        ["sh", "-c", f'{sys.executable} -c "{PROBE}"; echo "shell $$"'],
        capture_output=True, text=True, start_new_session=True, check=True,
    )  # fmt: skip
    watched, shell_line = shell.stdout.splitlines()
    assert json.loads(watched) == [int(shell_line.split()[1])]  # the shell, not this test (another group)


def test_a_group_leader_watches_its_parent_unless_sighup_is_ignored() -> None:
    def probe(ignore_sighup: bool) -> list[int]:
        prefix = "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN); " if ignore_sighup else ""
        done = subprocess.run([sys.executable, "-c", prefix + PROBE], capture_output=True, text=True,
                              start_new_session=True, check=True)  # fmt: skip
        return json.loads(done.stdout)

    assert probe(ignore_sighup=False) == [psutil.Process().pid]
    assert probe(ignore_sighup=True) == []  # nohup: it is meant to outlive the shell that started it


def test_a_process_stops_with_sigterm_once_its_launcher_is_killed() -> None:
    shell = subprocess.Popen(
        ["sh", "-c", f'{sys.executable} -c "{HOLD}"; true'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert shell.stdout.readline() == "holding\n"
    (held,) = psutil.Process(shell.pid).children()
    started = time.monotonic()
    shell.kill()  # the launcher alone: the held process is not signalled by anyone else
    shell.wait()
    _, alive = psutil.wait_procs([held], timeout=10)
    assert not alive, "the held process outlived its launcher"
    assert time.monotonic() - started < 5
    _, err = shell.communicate(timeout=10)
    assert err.startswith(f"error: stopping: sh -c (pid {shell.pid}), which started this process, is gone"), err


def test_without_a_lifeline_the_process_is_orphaned() -> None:
    """The control: what happens to a stage today without one (what `dvc repro` left running)."""
    shell = subprocess.Popen(
        ["sh", "-c", f'{sys.executable} -c "import time; print(\'up\', flush=True); time.sleep(60)"; true'],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert shell.stdout.readline() == "up\n"
    (child,) = psutil.Process(shell.pid).children()
    shell.kill()
    shell.wait()
    _, alive = psutil.wait_procs([child], timeout=2)
    assert alive == [child]
    child.send_signal(signal.SIGKILL)
