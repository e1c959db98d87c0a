"""How a program runs: logging set up once (readable on a terminal, JSON with a flag, never a
secret), signals turned into cancellation, and what a node wrote made safe to show on a terminal.
It needs no connection, so a program that never touches the bus (the postgres provisioner) stands
on it alone.
"""

from __future__ import annotations

from registry.runtime.logs import LogFormat, LogLevel, configure_logging, event
from registry.runtime.signals import until_signalled
from registry.runtime.terminal import terminal_safe

__all__ = ["LogFormat", "LogLevel", "configure_logging", "event", "terminal_safe", "until_signalled"]
