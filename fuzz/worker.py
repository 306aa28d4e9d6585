"""The fuzzing process of one target: ``python -m fuzz.worker TARGET [libFuzzer arguments]``.

:mod:`fuzz.runner` starts it with the corpus folders and the target's bounds; given files
instead of folders, libFuzzer runs the target once on each (how a regression is replayed).
The target's module is imported, and its ``setup()`` run, while atheris instruments imports, so
the Python code of the packages the target names guides the fuzzer. Then the address space is
capped at where it stands plus the target's ``memory_mb``: one input allocating more fails
there (MemoryError, or the native library's own error), and that is a finding.
"""

from __future__ import annotations

import importlib
import re
import resource
import sys
import warnings
from pathlib import Path

import atheris

from fuzz.targets import TARGETS


def address_space_mb() -> int | None:
    """This process's virtual memory size (Linux), or None where /proc does not say."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmSize:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) // 1024 if found else None


def cap_memory(memory_mb: int) -> None:
    """Let the address space grow by ``memory_mb`` MiB from here, and no further."""
    now = address_space_mb()
    if now is None:
        print("fuzz: /proc/self/status has no VmSize; the per-input memory bound is not applied")
        return
    limit = (now + memory_mb) * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    print(f"fuzz: address space {now} MiB after setup; capped at {now + memory_mb} MiB")


def inherited_rss_mb() -> int:
    """The peak RSS this process reports before it has done anything: Linux carries the peak of
    the process that started it (a test run grown to a gigabyte, say) across fork and exec into
    ``ru_maxrss``, which is what libFuzzer's ``-rss_limit_mb`` compares."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def rss_limit_beyond(args: list[str], inherited_mb: int) -> list[str]:
    """``-rss_limit_mb=N`` made N beyond what was inherited, so that it bounds this process's
    own growth, not its parent's size."""
    prefix = "-rss_limit_mb="
    return [
        f"{prefix}{int(a[len(prefix) :]) + inherited_mb}" if a.startswith(prefix) else a
        for a in args
    ]


def main(argv: list[str]) -> None:
    inherited = inherited_rss_mb()  # first: before this process has grown itself
    target = TARGETS[argv[1]]
    with atheris.instrument_imports(include=list(target.instrument)):
        module = importlib.import_module(target.module)
        one_input = module.setup()
    if target.warnings_as_errors:
        warnings.simplefilter("error")
    cap_memory(target.memory_mb)
    atheris.Setup([argv[0], *rss_limit_beyond(argv[2:], inherited)], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
