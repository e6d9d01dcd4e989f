"""The hand-over from the engine's thread to the event loop (``solomon.serving.running``): many calls to a
wake-up, in order, and a stream's queued pieces joined without changing its text."""

from __future__ import annotations

import asyncio
import threading

from solomon.serving.running import Handoff, joined


class CountedHandoff(Handoff):
    """A Handoff that counts its runs on the loop (the wake-ups)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.runs = 0

    def _run(self) -> None:
        self.runs += 1
        super()._run()


def test_calls_posted_while_the_loop_is_busy_run_in_order_on_one_wake_up() -> None:
    async def main() -> tuple[list[int], list[str], int]:
        handoff = CountedHandoff(asyncio.get_running_loop())
        heard, threads = [], []

        def engine() -> None:
            for i in range(100):
                handoff.post(lambda i=i: (heard.append(i), threads.append(threading.current_thread().name)))

        poster = threading.Thread(target=engine, name="engine")
        poster.start()
        poster.join()  # the loop is blocked here: every call is posted before it runs any
        for _ in range(3):
            await asyncio.sleep(0)
        handoff.post(lambda: heard.append(100))  # after a run, the next post wakes the loop again
        for _ in range(3):
            await asyncio.sleep(0)
        return heard, threads, handoff.runs

    heard, threads, runs = asyncio.run(main())
    assert heard == list(range(101))
    assert set(threads) == {"MainThread"}  # every call ran on the loop's thread, none on the poster's
    assert runs == 2


def test_a_call_that_raises_goes_to_the_loops_handler_and_loses_no_other_call() -> None:
    async def main() -> tuple[list[str], list[BaseException]]:
        loop = asyncio.get_running_loop()
        failures: list[BaseException] = []
        loop.set_exception_handler(lambda loop, context: failures.append(context["exception"]))
        handoff, heard = Handoff(loop), []

        def broken() -> None:
            raise RuntimeError("a listener failed")

        poster = threading.Thread(target=lambda: [handoff.post(c) for c in (broken, lambda: heard.append("after"))])
        poster.start()
        poster.join()  # both posted before the loop runs either: one wake-up carries them
        for _ in range(3):
            await asyncio.sleep(0)
        return heard, failures

    heard, failures = asyncio.run(main())
    assert heard == ["after"]
    assert [str(failure) for failure in failures] == ["a listener failed"]


def test_a_closed_loop_drops_the_calls_without_raising() -> None:
    loop = asyncio.new_event_loop()
    handoff = Handoff(loop)
    loop.close()
    handoff.post(lambda: None)  # the engine's thread posting after the server stopped: nobody is listening


def test_joined_pieces_keep_each_choices_text_and_entries_in_order() -> None:
    def entries(*tokens: str) -> dict:
        return {"tokens": list(tokens), "token_logprobs": [-1.0] * len(tokens), "top_logprobs": [None] * len(tokens),
                "text_offset": list(range(len(tokens)))}  # fmt: skip

    events = [
        (0, "In", entries("In"), None),
        (0, " the", entries(" the"), None),
        (1, "And", entries("And"), None),
        (1, " God", entries(" God"), None),
        (1, "", entries(), "length"),
        (0, " begin", entries(" begin"), None),
        (0, "ning", entries("ning"), "stop"),
    ]
    pieces = joined(events)
    assert [(index, text, reason) for index, text, _, reason in pieces] == [
        (0, "In the", None),
        (1, "And God", "length"),
        (0, " beginning", "stop"),
    ]
    assert pieces[0][2]["tokens"] == ["In", " the"] and pieces[2][2]["text_offset"] == [0, 0]
    for index in (0, 1):  # the texts add up as the pieces did
        assert "".join(p[1] for p in pieces if p[0] == index) == "".join(e[1] for e in events if e[0] == index)


def test_joined_keeps_a_failure_apart_and_never_joins_past_a_choices_end() -> None:
    events = [(0, "a", None, None), (0, "b", None, "timeout"), (1, "c", None, "stop"), (1, "d", None, None)]
    assert joined(events) == [(0, "a", None, None), (0, "b", None, "timeout"), (1, "c", None, "stop"),
                              (1, "d", None, None)]  # fmt: skip
    assert joined([(0, "a", None, None), (0, "b", None, None)]) == [(0, "ab", None, None)]
