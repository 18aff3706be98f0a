"""Bearer-token authentication of the JSON API (RFC 6750), on when tokens are configured.

API_TOKENS       comma-separated tokens that may do everything under /api
API_READ_TOKENS  comma-separated tokens that may only read (GET and HEAD); anything else is 403

With neither set, /api is open (fine on 127.0.0.1; `pgqw api` refuses any other address then, and
the app itself answers no peer but this machine, whichever server runs it: see below).
With either set, every /api request needs `Authorization: Bearer <token>`:
  no or malformed header → 401 unauthorized  (WWW-Authenticate: Bearer realm="pgqw")
  unknown token          → 401 invalid_token (WWW-Authenticate: Bearer ..., error="invalid_token")
  read token, write call → 403 forbidden     (WWW-Authenticate: Bearer ..., error="insufficient_scope")

Without tokens every request (the page, /metrics and /api) must come from this machine: a
REMOTE_ADDR that is an address but not a loopback one (127.0.0.0/8, ::1) → 403 forbidden_peer. That
holds under any WSGI server (waitress-serve, the user's own app mounting this one), whose listen
address the app cannot see. A REMOTE_ADDR that is no address (a Unix socket's) is this machine.

Even from this machine a browser could still be made to reach the API: a cross-site form posts to
http://127.0.0.1:3000, or a name the attacker controls is pointed at 127.0.0.1 (DNS rebinding). So
every request must then also name the API in its Host header:
  a loopback name (localhost, 127.0.0.0/8, [::1]) with the port the API listens on,
  PUBLIC_URL's host, or one in API_ALLOWED_HOSTS (`name` for any port, `name:port` for one)
  otherwise                           → 403 forbidden_host
and a request with an Origin header must come from one of those hosts (http or https; "null" is none)
  otherwise                           → 403 forbidden_origin
A request that changes something (any method but GET, HEAD and OPTIONS) without an Origin header is
judged by what else the browser says of where it comes from:
  Sec-Fetch-Site: cross-site or same-site (a page of another origin; an allowed one would have sent
  its Origin), or a Referer that is not http(s) on one of those hosts
                                      → 403 forbidden_origin
No Host header (an HTTP/1.0 client) skips the first check; no Origin, Sec-Fetch-Site or Referer (curl,
scripts) the others, and so do Sec-Fetch-Site: same-origin and none (the page itself; an address typed
in). A cross-site GET is answered (a link to the page from elsewhere; a page of another site cannot
read the answer). With tokens, a browser cannot add the token by itself, and none of these checks is
made.

Tokens are compared in constant time: both sides are hashed to SHA-256 digests of the same length and
compared with hmac.compare_digest against every configured token, without stopping at a match, so
neither the position of a match nor how much of a token matched shows in the timing. Only digests
are kept in memory after start; no token is ever written to a log or an error message.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Flask, current_app, request

from pgqw import config

from .errors import ApiError

AUTH_KEY = "pgqw.auth"
HOSTS_KEY = "pgqw.allowed_hosts"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REALM = 'Bearer realm="pgqw"'


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Tokens:
    write: tuple[bytes, ...]
    read: tuple[bytes, ...]

    @classmethod
    def of(cls, write: tuple[str, ...], read: tuple[str, ...]) -> Tokens:
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


def bearer() -> str:
    """The token of the request's `Authorization: Bearer <token>` header; 401 when there is none."""
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
    scope = tokens.scope(bearer())
    if scope is None:
        raise AuthError(401, "invalid_token", "the bearer token is not valid",
                        f'{REALM}, error="invalid_token"')
    if scope == "read" and request.method not in READ_METHODS:
        raise AuthError(403, "forbidden", f"this token may only read; {request.method} needs a token from API_TOKENS",
                        f'{REALM}, error="insufficient_scope"')


