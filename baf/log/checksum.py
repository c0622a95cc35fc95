"""A record's checksum: CRC-32 of its fields, stored beside it and checked on every read.

A durable store keeps ``record_checksum`` of each record it writes and recomputes it for each row it
reads; a mismatch means the row changed after it was written (a flipped bit on the disk, a hand edit)
and is reported as ``CorruptRecordError`` naming session and seq. CRC-32 catches every burst of up to
32 flipped bits and all but one in four billion other changes, at about a gigabyte a second (zlib, in
C). It is not a signature: someone who edits the file on purpose can recompute it too.

A record deleted from the middle of a session is caught by the seq gap it leaves, not by a checksum.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

__all__ = ["record_checksum"]

# seq, ts and version as fixed-width bytes: packing them is cheaper than formatting them as text (the
# checksum runs for every record read; ``bench/bench_check.py`` measures it).
_pack_numbers: Final = struct.Struct("<qdq").pack
_crc32: Final = zlib.crc32


def record_checksum(session_id: str, seq: int, ts: float, kind: str, version: int, data: str | bytes) -> int:
    """CRC-32 of a record's fields as a store keeps them: ``data`` is its JSON text (``str`` or UTF-8 bytes).

    ``ts`` must be the float the store keeps, so a reader gets the same value. ``session_id`` and ``kind``
    must be valid Unicode (a store refuses the others before it gets here).
    """
    body = data if isinstance(data, bytes) else data.encode()
    return _crc32(body, _crc32(_pack_numbers(seq, ts, version), _crc32(f"{session_id}\x1f{kind}".encode())))
