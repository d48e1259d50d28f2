"""Progress of long CLI work: a rich progress bar on a terminal, a few plain lines in a log.

rich redraws its bar in place, which a terminal shows and a log file or CI console does not
(off a terminal rich prints the finished bar once, at the end): there a line at every tenth of
the work shows that a long run is moving, without thousands of lines.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["progress", "status"]

_LOG_STEPS = 10
# Updates handed to rich per run at most: each costs a lock and some arithmetic (a few µs),
# which a loop of short calls would otherwise pay on every iteration.
_UPDATES = 500


@contextlib.contextmanager
def progress(total: int, description: str, console: Console, *, unit: str = "calls",
             in_bytes: bool = False, log: bool = True) -> Iterator[Callable[[int], None]]:
    """Show progress towards ``total`` on ``console``; yields ``update(done)``.

    On a terminal: a bar with the count (or bytes, ``in_bytes``), elapsed and remaining time.
    Elsewhere: ``description: done/total unit (N%)`` at every 10 % when ``log``, else nothing.
    The bar is completed when the block ends normally.
    """
    total = max(total, 1)
    if console.is_terminal:
        count = DownloadColumn() if in_bytes else MofNCompleteColumn()
        bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                       count, TextColumn(unit if not in_bytes else ""), TimeElapsedColumn(),
                       TextColumn("eta"), TimeRemainingColumn(), console=console)
        task = bar.add_task(description, total=total)
        step = max(total // _UPDATES, 1)
        last = [0]

        def show(done: int) -> None:
            if done - last[0] >= step or done >= total:
                last[0] = done
                bar.update(task, completed=done)

        with bar:
            yield show
            bar.update(task, completed=total)
        return

    next_percent = [_LOG_STEPS]

    def log_line(done: int) -> None:
        percent = done * 100 // total
        if log and percent >= next_percent[0]:
            next_percent[0] = (percent // _LOG_STEPS + 1) * _LOG_STEPS
            amount = (f"{done / 2**20:,.1f}/{total / 2**20:,.1f} MiB" if in_bytes
                      else f"{done:,}/{total:,} {unit}")
            console.print(f"{description}: {amount} ({percent}%)", markup=False)

    yield log_line


@contextlib.contextmanager
def status(console: Console, text: str, *, log: bool = True) -> Iterator[None]:
    """A spinner with ``text`` while the block runs, on a terminal; elsewhere ``text`` once
    when ``log`` (a spinner's redraws would be lost, and its refresh thread run for nothing)."""
    if console.is_terminal:
        with console.status(text):
            yield
    else:
        if log:
            console.print(text, markup=False)
        yield
