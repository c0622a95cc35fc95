"""The terminal platform's line reader: lines from a raw file descriptor."""

from __future__ import annotations

import io
import os
import sys

import pytest

from baf.platforms.terminal import _LineReader, _raw_lines


def test_lines_split_and_joined_across_reads_and_eof() -> None:
    read_end, write_end = os.pipe()
    try:
        reader = _LineReader(read_end)
        os.write(write_end, b"first\nsecond\r\nthi")
        assert reader.read_line() == "first"
        assert reader.read_line() == "second"  # several lines from one read, CRLF accepted
        euro = "€".encode()
        os.write(write_end, b"rd " + euro[:1])  # a character split between two reads
        os.write(write_end, euro[1:] + b"\nlast without newline\r")
        assert reader.read_line() == "third €"
        os.close(write_end)
        write_end = -1
        assert reader.read_line() == "last without newline"
        with pytest.raises(EOFError):
            reader.read_line()
    finally:
        os.close(read_end)
        if write_end != -1:
            os.close(write_end)


def test_which_input_is_read_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    leader, follower = os.openpty()
    try:
        monkeypatch.setattr(sys, "stdin", io.StringIO("no descriptor"))
        assert _raw_lines(None) is None  # input() reads it
        monkeypatch.setattr(sys, "stdin", None)
        assert _raw_lines(None) is None
        with os.fdopen(os.dup(follower)) as terminal:
            monkeypatch.setattr(sys, "stdin", terminal)
            assert _raw_lines(None) is None  # a terminal: input(), with line editing
        with os.fdopen(os.dup(read_end)) as pipe:
            monkeypatch.setattr(sys, "stdin", pipe)
            assert isinstance(_raw_lines(None), _LineReader)
        assert isinstance(_raw_lines(follower), _LineReader)  # an explicit descriptor is always read raw
    finally:
        for fd in (read_end, write_end, leader, follower):
            os.close(fd)
