"""Without API tokens, a request that changes something is refused when the browser says it comes from a
page of another site, even without an Origin header: Sec-Fetch-Site cross-site or same-site, or a Referer
that is not one of the API's own pages (403 forbidden_origin). Reads, the API's own page, and clients that
send none of these headers (curl, scripts) are answered. With tokens nothing of this is checked."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgqw.app import close_pool, create_app
from tests.api.conftest import CheckedClient
from tests.helpers import LISTING

BODY = {"type": "listing_flyer", "payload": LISTING}
TOKEN = "cross-site-test-token-0123456789"


def _code(response: Any) -> str:
    assert response.mimetype == "application/json"
    return response.get_json()["error"]["code"]


def post(client: FlaskClient, key: str, **headers: str):  # type: ignore[no-untyped-def]
    return client.post("/api/jobs", json=BODY, headers={"Idempotency-Key": key, **headers})


@pytest.mark.parametrize("headers", [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # another port of localhost, another subdomain
    {"Sec-Fetch-Site": "Cross-Site"},
    {"Referer": "https://attacker.example/form.html"},
    {"Referer": "http://localhost:8080/"},
    {"Referer": "http://localhost.attacker.example/"},
    {"Referer": "http://user@localhost/"},
    {"Referer": "null"},
    {"Sec-Fetch-Site": "same-origin", "Referer": "https://attacker.example/"},
], ids=["cross-site", "same-site", "case", "foreign-referer", "other-port-referer", "lookalike-referer",
        "userinfo-referer", "null-referer", "same-origin-but-foreign-referer"])
def test_cross_site_post_without_origin_is_403(shared_client: FlaskClient, unchanged: None,
                                              headers: dict[str, str]) -> None:
    r = post(shared_client, "cross-site", **headers)
    assert r.status_code == 403, r.get_json()
    assert _code(r) == "forbidden_origin"
    for path in ("/api/queues/emails/pause?create=true", "/api/jobs/00000000-0000-0000-0000-000000000000/cancel"):
        r = shared_client.post(path, headers=headers)
        assert r.status_code == 403 and _code(r) == "forbidden_origin", path


@pytest.mark.parametrize("headers", [
    {},                                             # curl, a script
    {"Sec-Fetch-Site": "same-origin"},              # the API's own page
    {"Sec-Fetch-Site": "none"},                     # typed in, a bookmark
    {"Referer": "http://localhost/"},               # the page, by a browser that sends no Sec-Fetch-Site
    {"Referer": "http://127.0.0.1/#/jobs"},
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://localhost"},  # an Origin of its own names decides
], ids=["none", "same-origin", "user", "own-referer", "own-referer-fragment", "own-origin"])
def test_cross_site_post_from_the_api_itself_is_answered(client: FlaskClient, headers: dict[str, str]) -> None:
    assert post(client, "own", **headers).status_code == 202


@pytest.mark.parametrize("path", ["/api/jobs", "/", "/api/stats"])
def test_cross_site_get_is_answered(shared_client: FlaskClient, path: str) -> None:
    """A link to the console from another site is followed; a page of another site cannot read an answer."""
    headers = {"Sec-Fetch-Site": "cross-site", "Referer": "https://wiki.example/ops"}
    assert shared_client.get(path, headers=headers).status_code == 200


@pytest.fixture
def token_client(shared_db_url: str) -> Iterator[FlaskClient]:
    app: Flask = create_app({"TESTING": True, "DATABASE_URL": shared_db_url, "API_TOKENS": TOKEN})
    app.test_client_class = CheckedClient
    yield app.test_client()
    close_pool(app)


def test_cross_site_with_tokens_is_not_checked(token_client: FlaskClient) -> None:
    """A browser cannot add the bearer token by itself: with tokens the token decides, not these headers."""
    r = token_client.post("/api/queues/emails/pause?create=true",
                          headers={"Authorization": f"Bearer {TOKEN}", "Sec-Fetch-Site": "cross-site",
                                   "Referer": "https://attacker.example/"})
    assert r.status_code == 200
    r = token_client.post("/api/queues/emails/resume", headers={"Sec-Fetch-Site": "cross-site"})
    assert (r.status_code, _code(r)) == (401, "unauthorized")
