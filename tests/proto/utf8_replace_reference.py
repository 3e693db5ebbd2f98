#!/usr/bin/env python3
"""Reference for tests/proto/json_writer_test.cpp: reads lines of hex bytes on stdin and writes,
per line, the hex of bytes.decode("utf-8", errors="replace") encoded back to UTF-8. CPython's
decoder replaces each maximal ill-formed subpart with one U+FFFD, as the Unicode standard
recommends; proto/json_writer.cpp implements the same rule independently."""
import sys

for line in sys.stdin:
    raw = bytes.fromhex(line.strip())
    print(raw.decode("utf-8", errors="replace").encode("utf-8").hex())
