"""Bearer-token authentication of the JSON API (RFC 6750), on when tokens are configured.

API_TOKENS       comma-separated tokens that may do everything under /api
API_READ_TOKENS  comma-separated tokens that may only read (GET and HEAD); anything else is 403

With neither set, /api is open (fine on 127.0.0.1; `pgqw api` refuses any other address then).
With either set, every /api request needs `Authorization: Bearer <token>`:
  no or malformed header → 401 unauthorized  (WWW-Authenticate: Bearer realm="pgqw")
  unknown token          → 401 invalid_token (WWW-Authenticate: Bearer ..., error="invalid_token")
  read token, write call → 403 forbidden     (WWW-Authenticate: Bearer ..., error="insufficient_scope")

Tokens are compared in constant time: both sides are hashed to SHA-256 digests of the same length and
compared with hmac.compare_digest against every configured token, without stopping at a match, so
neither the position of a match nor how much of a token matched shows in the timing. Only digests
are kept in memory after start; no token is ever written to a log or an error message.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from flask import Flask, current_app, request

from .errors import ApiError

AUTH_KEY = "pgqw.auth"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REALM = 'Bearer realm="pgqw"'


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Tokens:
    write: tuple[bytes, ...]
    read: tuple[bytes, ...]

    @classmethod
    def of(cls, write: tuple[str, ...], read: tuple[str, ...]) -> "Tokens":
        return cls(tuple(_digest(t) for t in write), tuple(_digest(t) for t in read))

    @property
    def enabled(self) -> bool:
        return bool(self.write or self.read)

    def scope(self, presented: str) -> str | None:
        """'write', 'read' or None (unknown). Looks at every token whatever matches."""
        given = _digest(presented)
        write = read = False
        for known in self.write:
            write |= hmac.compare_digest(given, known)
        for known in self.read:
            read |= hmac.compare_digest(given, known)
        return "write" if write else "read" if read else None


class AuthError(ApiError):
    def __init__(self, status: int, code: str, message: str, challenge: str) -> None:
        super().__init__(status, code, message, headers={"WWW-Authenticate": challenge})


def _presented() -> str:
    header = request.headers.get("Authorization")
    if not header:
        raise AuthError(401, "unauthorized", "this API needs a bearer token: send Authorization: Bearer <token>",
                        REALM)
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthError(401, "unauthorized",
                        "the Authorization header must be 'Bearer <token>'",
                        f'{REALM}, error="invalid_request"')
    return token


def check_request() -> None:
    """Runs before every /api request (registered by install)."""
    tokens: Tokens = current_app.extensions[AUTH_KEY]
    if not tokens.enabled:
        return
    scope = tokens.scope(_presented())
    if scope is None:
        raise AuthError(401, "invalid_token", "the bearer token is not valid",
                        f'{REALM}, error="invalid_token"')
    if scope == "read" and request.method not in READ_METHODS:
        raise AuthError(403, "forbidden", f"this token may only read; {request.method} needs a token from API_TOKENS",
                        f'{REALM}, error="insufficient_scope"')


def install(app: Flask, write: tuple[str, ...], read: tuple[str, ...]) -> None:
    app.extensions[AUTH_KEY] = Tokens.of(write, read)


def enabled(app: Flask) -> bool:
    return app.extensions[AUTH_KEY].enabled
