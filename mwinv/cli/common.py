"""Shared plumbing of the click layers: one-line errors and clean exits on signals."""

import contextlib
import os
import re
import signal
import sys
import threading
import time
from typing import Callable, Iterator

import click
from rich.console import Console

from mwinv import privfile
from mwinv.errors import MwinvError, is_disk_full


def group_option(command: Callable) -> Callable:
    """--group: what the command writes (captures, reports) readable by that group, not only by its owner."""
    return click.option("--group", metavar="GROUP", envvar=privfile.GROUP_ENV, expose_value=False,
                        callback=lambda ctx, param, value: privfile.set_group(value),
                        help="share the files written with GROUP (directories 0750, files 0640; default: "
                             "0700/0600, private to their owner; also $MWINV_GROUP).")(command)


def progress_console() -> Console:
    """stderr, for progress and summary lines: never wrapped (a log or a script reads them whole), and
    without rich's source file and line on each logged line ("correlate.py:51" tells a user nothing)."""
    return Console(stderr=True, soft_wrap=True, log_path=False)


def output_console() -> Console:
    """stdout, for a command's tables and results, its logged steps without rich's source file and line."""
    return Console(log_path=False)


def progress_logger(console: Console) -> Callable[[str], None]:
    """progress(step) as time-stamped lines, printed as they are: a step's text is not rich markup (a
    cell id "[ab3f…]" in it was taken for a style and dropped) nor highlighted."""
    return lambda step: console.log(step, markup=False, highlight=False)


def _raise_interrupt(signum, frame):
    # SIGTERM unwinds like Ctrl-C so every `finally` (servers, tracing state) runs.
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _unraisable(args) -> None:
    # an interrupt raised inside a finalizer (a SIGTERM landing in subprocess.Popen.__del__ once in CI)
    # is printed and dropped by Python, and the run went on to exit 0: the signal is sent again, from a
    # thread, so that it lands once this hook has returned (sent here, it was raised in the hook, and dropped)
    exc = args.exc_value
    if isinstance(exc, KeyboardInterrupt):
        sig = signal.SIGTERM if exc.args == ("SIGTERM",) else signal.SIGINT
        threading.Timer(0.05, os.kill, (os.getpid(), sig)).start()
        return
    sys.__unraisablehook__(args)


def install_signal_handlers() -> None:
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_interrupt)
    sys.unraisablehook = _unraisable


def _ignore_signals() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)


def _interrupted(prog: str) -> None:
    # cleaned up by now: a further Ctrl-C or SIGTERM would only turn the exit into a traceback
    _ignore_signals()
    click.echo(f"{prog}: interrupted", err=True)
    sys.exit(130)


@contextlib.contextmanager
def status_line(console: Console, first: str) -> Iterator[Callable[[str], None]]:
    """A live status line on a terminal; elsewhere (logs, pipes) one printed line per new step, and
    a counter's line at most every 5 s."""
    if console.is_terminal:
        with console.status(first) as status:
            yield status.update
        return
    last = {"shape": None, "at": 0.0}

    def update(text: str) -> None:
        shape, now = re.sub(r"[\d,.]+", "#", text), time.monotonic()
        if shape != last["shape"] or now - last["at"] >= 5:
            console.print(text, highlight=False, soft_wrap=True)
            last.update(shape=shape, at=now)

    update(first)
    yield update


def run_main(command: click.Command, prog: str, memory_option: str | None = None) -> None:
    """Run a click command; MwinvError and running out of memory become `prog: error: ...` and exit 2,
    Ctrl-C exit 130. memory_option: the command's option that sets DuckDB's limit, named when it runs
    out."""
    install_signal_handlers()
    try:
        _run(command, prog, memory_option)
    finally:
        # the command is done (or failed): what the exit removes (each DuckDB session's spill directory,
        # by a finalizer at exit) is not cut short; a SIGTERM inside that removal left the directory
        # (18,245 of 20,000 files) and the run exited 0, silently
        _ignore_signals()


class _Interrupted(BaseException):
    """A KeyboardInterrupt out of the command, carried past click: click catches one and prints an empty
    line (to end a terminal's "^C"), which stood between the last progress line and "interrupted"."""


def _past_click(invoke: Callable) -> Callable:
    def run(ctx: click.Context):
        try:
            return invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted from exc
    return run


def _run(command: click.Command, prog: str, memory_option: str | None) -> None:
    command.invoke = _past_click(command.invoke)
    try:
        command.main(prog_name=prog, standalone_mode=False)
    except (click.exceptions.Abort, _Interrupted):
        _interrupted(prog)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except MwinvError as exc:
        click.echo(f"{prog}: error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted(prog)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):   # DuckDB's "Query interrupted", a RuntimeError
            _interrupted(prog)
        # a full disk where no writer said it (a spool, a trace's pages; DuckDB's spill files), and
        # DuckDB's out-of-memory (its cap, not the machine's), without importing DuckDB in every command
        if is_disk_full(exc) or type(exc).__name__ == "IOException" and "No space left on device" in str(exc):
            # DuckDB names the file only in its text: 'IO Error: Could not write file "…/session.duckdb": …'
            named = getattr(exc, "filename", None)
            if not named and (found := re.search(r'Could not write file "([^"]+)"', str(exc))):
                named = found[1]
            what = f"no space left on device writing {named}" if named else str(exc).splitlines()[0]
        elif type(exc).__name__ == "OutOfMemoryException":
            what = str(exc).splitlines()[0] + (f" (raise DuckDB's limit with {memory_option}, e.g. {memory_option} 4GB)"
                                               if memory_option else "")
        else:
            raise
        click.echo(f"{prog}: error: {what} (what was written before is kept)", err=True)
        sys.exit(2)

