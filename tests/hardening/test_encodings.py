"""`bench canonicalize`, `bench digest` and every JSON input take UTF-8 without a BOM only
(issue 29): RFC 8785 hashes UTF-8 bytes, so an identity tool refuses anything else with exit 2
naming the encoding found, never a silent re-encoding."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.evaluator.core.canonical import EncodingError, foreign_encoding, parse_json
from tests.foundation.helpers import bench

TEXT = '{"a":[1,"\u00e9\u4e2d",true],"b":null}'
ENCODINGS = {
    "UTF-8 with a BOM": b"\xef\xbb\xbf" + TEXT.encode(),
    "UTF-16 LE (with a BOM)": TEXT.encode("utf-16"),  # the platform's order, with its BOM
    "UTF-16 LE": TEXT.encode("utf-16-le"),
    "UTF-16 BE": TEXT.encode("utf-16-be"),
    "UTF-16 BE (with a BOM)": b"\xfe\xff" + TEXT.encode("utf-16-be"),
    "UTF-32 LE": TEXT.encode("utf-32-le"),
    "UTF-32 BE": TEXT.encode("utf-32-be"),
    "UTF-32 LE (with a BOM)": TEXT.encode("utf-32"),
    "UTF-32 BE (with a BOM)": b"\x00\x00\xfe\xff" + TEXT.encode("utf-32-be"),
}


@pytest.mark.parametrize("name", sorted(ENCODINGS))
@pytest.mark.parametrize("command", ["canonicalize", "digest"])
def test_other_encodings_are_refused_naming_them(tmp_path: Path, name: str, command: str) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(ENCODINGS[name])
    res = bench(command, path)
    assert res.exit_code == 2, res.output
    assert f"encoded as {name};" in res.output and str(path) in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_utf8_without_a_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(TEXT.encode())  # negative control: the same text in UTF-8 passes
    res = bench("canonicalize", path)
    assert res.exit_code == 0 and res.stdout_bytes == TEXT.encode()


def test_a_bom_in_a_str_is_refused_too() -> None:
    with pytest.raises(EncodingError):
        parse_json("\ufeff{}")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON, codec=st.sampled_from(["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be",
                                          "utf-16", "utf-32", "utf-8-sig"]))  # fmt: skip
def test_every_json_text_in_another_encoding_is_refused(value: object, codec: str) -> None:
    """Whatever the value, its text in another encoding is refused, and in UTF-8 accepted."""
    import json

    text = json.dumps(value, ensure_ascii=False)
    assert foreign_encoding(text.encode(codec)) is not None
    with pytest.raises(EncodingError):
        parse_json(text.encode(codec))
    assert parse_json(text.encode()) == value
