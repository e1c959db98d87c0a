"""`python -m bench.peak OUT MODULE ARGS...`: runs `python -m MODULE ARGS...` in this process and, at
exit, writes its own peak RSS in MB (VmHWM) to OUT.

A child's `ru_maxrss` counts the pages of the parent it was forked from before exec, so a large
benchmark process would inflate it; VmHWM is the process's own, from exec on."""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path

from bench.harness import peak_rss_mb


def main() -> None:
    out, module, *args = sys.argv[1:]
    atexit.register(lambda: Path(out).write_text(f"{peak_rss_mb('self')}\n"))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
