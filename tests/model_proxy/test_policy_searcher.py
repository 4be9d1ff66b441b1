"""The policy's fast pattern test (`searcher`: plain-literal alternations by `in`) answers exactly
as `re.search` does, for literal and non-literal patterns alike, and is really taken for the
literal ones (else the speed-up is a no-op)."""

from __future__ import annotations

import re
import warnings

from hypothesis import given
from hypothesis import strategies as st

from runner.runtime.cassettes.policy import searcher

# a small alphabet with regex metacharacters, so texts hit and patterns are sometimes regexes
ALPHA = st.text(alphabet="ab -\"':.|*?()[]\\^$1\n", max_size=12)


@given(patterns=st.lists(ALPHA, min_size=1, max_size=4), text=ALPHA)
def test_searcher_answers_as_re_search(patterns: list[str], text: str) -> None:
    pattern = "|".join(patterns)
    try:
        with warnings.catch_warnings():  # `[[` etc.: re's FutureWarning about set syntax
            warnings.simplefilter("ignore", FutureWarning)
            rx = re.compile(pattern)
    except re.error:
        return  # refused on load (`_regex`): never reaches a searcher
    assert bool(searcher(pattern)(text)) == bool(rx.search(text)), (pattern, text)


def test_literal_alternation_takes_the_fast_path() -> None:
    transport = "may or may not have been received|An error occurred while executing the command"
    fast = searcher(transport)
    assert not isinstance(getattr(fast, "__self__", None), re.Pattern)
    assert fast("x An error occurred while executing the command y")
    assert fast("it may or may not have been received")
    assert not fast("An error occurred")  # a prefix of a literal is not the literal
    assert searcher("")("anything")  # an empty pattern is found everywhere, as in `re`
    assert searcher("a|")("zzz")  # an empty branch too


def test_a_regex_stays_a_regex() -> None:
    rx = searcher(r'"returncode": -?[1-9]')
    assert isinstance(getattr(rx, "__self__", None), re.Pattern)
    assert rx('{"returncode": -1}') and not rx('{"returncode": 0}')
