"""The Typer application and the one place that turns exceptions into exit codes.

Exit codes (README): 0 ok/publishable, 1 internal error, 2 input error, 3 incomplete evidence
(evidence written, no scorecard), 4 comparison or conformance refused.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from runner.evaluator.core.canonical import CanonicalError
from runner.evaluator.core.errors import MESSAGE_MAX, EvidenceError, InputError, shorten

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_INCOMPLETE = 3
EXIT_REFUSED = 4

app = typer.Typer(
    name="bench",
    help="agent-fault-bench: witnessed fault injection for agent runs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])


def guarded(fn: F) -> F:
    """Input mistakes become one clear line and exit 2 (evidence problems exit 3); never a
    traceback. Messages are shortened (a 10 MB value is never echoed whole)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except InputError as exc:
            _say("error", exc.render())
            raise typer.Exit(EXIT_INPUT) from None
        except CanonicalError as exc:
            _say("error", str(exc))
            raise typer.Exit(EXIT_INPUT) from None
        except EvidenceError as exc:
            _say("evidence error", str(exc))
            raise typer.Exit(EXIT_INCOMPLETE) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None
        # The last line: the causes are fixed where they arise (bounded reads, nesting limits,
        # path checks); whatever still slips through is an input the user gave, not a crash.
        except RecursionError:
            _say("error", "input is nested too deeply")
            raise typer.Exit(EXIT_INPUT) from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename is not None else ""
            _say("error", f"{where}{exc.strerror or exc}")
            raise typer.Exit(EXIT_INPUT) from None
        except UnicodeError as exc:
            _say("error", f"not valid text: {exc}")
            raise typer.Exit(EXIT_INPUT) from None
        except Exception:
            err.print("[bold red]internal error[/] (a bug in bench; please report it):")
            traceback.print_exc(file=sys.stderr)
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def _say(label: str, message: str) -> None:
    # shortened, and control characters (a terminal escape in a file name or a spec value)
    # written as escapes, not sent to the terminal
    text = "".join(
        c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1]
        for c in shorten(message, MESSAGE_MAX)
    )
    err.print(f"[bold red]{label}:[/] {escape(text)}", markup=True)
