"""How the tests start processes that a user stops with Ctrl-C."""

from __future__ import annotations

import signal


def ctrl_c_as_from_a_terminal() -> None:
    """A child's SIGINT as a terminal session leaves it: delivered. A shell that runs the tests
    in the background (`cmd &`, as CI may) ignores SIGINT, a child inherits that, and Python
    leaves an ignored SIGINT ignored: it would never raise KeyboardInterrupt. For preexec_fn."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
