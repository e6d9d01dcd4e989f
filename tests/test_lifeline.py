"""A process holding a lifeline stops once a process that launched it is gone (solomon/lifeline.py): real processes,
real signals; which launchers it watches (its shell and the rest of its process group; a group leader's parent unless
`nohup`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

PROBE = "import json; from solomon.lifeline import launchers; print(json.dumps([p.pid for p in launchers()]))"
PROBE_ORPHANED = "from solomon.lifeline import orphaned; print(orphaned())"
HOLD = "import time; from solomon import lifeline; lifeline.hold(0.05); print('holding', flush=True); time.sleep(60)"


def under_a_shell(script: str, ready: str) -> tuple[subprocess.Popen, psutil.Process]:
    """``script`` run by a shell that is not replaced by it (``; true``), once it has printed ``ready``."""
    shell = subprocess.Popen(
        ["sh", "-c", f'{sys.executable} -c "{script}"; true'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert shell.stdout.readline() == f"{ready}\n"
    (child,) = psutil.Process(shell.pid).children()
    return shell, child


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
    shell, held = under_a_shell(HOLD, "holding")
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


STARTING = (
    "import sys, time; time.sleep({wait}); import os; from solomon.lifeline import tether; tether(os.environ); "
    "print('started', flush=True); time.sleep({after})"
)


def test_tether_stops_an_orphan_and_lets_a_held_process_start(tmp_path) -> None:
    def start(script: str, cut: bool) -> str:
        out = tmp_path / "out.txt"
        background = f'{sys.executable} -c "{script}" > {out} 2>&1 &'
        command = f"{background} echo $!" if cut else f"{background} echo $!; wait"
        shell = subprocess.run(["sh", "-c", command], capture_output=True, text=True, start_new_session=True,
                               check=True)  # fmt: skip
        child = int(shell.stdout.split()[0])
        if psutil.pid_exists(child):
            psutil.wait_procs([psutil.Process(child)], timeout=15)
        return out.read_text()

    told = start(STARTING.format(wait=0.5, after=0), cut=True)  # the shell is gone before tether runs
    assert told.startswith("error: stopping before it starts: its launcher is gone (this process was re-parented"), told
    assert told.rstrip().endswith("nothing was written") and told.count("\n") == 1 and "started" not in told
    told = start(STARTING.format(wait=0.5, after=0), cut=False)  # the shell waits for it: it runs
    assert told == "started\n"


def test_a_parent_that_dies_during_start_up_stops_the_process_at_once() -> None:
    """Between ``tether`` and the lifeline (the heavy imports): the kernel's parent-death signal, on Linux."""
    shell, child = under_a_shell(STARTING.format(wait=0, after=30), "started")
    started = time.monotonic()
    shell.kill()
    shell.wait()
    _, alive = psutil.wait_procs([child], timeout=10)
    assert not alive and time.monotonic() - started < 2
    _, err = shell.communicate(timeout=10)
    assert err.startswith("error: stopping before it starts: its launcher is gone"), err
    assert child.pid  # stopped by the parent-death signal's handler, 143 (the shell is gone: no status to read)


def test_a_later_command_of_a_pipeline_is_not_an_orphan() -> None:
    """`a | stage` under a shell with job control: the stage's group leader is its sibling `a`, and its parent the
    shell that leads the session; its chain of parents leaves the group there, and that is no cut."""
    script = (
        "import subprocess, sys; "
        "a = subprocess.Popen(['sleep', '5'], process_group=0); "
        f"b = subprocess.run([sys.executable, '-c', {PROBE_ORPHANED!r}], process_group=a.pid, capture_output=True, "
        "text=True); a.kill(); print(b.stdout.strip() or b.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, start_new_session=True,
                          check=True)  # fmt: skip
    assert done.stdout.strip() == "None", done.stdout + done.stderr


def test_a_session_leader_checks_the_launcher_recorded_for_it() -> None:
    """torchrun's workers lead sessions of their own: their launcher's PID comes in ``SOLOMON_LAUNCHER_PID``."""
    from solomon.lifeline import LAUNCHER_ENV

    def start(recorded: int) -> subprocess.CompletedProcess:
        env = dict(os.environ, **{LAUNCHER_ENV: str(recorded)})
        return subprocess.run([sys.executable, "-c", STARTING.format(wait=0, after=0)], capture_output=True,
                              text=True, start_new_session=True, env=env)  # fmt: skip

    assert start(os.getpid()).stdout == "started\n"
    gone = start(2**22 + 1)  # no such PID: the recorded launcher is gone
    assert gone.returncode == 143 and gone.stdout == ""
    assert (
        gone.stderr
        == f"error: stopping before it starts: its launcher (pid {2**22 + 1}) is gone: nothing was written\n"
    )


def test_a_make_that_got_sighup_counts_as_stopping(tmp_path) -> None:
    """GNU make sent SIGHUP by PID waits for its recipe (it takes the terminal to have signalled it too): the
    handler it puts back to the default is the sign."""
    from solomon.lifeline import stopping

    (tmp_path / "Makefile").write_text("all:\n\tsleep 30\n")
    make = subprocess.Popen(["make", "-s", "-C", str(tmp_path)], start_new_session=True)
    try:
        process = psutil.Process(make.pid)
        time.sleep(0.5)  # make has installed its handlers and started its recipe
        assert stopping(process) is None
        make.send_signal(signal.SIGHUP)
        time.sleep(0.2)
        assert make.poll() is None  # still there, waiting for `sleep`
        assert stopping(process) == "SIGHUP"
    finally:
        os.killpg(make.pid, signal.SIGKILL)
        make.wait()


def test_a_job_left_running_by_a_script_that_ended_is_not_an_orphan(tmp_path) -> None:
    """`sh -c 'launcher &'` that exits at once (a script starting `make run &`): the process's own launcher lives,
    so the cut above it (the script's shell gone, the launcher re-parented) does not stop it."""
    from conftest import wait_until

    out = tmp_path / "out.txt"
    launcher = tmp_path / "launcher.py"  # waits for the shell to be gone, then runs the probe as its child
    launcher.write_text(
        "import subprocess, sys, time\n"
        "time.sleep(0.5)\n"
        f"subprocess.run([sys.executable, '-c', {PROBE_ORPHANED!r}], stdout=open({str(out)!r}, 'w'))\n"
    )
    subprocess.run(["sh", "-c", f"{sys.executable} {launcher} &"], start_new_session=True, check=True)
    wait_until(lambda: out.exists() and out.read_text(), "the probe's answer", timeout=30)
    assert out.read_text().strip() == "None"
