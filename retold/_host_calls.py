"""Calling host code on the turn path: policies and inventory functions, sync or async.

A sync callable runs on a reusable daemon thread (:class:`DaemonWorkers`), so the event
loop never waits for a thread to start and a call that never returns cannot keep the host
process from exiting; cancelling the caller abandons it. An async callable can be stepped
(:class:`Stepped`) to time its longest uninterrupted step, which is how long it blocked
the event loop. :func:`cancelled_by_caller` tells a real cancellation of the turn from a
cancellation a policy raised itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import math
import queue
import threading
import time
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

__all__ = [
    "STALL_WARN_MS",
    "DaemonWorkers",
    "Probe",
    "cancelled_by_caller",
    "in_daemon_thread",
    "invoke",
]


def is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )


class DaemonWorkers:
    """Reusable daemon threads for blocking host callables (sync policies, inventory functions).

    A call is handed over through a queue, so the event loop never waits for a thread to
    start: ``Thread.start()`` blocks its caller until the new thread has run, which takes
    milliseconds (tens of them when other threads hold the GIL) and would stall every turn
    of the process. When no worker is idle, a helper thread starts one. A call that never
    returns keeps its worker; the others are reused, and a worker idle for ``idle_s`` exits.
    """

    def __init__(self, idle_s: float = 30.0) -> None:
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wanted: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._idle = 0  # workers waiting for a job that no queued job is promised to
        self._spawner: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a worker; returns at once. ``job`` must not raise."""
        first = None
        with self._lock:
            self._jobs.put(job)
            if self._idle:
                self._idle -= 1
                return
            self._wanted.put(None)
            if self._spawner is None:
                first = self._spawner = threading.Thread(
                    target=self._spawn, name="retold-policy-spawner", daemon=True
                )
        if first is not None:
            first.start()  # once per process: the only thread start a caller waits for

    def _spawn(self) -> None:
        while True:
            self._wanted.get()
            threading.Thread(target=self._work, name="retold-policy-call", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle:  # an unpromised waiting worker may leave: this one
                        self._idle -= 1
                        return
                continue  # a job was promised to a waiting worker: stay for it
            job()
            with self._lock:
                self._idle += 1


#: The process's daemon workers for blocking host calls on the turn path.
_WORKERS = DaemonWorkers()


async def in_daemon_thread(fn: Callable[[], Any]) -> Any:
    """Run blocking ``fn`` on a daemon worker thread; cancelling the caller abandons it.

    Not anyio's worker pool: its threads are not daemons on asyncio, so a policy call
    that never returns would keep the host process from exiting (§5 wants daemon threads).
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    box: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box.append((True, context.run(fn)))
        except BaseException as exc:
            box.append((False, exc))
        # The turn may have moved on (or its event loop ended) long ago.
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(done.set, token=token)

    _WORKERS.submit(target)
    await done.wait()
    ok, value = box[0]
    if not ok:
        raise value
    return value


#: A single uninterrupted step of an async policy longer than this blocked the event loop
#: (every other turn of the process waited); it is logged as ``policy_blocked_event_loop``.
#: A call that comes back this long after its deadline ignored cancellation
#: (``policy_ignored_cancellation``).
STALL_WARN_MS = 50.0


class Probe:
    """The longest uninterrupted step (seconds) of one async call."""

    __slots__ = ("longest",)

    def __init__(self) -> None:
        self.longest = 0.0


class Stepped:
    """Await a coroutine step by step, timing each step on the event loop.

    A step runs from a resumption of the coroutine to its next suspension; nothing else on
    the event loop runs meanwhile, so the longest step is how long the coroutine blocked
    the loop. Works on any backend: suspensions are passed through unchanged.
    """

    __slots__ = ("_coro", "_probe")

    def __init__(self, coro: Any, probe: Probe) -> None:
        self._coro = coro
        self._probe = probe

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, probe = self._coro, self._probe
        send: Any = None
        throw: BaseException | None = None
        while True:
            t0 = time.perf_counter()
            try:
                yielded = coro.send(send) if throw is None else coro.throw(throw)
            except StopIteration as stop:
                probe.longest = max(probe.longest, time.perf_counter() - t0)
                return stop.value
            except BaseException:
                probe.longest = max(probe.longest, time.perf_counter() - t0)
                raise
            probe.longest = max(probe.longest, time.perf_counter() - t0)
            try:
                send, throw = (yield yielded), None
            except BaseException as exc:  # cancellation and friends go to the coroutine
                send, throw = None, exc


async def invoke(
    fn: Callable[..., Any], *args: Any, probe: Probe | None = None, **kwargs: Any
) -> Any:
    """Call a sync or async callable; sync ones run on daemon threads abandoned on cancel.

    With ``probe``, an async call is stepped (:class:`Stepped`) to time its longest step.
    """
    if is_async(fn):
        result = fn(*args, **kwargs)
        if probe is not None and inspect.iscoroutine(result):
            return await Stepped(result, probe)
        return await result
    result = await in_daemon_thread(partial(fn, *args, **kwargs))
    if probe is not None and inspect.iscoroutine(result):
        return await Stepped(result, probe)
    if inspect.isawaitable(result):
        result = await result
    return result


def cancelled_by_caller(exc: BaseException) -> bool:
    """True when ``exc`` is a real cancellation of this task, not one a policy raised itself."""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    if anyio.current_effective_deadline() == -math.inf:
        return True  # an enclosing anyio scope was cancelled
    with contextlib.suppress(RuntimeError):  # not running under asyncio
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return True  # asyncio's own task.cancel(), e.g. asyncio.timeout around the turn
    return False
