"""The Redactor: what it replaces, what it leaves alone, and what it refuses."""

from __future__ import annotations

import pytest

from baf.log.record import Record
from baf.log.redaction import REDACTED, Redactor, register_secret, registered_secrets


def test_replaces_secrets_recursively_including_keys() -> None:
    r = Redactor(["s3cr3t-value"])
    data = {"a": "x s3cr3t-value y", "b": [1, {"s3cr3t-value": ("s3cr3t-value", 2)}], "c": None, "d": 5}
    assert r.redact(data) == {"a": f"x {REDACTED} y", "b": [1, {REDACTED: (REDACTED, 2)}], "c": None, "d": 5}
    assert data["a"] == "x s3cr3t-value y"  # the input is not changed


def test_clean_data_is_returned_as_is() -> None:
    data = {"a": ["b", {"c": "d"}]}
    assert Redactor(["s3cr3t-value"]).redact(data) is data
    assert Redactor().redact(data) is data
    record = Record("s", 1, "k", data)
    assert Redactor(["s3cr3t-value"]).redact_record(record) is record


def test_longest_secret_wins() -> None:
    r = Redactor(["abcdef", "abcdefghij"])
    assert r.redact_text("..abcdefghij..abcdef") == f"..{REDACTED}..{REDACTED}"


def test_too_short_secrets_are_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        Redactor().add("abc")
    with pytest.raises(TypeError):
        Redactor().add(12345678)  # type: ignore[arg-type]


def test_from_environment_picks_key_like_variables() -> None:
    env = {"OPENAI_API_KEY": "sk-env-123456", "GITHUB_TOKEN": "ghp-abcdef", "HOME": "/root/home", "X_SECRET": "ab"}
    r = Redactor.from_environment(env)
    assert r.redact_text("sk-env-123456 ghp-abcdef /root/home ab") == f"{REDACTED} {REDACTED} /root/home ab"


def test_process_registry_applies_to_existing_redactors() -> None:
    r = Redactor()
    register_secret("registry-canary-0042")
    register_secret(None)
    register_secret("tiny")  # ignored, like a local server's placeholder key
    assert "registry-canary-0042" in registered_secrets() and "tiny" not in registered_secrets()
    assert r.redact({"t": "registry-canary-0042"}) == {"t": REDACTED}
