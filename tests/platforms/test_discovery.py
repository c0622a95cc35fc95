"""discover_platforms() over the baf.platforms entry-point group, and the richer reply fallbacks."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import baf.platforms
from baf.platforms import Platform, discover_platforms
from baf.platforms.websocket import WebSocketPlatform


def test_discovery_loads_platforms_and_skips_broken_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [
        EntryPoint("ws", "baf.platforms.websocket:WebSocketPlatform", "baf.platforms"),
        EntryPoint("missing", "no_such_module_xyz:Thing", "baf.platforms"),
        EntryPoint("not_a_platform", "baf.platforms:discover_platforms", "baf.platforms"),
    ]
    monkeypatch.setattr(baf.platforms, "entry_points", lambda group: [e for e in entries if e.group == group])
    assert discover_platforms() == {"ws": WebSocketPlatform}


def test_lazy_export() -> None:
    assert baf.platforms.WebSocketPlatform is WebSocketPlatform
    with pytest.raises(AttributeError):
        _ = baf.platforms.NoSuchPlatform  # type: ignore[attr-defined]


async def test_richer_replies_fall_back_to_text() -> None:
    sent: list[str] = []

    class Plain(Platform):
        async def reply(self, session: object, message: str) -> None:  # type: ignore[override]
            sent.append(message)

    plain, session = Plain(), object()
    await plain.reply_markdown(session, "**hi**")  # type: ignore[arg-type]
    await plain.reply_options(session, "Pick", ["a", "b"])  # type: ignore[arg-type]
    await plain.reply_file(session, "f.txt", b"abc", caption="notes")  # type: ignore[arg-type]
    await plain.reply_image(session, b"12")  # type: ignore[arg-type]
    await plain.reply_error(session, "oops")  # type: ignore[arg-type]
    expected = ["**hi**", "Pick\n\n- a\n- b", "notes\n\n[file: f.txt, 3 bytes]", "[image: image/png, 2 bytes]"]
    assert sent == [*expected, "oops"]
