"""Background priority for the threads that run a save off the training loop.

Linux keeps a nice value per thread, and a thread starts with its creator's, so lowering the
thread that runs an async save (torch's upload thread, or the main thread of torch's checkpoint
process) before it starts the serializer and the C++ uploader puts all of them behind the
training threads: on a busy node the save takes longer to become durable instead of taking CPU
from training. An unprivileged thread can lower its priority but never raise it back, so the
training loop's own thread (a synchronous save) is left alone.
"""

from __future__ import annotations

import os
import threading


def lower_thread_priority(nice: int, *, main_thread_too: bool = False) -> bool:
    """Sets the calling thread's nice value to `nice` (1-19) unless it is already at least that
    nice, or it is the process's main thread and not `main_thread_too` (set it only in a
    process that does nothing but save); returns True if it changed it. A refusal by the OS
    (no permission, no such call) leaves it unchanged and returns False."""
    if threading.current_thread() is threading.main_thread() and not main_thread_too:
        return False
    tid = threading.get_native_id()
    try:
        if os.getpriority(os.PRIO_PROCESS, tid) >= nice:
            return False
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (OSError, AttributeError):
        return False
    return True
