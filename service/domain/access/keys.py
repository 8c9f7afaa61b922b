"""API key generation, parsing and verification.

A key looks like ``pf_<prefix>_<secret>``: ``prefix`` is 8 public characters used to find the
key's row, ``secret`` is ``secrets.token_urlsafe(32)`` (256 bits from the OS CSPRNG). Only the
prefix and the SHA-256 of the whole key are stored.

Why a fast hash and not bcrypt/argon2: those slow down guessing *low-entropy* passwords. A
256-bit random secret cannot be guessed whatever the hash speed, so SHA-256 keeps the same
security while checking a key costs microseconds on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from dataclasses import dataclass

__all__ = [
    "KEY_SCHEME",
    "PREFIX_LENGTH",
    "GeneratedKey",
    "generate_key",
    "hash_key",
    "key_matches",
    "parse_prefix",
]

KEY_SCHEME = "pf"
PREFIX_LENGTH = 8
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
_SECRET_BYTES = 32
#: token_urlsafe(32) is 43 characters; shorter secrets are not ours.
_MIN_SECRET_LENGTH = 43
_MAX_KEY_LENGTH = 256


@dataclass(frozen=True, slots=True)
class GeneratedKey:
    """A new key. ``token`` is shown to its owner once and never stored."""

    token: str
    prefix: str
    key_hash: str

    def __repr__(self) -> str:
        return f"GeneratedKey(prefix={self.prefix!r}, token=<hidden>)"


def hash_key(token: str) -> str:
    """SHA-256 of the key, as 64 hex digits."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def generate_key() -> GeneratedKey:
    """A fresh random key with ≥ 256 bits of secret."""
    prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH))
    token = f"{KEY_SCHEME}_{prefix}_{secrets.token_urlsafe(_SECRET_BYTES)}"
    return GeneratedKey(token=token, prefix=prefix, key_hash=hash_key(token))


def parse_prefix(token: str) -> str | None:
    """The public prefix of a well-formed key, else None. Never looks at the secret's value."""
    if len(token) > _MAX_KEY_LENGTH:
        return None
    scheme, sep, rest = token.partition("_")
    if scheme != KEY_SCHEME or not sep:
        return None
    prefix, sep, secret = rest.partition("_")
    if not sep or len(prefix) != PREFIX_LENGTH or len(secret) < _MIN_SECRET_LENGTH:
        return None
    if any(ch not in _PREFIX_ALPHABET for ch in prefix):
        return None
    return prefix


def key_matches(token: str, key_hash: str) -> bool:
    """Constant-time comparison of ``token``'s hash with a stored hash."""
    return hmac.compare_digest(hash_key(token), key_hash)
