"""A thread pool for sync bodies whose threads never keep the process alive."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from baf.errors import RuntimeStoppedError

__all__ = ["DaemonThreadPool"]

_T = TypeVar("_T")

# One queued call: its future, the function and its arguments. ``None`` tells a thread to exit.
_Job = tuple["Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """Runs calls in up to ``max_workers`` daemon threads, started as they are needed and then reused.

    Not a ``ThreadPoolExecutor``: the interpreter joins its threads at exit, whatever ``shutdown`` was
    told, so a body still sleeping when the agent stops would keep the process alive until it returns.
    The runtime gives up on such a body (Python cannot kill a thread); a daemon thread dies with the
    process instead.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "baf-worker") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one release per thread waiting for a job
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        """Queue ``fn(*args, **kwargs)``; a thread is started if none is idle and the cap allows one.

        Raises:
            RuntimeStoppedError: the pool was shut down (the runtime stopped).
        """
        with self._lock:
            if self._shutdown:
                raise RuntimeStoppedError("the runtime has stopped: its thread pool takes no new calls")
            future: Future[_T] = Future()
            self._jobs.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                thread = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
            return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args, kwargs = job
            del job  # hold no reference to a finished call's arguments while idle
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to whoever awaits the future, as ThreadPoolExecutor does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; with ``cancel_futures`` drop the queued ones; with ``wait`` join the threads
        (only after the calls they run return: nothing can stop a running call)."""
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in threads:
            self._jobs.put(None)
        if wait:
            for thread in threads:
                thread.join()
