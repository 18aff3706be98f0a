"""The app wherever it is mounted, and the demo only when it is loaded.

  - create_app() under a prefix in another Flask app (werkzeug's DispatcherMiddleware): the page names
    its own root, its files and the API answer below the prefix, and app.js fetches no absolute /api
  - the demo's tab, form and route (GET /api/jobs/{id}/flyer) exist only when the app's task modules
    (TASK_MODULES, default PGQW_TASKS, else pgqw.demo) include pgqw.demo; /result serves every result
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from pgqw.app import close_pool, create_app
from tests.api import states
from tests.api.conftest import CheckedClient
from tests.api.openapi_check import OPENAPI
from tests.api.test_openapi import app_operations, documented_operations
from tests.helpers import LISTING

APP_DIR = Path(__file__).resolve().parents[2] / "app"
FLYER = "/api/jobs/{id}/flyer"


@pytest.fixture
def make_app(db_url: str) -> Iterator[Any]:
    made: list[Flask] = []

    def _make(**config: Any) -> Flask:
        application = create_app({"TESTING": True, "DATABASE_URL": db_url, **config})
        application.test_client_class = CheckedClient
        made.append(application)
        return application

    yield _make
    for application in made:
        close_pool(application)


def _mounted(console: Flask) -> FlaskClient:
    """A client of the user's own app with the console mounted at /queue."""
    outer = Flask("users_app")

    @outer.get("/")
    def home() -> str:
        return "the user's own app"

    outer.wsgi_app = DispatcherMiddleware(outer.wsgi_app, {"/queue": console})  # type: ignore[method-assign]
    return outer.test_client()


# ---- mounted under a prefix ----

def test_mounting_under_a_prefix_serves_the_page_its_files_and_the_api_below_it(
    make_app: Any, conn: psycopg.Connection
) -> None:
    client = _mounted(make_app())
    assert client.get("/").get_data(as_text=True) == "the user's own app"
    r = client.get("/queue/")
    assert r.status_code == 200
    html = r.get_data(as_text=True)
    assert '<html lang="en" data-base="/queue/">' in html
    assert 'src="/queue/static/app.js"' in html and 'href="/queue/static/style.css"' in html
    assert client.get("/queue/static/app.js").status_code == 200
    assert client.get("/queue").status_code == 308  # to /queue/, so relative links resolve below it
    assert client.get("/queue/api/stats").status_code == 200
    r = client.post("/queue/api/jobs", json={"type": "listing_flyer", "payload": LISTING},
                    headers={"Idempotency-Key": "mounted-1"})
    assert r.status_code == 202
    assert r.headers["Location"] == f"/queue/api/jobs/{r.get_json()['data']['id']}"
    assert client.get("/api/stats").status_code == 404  # nothing of the console outside its prefix


def test_mounting_the_page_at_the_root_names_the_root(shared_client: FlaskClient) -> None:
    assert '<html lang="en" data-base="/">' in shared_client.get("/").get_data(as_text=True)


def test_mounting_the_page_fetches_and_links_only_relative_to_its_root() -> None:
    # Every URL app.js makes goes through appUrl/apiPathUrl (BASE, from data-base): no literal path
    # from the server's root, which would miss the prefix.
    js = (APP_DIR / "static" / "app.js").read_text()
    assert not re.search(r"""["'`]/api\b""", js), "an absolute /api path in app.js"
    assert not re.search(r"""\b(?:fetch|open)\(\s*["'`]/""", js)
    assert not re.search(r"""(?:href|location)\s*=\s*["'`]/""", js)
    for template in (APP_DIR / "templates").iterdir():
        text = template.read_text()
        assert not re.search(r"""(?:href|src|action)="/(?!/)""", text), template.name


# ---- the demo only when it is loaded ----

def test_demo_tab_form_and_flyer_route_are_there_by_default(
    make_app: Any, conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGQW_TASKS", raising=False)
    app = make_app()
    assert app.config["TASK_MODULES"] == ("pgqw.demo",)
    client = app.test_client()
    html = client.get("/").get_data(as_text=True)
    assert 'data-testid="nav-make"' in html and 'id="view-make"' in html and 'data-testid="flyer-form"' in html
    job = states.succeeded(conn)
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 200 and r.mimetype == "application/pdf" and r.data == states.PDF
    assert FLYER in client.get("/api/openapi.json").get_json()["paths"]
    assert app_operations(app) == documented_operations()


@pytest.mark.parametrize("modules", [("myapp.tasks",), "myapp.tasks, myapp.more", (), None],
                         ids=["tuple", "comma-separated", "empty", "none"])
def test_demo_is_absent_when_the_task_modules_do_not_name_it(
    make_app: Any, conn: psycopg.Connection, modules: Any
) -> None:
    app = make_app(TASK_MODULES=modules)
    client = app.test_client()
    html = client.get("/").get_data(as_text=True)
    for absent in ('data-testid="nav-make"', 'id="view-make"', 'data-testid="flyer-form"', "Demo: make a flyer"):
        assert absent not in html
    assert 'data-testid="jobs-table"' in html and 'data-testid="summary"' in html  # the console stays
    job = states.succeeded(conn)
    r = client.get(f"/api/jobs/{job.id}/flyer")
    assert r.status_code == 404 and r.get_json()["error"]["code"] == "not_found"  # no such route
    r = client.get(f"/api/jobs/{job.id}/result")  # every result, the demo's PDFs too
    assert r.status_code == 200 and r.mimetype == "application/pdf" and r.data == states.PDF
    doc = client.get("/api/openapi.json").get_json()
    assert FLYER not in doc["paths"] and set(doc["paths"]) == set(OPENAPI["paths"]) - {FLYER}
    assert app_operations(app) == documented_operations() - {(FLYER, "get")}


def test_demo_follows_pgqw_tasks_when_the_config_does_not_say(
    make_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQW_TASKS", "myapp.tasks")
    assert 'data-testid="nav-make"' not in make_app().test_client().get("/").get_data(as_text=True)
    monkeypatch.setenv("PGQW_TASKS", "myapp.tasks,pgqw.demo")
    assert 'data-testid="nav-make"' in make_app().test_client().get("/").get_data(as_text=True)


def test_demo_absent_keeps_the_rest_of_the_api_under_a_prefix(make_app: Any, conn: psycopg.Connection) -> None:
    client = _mounted(make_app(TASK_MODULES=("myapp.tasks",)))
    job = states.dead(conn)
    assert client.post(f"/queue/api/jobs/{job.id}/retry").status_code == 202
    done = states.succeeded(conn)
    assert client.get(f"/queue/api/jobs/{done.id}/result").data == states.PDF
    assert client.get(f"/queue/api/jobs/{done.id}/flyer").status_code == 404
