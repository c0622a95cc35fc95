"""Workers that do not outlive ``baf serve``: the kernel tells each one when its parent dies.

``baf serve`` passes Ctrl-C and SIGTERM on to its workers, but a ``baf serve`` that dies without a signal
it can handle (``kill -9``, the OOM killer, a supervisor that kills only the process it started) would
leave its workers running: still holding their sessions, and, sharing the port with ``SO_REUSEPORT``,
taking their part of the clients of the next ``baf serve`` on it, with the old agent code and no error.
On Linux, ``prctl(PR_SET_PDEATHSIG)`` has the kernel send a worker SIGTERM when ``baf serve`` dies, which
stops it as ``baf serve``'s own SIGTERM does: its steps finish, its leases are given up.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Final

__all__ = ["stop_when_parent_dies"]

#: ``PR_SET_PDEATHSIG`` (``<linux/prctl.h>``): the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG: Final = 1


def stop_when_parent_dies() -> Callable[[], None] | None:
    """A ``preexec_fn`` for a worker's ``subprocess.Popen``: the worker gets SIGTERM when this process
    dies; ``None`` where the kernel offers no such thing (not Linux).

    It runs in the child between fork and exec, and the setting lasts through the exec. A parent that died
    before it ran is not told of: the child then sends itself SIGTERM. ``baf serve`` starts its workers with
    SIGTERM blocked, so that signal waits until the worker's ``main`` unblocks it, and ends it quietly. Call
    it (and start the worker) on the main thread: the kernel sends the signal when the thread that forked
    the child ends."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: nothing is loaded after the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    sigterm = int(signal.SIGTERM)

    def tie_to_parent() -> None:
        prctl(_PR_SET_PDEATHSIG, sigterm, 0, 0, 0)
        if os.getppid() != parent:  # it died before the line above: no signal will come
            os.kill(os.getpid(), sigterm)

    return tie_to_parent