# Host[:port] as a Host header or an allow-list entry holds it: a name or IPv4 address, or an IPv6
# address in brackets. Anything else (user info, a path, spaces) names no host.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9_.-]+))(?::(?P<port>[0-9]{1,5}))?")
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<host>[^/?#@\s]+)", re.IGNORECASE)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(value: str, default_port: int | None) -> tuple[str, int | None] | None:
    """(lowercased name or canonical address, port or default_port), or None when value is no host."""
    m = _HOST.fullmatch(value.strip())
    if not m:
        return None
    if m["v6"]:
        try:
            name = str(ipaddress.IPv6Address(m["v6"]))
        except ValueError:
            return None
    else:
        name = m["name"].lower().rstrip(".")
    port = int(m["port"]) if m["port"] else default_port
    if not name or (port is not None and not 0 < port < 65536):
        return None
    return name, port


def _loopback(name: str) -> bool:
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AllowedHosts:
    """The hosts a tokenless API answers to besides loopback names: (name, port or None for any)."""

    named: frozenset[tuple[str, int | None]]

    @classmethod
    def of(cls, public_url: str | None, extra: tuple[str, ...]) -> AllowedHosts:
        named = set()
        if public_url:
            parts = urlsplit(public_url)
            found = _host_port(parts.netloc.rpartition("@")[2], None) if parts.netloc else None
            if found is None:
                raise config.ConfigError(f"PUBLIC_URL names no host: {public_url!r}")
            named.add(found)
        for entry in extra:
            found = _host_port(entry.split("://", 1)[-1].rstrip("/"), None)
            if found is None:
                raise config.ConfigError(f"API_ALLOWED_HOSTS: {entry!r} is not a host name or address "
                                         "(name, name:port, [v6 address]:port)")
            named.add(found)
        return cls(frozenset(named))

    def allows(self, name: str, port: int | None, server_port: int) -> bool:
        if _loopback(name):
            return port == server_port
        return (name, None) in self.named or (name, port) in self.named


def _server_port() -> int:
    try:
        return int(request.environ.get("SERVER_PORT") or 80)
    except ValueError:
        return 80


def local_peer(remote_addr: str | None) -> bool:
    """Whether a request's REMOTE_ADDR is this machine: a loopback address (an IPv4-mapped one too), or
    no address at all (a Unix socket: waitress says "localhost", others nothing)."""
    try:
        address = ipaddress.ip_address((remote_addr or "").strip().split("%")[0])
    except ValueError:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


# Sec-Fetch-Site values of a request made by a page of another origin (same-site: another port or
# another subdomain of the same site). same-origin and none (typed in, a bookmark) are the API's own.
CROSS_SITE = frozenset({"cross-site", "same-site"})


def _own_page(url: str, allowed: AllowedHosts, port: int, *, origin: bool = False) -> bool:
    """Whether an Origin (scheme and host alone) or a Referer (a whole URL) is http(s) on one of the
    API's own names."""
    url = url.strip()
    m = _ORIGIN.fullmatch(url) if origin else _ORIGIN.match(url)
    if m is None or (len(url) > m.end() and url[m.end()] not in "/?#"):
        return False
    found = _host_port(m["host"], _DEFAULT_PORTS[m["scheme"].lower()])
    return found is not None and allowed.allows(*found, port)


def check_host() -> None:
    """Runs before every request (registered by install) when the API has no tokens: the peer, the Host,
    and where the request comes from (Origin; for a request that changes something without one,
    Sec-Fetch-Site and Referer)."""
    allowed: AllowedHosts | None = current_app.extensions[HOSTS_KEY]
    if allowed is None:
        return
    if not local_peer(request.environ.get("REMOTE_ADDR")):
        raise ApiError(403, "forbidden_peer",
                       "without API_TOKENS this API answers only requests from its own machine; set API_TOKENS "
                       "(or API_READ_TOKENS) to serve others")
    port = _server_port()
    host = request.headers.get("Host")
    if host is not None:
        found = _host_port(host, 80)
        if found is None or not allowed.allows(*found, port):
            raise ApiError(403, "forbidden_host",
                           f"this API answers only to its own names (localhost, 127.0.0.1 or [::1] on port {port}, "
                           f"PUBLIC_URL's host, API_ALLOWED_HOSTS), not to Host {host[:100]!r}")
    origin = request.headers.get("Origin")
    if origin is not None:
        if not _own_page(origin, allowed, port, origin=True):
            raise ApiError(403, "forbidden_origin",
                           f"this API takes no requests from pages of other sites; Origin {origin[:100]!r} is "
                           f"not one of its own names (localhost, 127.0.0.1 or [::1] on port {port}, "
                           "PUBLIC_URL's host, API_ALLOWED_HOSTS)")
        return
    if request.method in READ_METHODS:
        return
    # No Origin on a request that changes something: an older browser, or one that left it out. What
    # else it says of the page that sent the request decides.
    site = request.headers.get("Sec-Fetch-Site", "").strip().lower()
    if site in CROSS_SITE:
        raise ApiError(403, "forbidden_origin",
                       f"this API takes no requests from pages of other sites: the browser marked this one "
                       f"Sec-Fetch-Site: {site} and sent no Origin to tell which page it came from")
    referer = request.headers.get("Referer")
    if referer is not None and not _own_page(referer, allowed, port):
        raise ApiError(403, "forbidden_origin",
                       f"this API takes no requests from pages of other sites; Referer {referer[:100]!r} is "
                       f"not one of its own pages (localhost, 127.0.0.1 or [::1] on port {port}, "
                       "PUBLIC_URL's host, API_ALLOWED_HOSTS)")


def install(app: Flask, write: tuple[str, ...], read: tuple[str, ...]) -> None:
    """Keeps the token digests and, when there are no tokens, the allowed hosts (PUBLIC_URL and
    API_ALLOWED_HOSTS: the app's config when it has them (tests), else the settings)."""
    tokens = Tokens.of(write, read)
    app.extensions[AUTH_KEY] = tokens
    allowed = None
    if not tokens.enabled:
        settings = config.load()
        extra = app.config.get("API_ALLOWED_HOSTS", settings.api_allowed_hosts)
        if isinstance(extra, str):
            extra = tuple(h.strip() for h in extra.split(",") if h.strip())
        allowed = AllowedHosts.of(app.config.get("PUBLIC_URL", settings.public_url), tuple(extra))
    app.extensions[HOSTS_KEY] = allowed
    app.before_request(check_host)


def enabled(app: Flask) -> bool:
    return app.extensions[AUTH_KEY].enabled
