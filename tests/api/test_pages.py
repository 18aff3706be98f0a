"""The page at / and its static files."""
from __future__ import annotations

import re

from flask.testing import FlaskClient

from pgqw.demo.listing import CURRENCIES


def test_page_has_the_form_prefilled_with_the_example_listing(shared_client: FlaskClient) -> None:
    r = shared_client.get("/")
    assert r.status_code == 200 and r.mimetype == "text/html"
    html = r.get_data(as_text=True)
    for value in ('value="3-bedroom apartment in Yaba"', 'value="270000000"',
                  'value="12 Herbert Macaulay Way, Yaba, Lagos"', 'value="3"'):
        assert value in html
    assert re.search(r'<option value="NGN" data-symbol="₦" data-exponent="2"\s+selected>', html)
    for code in CURRENCIES:
        assert f'<option value="{code}"' in html


def test_page_has_the_three_views(shared_client: FlaskClient) -> None:
    html = shared_client.get("/").get_data(as_text=True)
    for testid in ("flyer-form", "job-status", "pdf-link", "jobs-table", "status-filter", "page-next",
                   "page-first", "dead-list", "nav-dead"):
        assert f'data-testid="{testid}"' in html


def test_page_is_the_console_first_with_its_panels_and_the_job_search(shared_client: FlaskClient) -> None:
    html = shared_client.get("/").get_data(as_text=True)
    for testid in ("nav-console", "summary", "queues-panel", "workers-panel", "types-panel", "schedules-panel",
                   "job-search", "search-id", "search-type", "search-queue", "search-submit", "nav-make"):
        assert f'data-testid="{testid}"' in html
    # The console is the view shown first; the demo's form waits at #make.
    assert re.search(r'<section id="view-console"[^>]*data-view="console"[^>]*>', html)
    assert re.search(r'<section id="view-make"[^>]*\bhidden\b[^>]*>', html)
    # Every search field has its label.
    for name in ("id_prefix", "type", "queue"):
        assert f'<label for="s-{name}">' in html and f'id="s-{name}"' in html


def test_page_only_loads_its_own_files(shared_client: FlaskClient) -> None:
    r = shared_client.get("/")
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    html = r.get_data(as_text=True)
    assert "<script>" not in html and "style=" not in html and "http://" not in html and "https://" not in html


def test_static_files_are_served_with_their_types(shared_client: FlaskClient) -> None:
    css = shared_client.get("/static/style.css")
    js = shared_client.get("/static/app.js")
    assert css.status_code == 200 and css.mimetype == "text/css"
    assert js.status_code == 200 and js.mimetype in ("text/javascript", "application/javascript")
    assert b"innerHTML" not in js.data  # everything is written with textContent


def test_page_has_the_job_workflow_and_batch_views_and_the_bulk_actions(shared_client: FlaskClient) -> None:
    html = shared_client.get("/").get_data(as_text=True)
    for view in ("job", "workflow", "batch"):
        assert re.search(rf'<section id="view-{view}"[^>]*data-view="{view}"[^>]*\bhidden\b[^>]*>', html)
    for testid in ("job-detail", "job-workflow", "workflow-graph", "job-batch", "workflow-detail", "batch-detail",
                   "bulk-bar", "bulk-retry", "bulk-cancel", "filter-blocked"):
        assert f'data-testid="{testid}"' in html
