"""API key format, hashing and parsing."""

from __future__ import annotations

import pytest

from service.domain.access.keys import (
    PREFIX_LENGTH,
    generate_key,
    hash_key,
    key_matches,
    parse_prefix,
)


def test_generated_keys_are_unique_and_well_formed() -> None:
    keys = [generate_key() for _ in range(200)]
    assert len({k.token for k in keys}) == 200
    for key in keys:
        scheme, prefix, secret = key.token.split("_", 2)
        assert scheme == "pf"
        assert prefix == key.prefix
        assert len(prefix) == PREFIX_LENGTH
        assert len(secret) >= 43  # 32 random bytes, base64url
        assert parse_prefix(key.token) == key.prefix
        assert key.key_hash == hash_key(key.token)
        assert len(key.key_hash) == 64
        assert key.token not in repr(key)


def test_key_matches_only_the_right_key() -> None:
    key = generate_key()
    assert key_matches(key.token, key.key_hash)
    assert not key_matches(key.token + "x", key.key_hash)
    assert not key_matches(generate_key().token, key.key_hash)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "pf",
        "pf_",
        "pf_abcdefgh",
        "pf_abcdefgh_",
        "pf_abcdefgh_tooshort",
        "pf_abcdefg_" + "x" * 43,
        "pf_ABCDEFGH_" + "x" * 43,
        "pf_abcd-fgh_" + "x" * 43,
        "xx_abcdefgh_" + "x" * 43,
        "pf_abcdefgh_" + "x" * 500,
        "Bearer pf_abcdefgh_" + "x" * 43,
    ],
)
def test_malformed_tokens_have_no_prefix(token: str) -> None:
    assert parse_prefix(token) is None


def test_hash_handles_any_text() -> None:
    assert len(hash_key("\udcff\x00é")) == 64
