"""The page in a real browser: Debian's Chromium driven by Playwright, against `pgqw api` and a real
`pgqw worker` (both subprocesses) on this test's database.

  1. the form: a bad field is named; the example listing goes through; the status updates live
     until "succeeded"; the PDF link answers application/pdf
  2. the jobs table: counts per status, the status filter, keyset pages (next, first); the error of a
     dead job in red, the earlier attempt's error of a succeeded job muted and labelled as such
  3. the dead-letter view: a job forced dead by the real stored functions shows its payload, last
     error and every attempt; Retry moves it back to pending, and the worker then runs it
  4. the console (the page's own view at /): the running worker alive and a stopped one gone, the
     queues with their depth and the last hour's throughput, Pause shows a queue paused; the task
     types; a job found by its id prefix and cancelled with its row's button; a schedule paused with
     its button (when the server has GET /api/schedules)
  5. mounted in another Flask app (DispatcherMiddleware at /queue, a real WSGI server): the tiles and
     the jobs fill from the database, Pause and Retry work, the form makes a job, results link below
     the prefix, and the page asks for nothing outside it; a second mount without the demo's task
     module has no demo tab and links the result through /result
  6. row selection in the jobs view: the ticked rows stay ticked through a refresh that redraws them;
     Retry selected and Cancel selected change exactly those jobs and say how many of them changed

PGQW_UPDATE_SCREENSHOTS=1 also writes docs/images/page-form.png, page-dead-letter.png, console.png and
console-jobs.png.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server

from pgqw import db
from pgqw.app import close_pool, create_app
from pgqw.app.serialize import iso
from tests.api import states
from tests.api.live import ROOT, Process, run_worker, serve_api
from tests.helpers import LISTING

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
WORKER_ENV = {"SIM_MIN_LATENCY_MS": "100", "SIM_MAX_LATENCY_MS": "200", "SIM_FAILURE_RATE": "0",
              "WORKER_QUEUES": "default", "POLL_INTERVAL_MS": "200"}
DOCS_IMAGES = ROOT / "docs" / "images"
TIMEOUT_MS = 30_000


def force_dead(conn: psycopg.Connection, title: str, errors: tuple[str, ...]) -> db.Job:
    """A job killed by the real stored functions: each error one attempt by its own worker, the last
    one not retryable. Done before the worker starts, which would otherwise claim the job first."""
    job = db.enqueue_job(conn, type="listing_flyer", payload={**LISTING, "title": title},
                         idempotency_key=f"dead-{uuid.uuid4()}", max_attempts=len(errors))
    for n, error in enumerate(errors, start=1):
        claimed = db.claim_job(conn, worker_id=f"render-worker-{n}", queues=["default"])
        assert claimed is not None and claimed.id == job.id
        job = db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error=error,
                             retryable=n < len(errors), base_ms=0, max_jitter_ms=0)
    assert job.status == "dead"
    return job


def succeed_on_second_attempt(conn: psycopg.Connection, title: str, error: str) -> db.Job:
    """A job whose first attempt failed with error and whose second succeeded, on a queue of its own
    (the worker does not serve it). Its lastError is the first attempt's."""
    job = db.enqueue_job(conn, type="listing_flyer", payload={**LISTING, "title": title},
                         idempotency_key=f"earlier-{uuid.uuid4()}", queue="earlier")
    claimed = db.claim_job(conn, worker_id="render-worker-1", queues=["earlier"])
    assert claimed is not None and claimed.id == job.id
    db.mark_failed(conn, job_id=job.id, lease_token=claimed.lease_token, error=error, retryable=True,
                   base_ms=0, max_jitter_ms=0)
    claimed = db.claim_job(conn, worker_id="render-worker-2", queues=["earlier"])
    assert claimed is not None and claimed.id == job.id
    job = db.mark_succeeded(conn, job_id=job.id, lease_token=claimed.lease_token)
    assert (job.status, job.last_error) == ("succeeded", error)
    return job


@pytest.fixture
def system(db_url: str, conn: psycopg.Connection, request: pytest.FixtureRequest) -> Iterator[tuple[str, Process]]:
    with serve_api(db_url) as url, run_worker(db_url, WORKER_ENV) as worker:
        worker.wait_for(r"worker started")
        try:
            yield url, worker
        finally:
            report = getattr(request.node, "rep_call", None)
            if report is not None and report.failed:
                print(f"----- worker log -----\n{worker.output()[-6000:]}")


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page
            assert errors == [], f"JavaScript errors on the page: {errors}"
        finally:
            browser.close()


def dead_color(page) -> str:  # type: ignore[no-untyped-def]
    """The computed colour of an error shown as one (class error-text)."""
    return page.evaluate("""() => {
        const probe = document.createElement("span");
        probe.className = "error-text";
        document.body.append(probe);
        const color = getComputedStyle(probe).color;
        probe.remove();
        return color;
    }""")


def screenshot(page, tmp_path: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("PGQW_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS_IMAGES / name)


def test_browser_form_jobs_table_dead_letter_retry_and_console(
    db_url: str, conn: psycopg.Connection, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    dead = force_dead(conn, "Duplex with BQ in Lekki Phase 1",
                      ("renderer timed out after 30 s", "font cache locked by another process",
                       "listing photo could not be fetched (HTTP 404)"))
    earlier = succeed_on_second_attempt(conn, "Bungalow in Ikeja GRA", "renderer crashed")
    # Filler jobs on a queue the worker does not serve: they stay pending, so the table has two pages.
    fillers = [db.enqueue_job(conn, type="listing_flyer", payload={**LISTING, "title": f"Filler listing {n + 1}"},
                              idempotency_key=f"filler-{n}", queue="filler") for n in range(16)]
    # A worker that ran earlier and stopped: the console shows it gone.
    db.register_worker(conn, worker_id="render-worker-old", task_types=["listing_flyer"], queues=["default"],
                       hostname="old-box", pid=101)
    db.stop_worker(conn, worker_id="render-worker-old")

    url, _worker = request.getfixturevalue("system")
    page = request.getfixturevalue("browser_page")
    page.goto(url + "/#make")  # the demo's form; the console is the page's own view at /

    # 1. The form. A bad field first: the API names it, the page shows it next to the field.
    expect(page.get_by_test_id("input-title")).to_have_value("3-bedroom apartment in Yaba")
    expect(page.get_by_test_id("price-preview")).to_have_text("₦2,700,000")
    page.get_by_test_id("input-title").fill("")
    page.get_by_test_id("input-priceMinor").fill("-5")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-title")).to_have_text("Title must not be blank.")
    expect(page.get_by_test_id("error-priceMinor")).to_have_text("Price must not be negative.")
    expect(page.get_by_test_id("error-address")).to_be_hidden()

    page.get_by_test_id("input-title").fill("3-bedroom apartment in Yaba")
    page.get_by_test_id("input-priceMinor").fill("270000000")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("error-title")).to_be_hidden()
    status = page.get_by_test_id("job-status")
    expect(status).to_have_text(re.compile("pending|processing|succeeded"))
    expect(status).to_have_text("succeeded")
    link = page.get_by_test_id("pdf-link")
    expect(link).to_be_visible()
    job_id = page.get_by_test_id("job-id").inner_text()
    assert link.get_attribute("href") == f"{url}/api/jobs/{job_id}/flyer"  # below the page's own root
    screenshot(page, tmp_path, "page-form.png")

    with page.context.expect_event("response", lambda r: r.url.endswith("/flyer")) as opened:
        link.click()
    response = opened.value
    assert response.status == 200
    assert response.headers["content-type"] == "application/pdf"
    assert response.headers["content-disposition"] == f'inline; filename="flyer-{job_id}.pdf"'
    pdf = page.request.get(f"{url}/api/jobs/{job_id}/flyer")
    assert pdf.body().startswith(b"%PDF-")
    for extra in page.context.pages[1:]:
        extra.close()

    # 2. The jobs table: counts per status, the filter, and keyset pages.
    page.get_by_test_id("nav-jobs").click()
    expect(page.get_by_test_id("count-dead")).to_have_text("1")
    expect(page.get_by_test_id("count-pending")).to_have_text("16")
    expect(page.get_by_test_id("count-succeeded")).to_have_text("2")
    page.get_by_test_id("filter-pending").click()
    rows = page.locator('[data-testid="jobs-table"] tbody tr')
    expect(rows).to_have_count(15)
    expect(page.get_by_test_id("page-next")).to_be_enabled()
    page.get_by_test_id("page-next").click()
    expect(page.get_by_test_id("page-label")).to_have_text("Page 2")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Filler listing 1")  # the oldest, last of newest-first
    expect(page.get_by_test_id("page-next")).to_be_disabled()
    page.get_by_test_id("page-first").click()
    expect(page.get_by_test_id("page-label")).to_have_text("Page 1")
    expect(rows.first).to_contain_text("Filler listing 16")
    page.get_by_test_id("filter-dead").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Duplex with BQ in Lekki Phase 1")
    dead_error = rows.first.get_by_test_id("job-row-error")
    expect(dead_error).to_have_text("listing photo could not be fetched (HTTP 404)")
    expect(dead_error).to_have_class(re.compile(r"\berror-text\b"))
    # A job that succeeded on its second attempt: the first attempt's error is history, muted and
    # labelled so, never shown in red as the error of a succeeded job.
    page.get_by_test_id("filter-succeeded").click()
    expect(rows).to_have_count(2)
    row = page.locator(f'[data-testid="jobs-table"] tbody tr[data-job-id="{earlier.id}"]')
    expect(row).to_contain_text("succeeded")
    error = row.get_by_test_id("job-row-error")
    expect(error).to_have_text("earlier attempt failed: renderer crashed")
    expect(error).not_to_have_class(re.compile(r"\berror-text\b"))
    assert error.evaluate("e => getComputedStyle(e).color") != dead_color(page)

    # 3. The dead-letter view: payload, last error, every attempt; then Retry.
    page.get_by_test_id("nav-dead").click()
    card = page.locator(f'[data-testid="dead-job"][data-job-id="{dead.id}"]')
    expect(card).to_be_visible()
    expect(card.get_by_test_id("dead-job-status")).to_have_text("dead")
    expect(card.get_by_test_id("dead-last-error")).to_have_text("listing photo could not be fetched (HTTP 404)")
    expect(card.get_by_test_id("dead-payload")).to_contain_text('"title": "Duplex with BQ in Lekki Phase 1"')
    attempts = card.locator('[data-testid="attempts-table"] tbody tr')
    expect(attempts).to_have_count(3)
    expect(attempts.nth(0)).to_contain_text("render-worker-1")
    expect(attempts.nth(0)).to_contain_text("renderer timed out after 30 s")
    expect(attempts.nth(2)).to_contain_text("failed")
    expect(page.get_by_test_id("nav-dead-count")).to_have_text("1")
    screenshot(page, tmp_path, "page-dead-letter.png")

    card.get_by_test_id("retry").click()
    expect(card.get_by_test_id("dead-job-status")).to_have_text(re.compile("pending|processing|succeeded"))
    expect(card.get_by_test_id("retry-note")).to_contain_text(re.compile("Back to pending|Now|Succeeded"))
    assert db.get_job(conn, job_id=dead.id).status in ("pending", "processing", "succeeded")
    # The worker takes it from there (failure rate 0): it succeeds, and the card says so.
    expect(card.get_by_test_id("dead-job-status")).to_have_text("succeeded")
    expect(card.get_by_test_id("retry-note")).to_contain_text("Succeeded on retry")
    expect(card.get_by_test_id("dead-last-error-box")).to_have_class(re.compile(r"\bearlier\b"))
    expect(card.get_by_test_id("dead-last-error-box")).to_contain_text("Earlier attempt failed")
    attempts_after = db.get_attempts(conn, job_id=dead.id)
    assert [a.outcome for a in attempts_after] == ["failed", "failed", "failed", "succeeded"]

    # 4. The console: workers, queues, task types, schedules; then a job found and cancelled.
    schedule = make_schedule(conn, url)
    conn.execute("update task_types set timeout_ms = 90000 where name = 'listing_flyer'")  # a DBA's
    page.get_by_test_id("nav-console").click()
    workers = page.locator('[data-testid="worker-row"]')
    expect(workers.filter(has_text="render-worker-old").get_by_test_id("worker-state")).to_have_text("gone")
    expect(workers.first.get_by_test_id("worker-state")).to_have_text("alive")  # the running worker, first
    expect(workers.first).to_contain_text("listing_flyer")
    filler = page.locator('[data-testid="queue-row"][data-queue="filler"]')
    expect(filler).to_contain_text("16")  # waiting
    expect(filler.get_by_test_id("queue-state")).to_have_text("active")
    expect(filler.get_by_test_id("queue-unserved")).to_be_visible()  # the worker takes only "default"
    default = page.locator('[data-testid="queue-row"][data-queue="default"]')
    expect(default.locator("svg.spark rect.spark-ok").first).to_be_attached()  # the flyers made above
    flyer_type = page.locator('[data-testid="type-row"][data-task-type="listing_flyer"]')
    expect(flyer_type.get_by_test_id("type-limits")).to_contain_text("timeout 1 min 30 s")
    filler.get_by_test_id("queue-pause").click()
    expect(filler.get_by_test_id("queue-state")).to_have_text("paused")
    expect(filler.get_by_test_id("queue-resume")).to_be_visible()
    assert {q.name: q.paused for q in db.list_queues(conn)}["filler"] is True
    if schedule is not None:
        row = page.locator(f'[data-testid="schedule-row"][data-schedule="{schedule}"]')
        expect(row.get_by_test_id("schedule-state")).to_have_text("active")
        row.get_by_test_id("schedule-pause").click()
        expect(row.get_by_test_id("schedule-state")).to_have_text("paused")
    else:
        expect(page.get_by_test_id("schedules-empty")).to_have_text("No schedules.")
    screenshot(page, tmp_path, "console.png")

    target = fillers[5]
    page.get_by_test_id("nav-jobs").click()
    page.get_by_test_id("filter-all").click()
    page.get_by_test_id("search-id").fill(str(target.id)[:8])
    page.get_by_test_id("search-queue").fill("filler")
    page.get_by_test_id("search-submit").click()
    row = page.locator(f'[data-testid="jobs-table"] tbody tr[data-job-id="{target.id}"]')
    expect(rows).to_have_count(1)
    expect(row).to_contain_text("Filler listing 6")
    screenshot(page, tmp_path, "console-jobs.png")
    # A refresh that finds the same jobs keeps the rows: the button stays where the user aims.
    kept = row.element_handle()
    refreshes = page.locator("#jobs-rows").get_attribute("data-refreshes")
    expect(page.locator("#jobs-rows")).not_to_have_attribute("data-refreshes", refreshes)  # the next refresh
    assert kept.evaluate("node => node.isConnected")
    row.get_by_test_id("row-cancel").click()
    expect(row.locator(".badge")).to_have_text("cancelled")
    expect(row.get_by_test_id("row-cancel")).to_have_count(0)
    assert db.get_job(conn, job_id=target.id).status == "cancelled"
    page.get_by_test_id("search-id").fill("not-hex")
    page.get_by_test_id("search-submit").click()
    expect(page.get_by_test_id("search-error")).to_contain_text("Id must be the start of a job id")


def make_schedule(conn: psycopg.Connection, url: str) -> str | None:
    """A schedule, when this server has schedules (GET /api/schedules); None otherwise."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{url}/api/schedules", timeout=5).close()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    db.set_schedule(conn, name="nightly-flyers", task_type="listing_flyer", cron="0 3 * * *",
                    payload=dict(LISTING), queue="scheduled")
    return "nightly-flyers"


def test_browser_asks_for_the_token_then_works_with_it(
    db_url: str, conn: psycopg.Connection, request: pytest.FixtureRequest
) -> None:
    """With API_TOKENS set, the page's first /api call gets a 401: the page shows the token field;
    with the token entered, it makes a flyer and opens the PDF through an authenticated fetch."""
    from playwright.sync_api import expect

    token = "browser-token-0123456789abcdef"
    with serve_api(db_url, {"API_TOKENS": token}) as url, run_worker(db_url, WORKER_ENV) as worker:
        worker.wait_for(r"worker started")
        page = request.getfixturevalue("browser_page")
        page.goto(url + "/#make")
        bar = page.get_by_test_id("auth-bar")
        expect(bar).to_be_visible()
        page.get_by_test_id("submit").click()
        expect(page.get_by_test_id("form-error")).to_be_visible()  # refused: no token yet
        assert conn.execute("select count(*) from jobs").fetchone()[0] == 0

        page.get_by_test_id("api-token").fill(token)
        page.get_by_test_id("api-token-save").click()
        page.wait_for_load_state()
        expect(bar).to_be_hidden()
        page.get_by_test_id("submit").click()
        expect(page.get_by_test_id("job-status")).to_have_text("succeeded")
        with page.context.expect_page() as opened:
            page.get_by_test_id("pdf-link").click()
        pdf_page = opened.value
        assert pdf_page.url.startswith("blob:")  # fetched with the header, shown from memory
        assert conn.execute("select count(*) from job_results").fetchone()[0] == 1


@pytest.fixture
def mounted(db_url: str) -> Iterator[str]:
    """The user's own Flask app, with create_app() mounted at /queue and a second one, whose task
    modules do not include the demo's, at /bare; served by werkzeug's threaded WSGI server on a free
    port until the test ends. Yields the server's base URL."""
    console = create_app({"DATABASE_URL": db_url})
    bare = create_app({"DATABASE_URL": db_url, "TASK_MODULES": ("myapp.tasks",)})
    outer = Flask("users_app")

    @outer.get("/")
    def home() -> str:
        return "the user's own app"

    outer.wsgi_app = DispatcherMiddleware(outer.wsgi_app, {"/queue": console, "/bare": bare})  # type: ignore[method-assign]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = make_server("127.0.0.1", 0, outer, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="mounted-app", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()
        close_pool(console)
        close_pool(bare)


def test_browser_console_mounted_under_a_prefix_in_another_app(
    conn: psycopg.Connection, mounted: str, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    db.register_worker(conn, worker_id="mounted-worker", task_types=["listing_flyer"], queues=["mounted"])
    waiting = [states.pending(conn, queue="mounted", payload={**LISTING, "title": f"Waiting {n}"}) for n in range(3)]
    dead = states.dead(conn, errors=("renderer gave up",))
    done = states.succeeded(conn)
    page = request.getfixturevalue("browser_page")
    asked: list[str] = []
    refused: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    base = f"{mounted}/queue/"

    # The tiles and the queues fill from the database through /queue/api.
    page.goto(base)
    expect(page.get_by_test_id("sum-workers")).to_have_text("1")
    expect(page.get_by_test_id("sum-waiting")).to_have_text("3")
    expect(page.get_by_test_id("sum-dead")).to_have_text("1")
    expect(page.get_by_test_id("sum-hour")).to_have_text(re.compile(r"^\d+$"))
    row = page.locator('[data-testid="queue-row"][data-queue="mounted"]')
    expect(row).to_contain_text("3")
    expect(page.locator('[data-testid="type-row"][data-task-type="listing_flyer"]')).to_be_visible()
    row.get_by_test_id("queue-pause").click()
    expect(row.get_by_test_id("queue-state")).to_have_text("paused")
    assert {q.name: q.paused for q in db.list_queues(conn)}["mounted"] is True

    # The jobs list, its result link below the prefix, and Retry.
    page.get_by_test_id("nav-jobs").click()
    rows = page.locator('[data-testid="jobs-table"] tbody tr')
    expect(rows).to_have_count(5)
    expect(page.get_by_test_id("count-pending")).to_have_text("3")
    link = page.locator(f'tr[data-job-id="{done.id}"] a[target="_blank"]')
    expect(link).to_have_attribute("href", f"{base}api/jobs/{done.id}/result")  # resultUrl, every type's
    assert page.request.get(link.get_attribute("href")).body() == states.PDF
    page.locator(f'tr[data-job-id="{dead.id}"]').get_by_test_id("row-retry").click()
    expect(page.get_by_test_id("jobs-note")).to_contain_text(f"Retried {str(dead.id)[:8]}: now pending")
    assert db.get_job(conn, job_id=dead.id).status == "pending"
    page.locator(f'tr[data-job-id="{waiting[0].id}"]').get_by_test_id("row-cancel").click()
    expect(page.locator(f'tr[data-job-id="{waiting[0].id}"] .badge')).to_have_text("cancelled")

    # The demo's form posts below the prefix too.
    page.get_by_test_id("nav-make").click()
    with page.expect_response(lambda r: r.request.method == "POST") as posted:
        page.get_by_test_id("submit").click()
    assert (posted.value.url, posted.value.status) == (f"{base}api/jobs", 202)
    expect(page.get_by_test_id("job-status")).to_have_text("pending")

    asked_outside = [u for u in asked if not u.startswith(base)]
    assert asked_outside == [], f"the page asked outside its prefix: {asked_outside}"
    assert refused == [], f"requests the server refused: {refused}"

    # Mounted without the demo's task module: no demo tab; the result is linked through /result.
    bare = f"{mounted}/bare/"
    page.goto(bare + "#make")
    # #make is no view here: the console shows. Waiting: 3, one cancelled, the retried one, the new flyer.
    expect(page.get_by_test_id("sum-waiting")).to_have_text("4")
    expect(page.get_by_test_id("nav-make")).to_have_count(0)
    expect(page.get_by_test_id("flyer-form")).to_have_count(0)
    page.get_by_test_id("nav-jobs").click()
    link = page.locator(f'tr[data-job-id="{done.id}"] a[target="_blank"]')
    expect(link).to_have_attribute("href", f"{bare}api/jobs/{done.id}/result")
    assert page.request.get(link.get_attribute("href")).body() == states.PDF
    assert page.request.get(f"{bare}api/jobs/{done.id}/flyer").status == 404


def test_browser_job_page_shows_its_workflow_and_batch_and_the_jobs_view_acts_in_bulk(
    db_url: str, conn: psycopg.Connection, request: pytest.FixtureRequest
) -> None:
    """A blocked job's page: its workflow as a graph linking each job, its batch's progress; the workflow
    and batch pages; Cancel matching and Retry matching for the search on screen, with how many changed."""
    from playwright.sync_api import expect

    parent = states.pending(conn, queue="wf-q")
    child = db.enqueue_job(conn, type="noop", payload={}, idempotency_key="wf-child", queue="wf-q",
                           depends_on=[parent.id])
    batch = db.enqueue_batch(conn, jobs=[{"type": "noop", "payload": {}, "idempotency_key": f"b-{n}",
                                          "queue": "batch-q"} for n in range(2)], callback={"type": "noop"})
    dead = states.dead(conn)
    with serve_api(db_url) as url:
        page = request.getfixturevalue("browser_page")
        page.goto(url + f"/#job/{child.id}")
        expect(page.get_by_test_id("job-detail-status")).to_have_text("blocked")
        nodes = page.get_by_test_id("job-workflow").get_by_test_id("workflow-node")
        expect(nodes).to_have_count(2)
        expect(nodes.nth(1).get_by_test_id("workflow-node-status")).to_have_text("blocked")
        nodes.nth(0).get_by_test_id("workflow-node-link").click()
        expect(page.get_by_test_id("job-detail-id")).to_have_text(str(parent.id))
        expect(page.get_by_test_id("job-detail-status")).to_have_text("pending")
        expect(page.get_by_test_id("job-workflow")).to_be_visible()  # the root: the workflow is named after it
        expect(nodes.nth(0)).to_have_class(re.compile(r"\bcurrent\b"))

        page.goto(url + f"/#job/{batch[0].id}")
        expect(page.get_by_test_id("job-batch")).to_be_visible()
        expect(page.get_by_test_id("batch-done")).to_have_text("0 of 2 finished")
        page.goto(url + f"/#batch/{batch[0].batch_id}")
        expect(page.get_by_test_id("batch-progress").get_by_test_id("batch-done")).to_have_text("0 of 2 finished")
        page.goto(url + f"/#workflow/{parent.id}")
        expect(page.get_by_test_id("workflow-page-graph").get_by_test_id("workflow-node")).to_have_count(2)

        page.goto(url + "/#jobs")
        page.get_by_test_id("search-queue").fill("wf-q")
        page.get_by_test_id("search-submit").click()
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("bulk-cancel").click()
        expect(page.get_by_test_id("jobs-note")).to_have_text(re.compile(r"Cancelled [12] jobs?"))
        assert {db.get_job(conn, job_id=j).status for j in (parent.id, child.id)} == {"cancelled"}

        page.get_by_test_id("search-queue").fill(dead.queue)
        page.get_by_test_id("search-submit").click()
        page.get_by_test_id("filter-dead").click()
        expect(page.get_by_test_id("bulk-cancel")).to_be_disabled()  # a dead job is retried, not cancelled
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("bulk-retry").click()
        expect(page.get_by_test_id("jobs-note")).to_have_text("Retried 1 dead job.")
        assert db.get_job(conn, job_id=dead.id).status == "pending"


def test_browser_jobs_view_retries_and_cancels_the_selected_jobs(
    db_url: str, conn: psycopg.Connection, request: pytest.FixtureRequest
) -> None:
    """Row checkboxes: the selection survives a refresh that redraws the rows; Retry selected and Cancel
    selected call each job's own route and say how many of the selected changed (a job in the wrong
    state answers 409 and is counted, not changed); the jobs not selected stay as they were."""
    from playwright.sync_api import expect

    queue = f"sel-{uuid.uuid4().hex[:8]}"
    # Dead and succeeded ones first: making them claims from the queue, which must hold no ready job.
    dead = [states.dead(conn, queue=queue, payload={**LISTING, "title": f"Dead {n}"}) for n in range(3)]
    done = states.succeeded(conn, queue=queue, payload={**LISTING, "title": "Done"})
    waiting = [states.pending(conn, queue=queue, payload={**LISTING, "title": f"Waiting {n}"}) for n in range(3)]

    def status(job_id: uuid.UUID) -> str:
        return db.get_job(conn, job_id=job_id).status

    with serve_api(db_url) as url:  # no worker: the jobs stay where the test puts them
        page = request.getfixturevalue("browser_page")
        page.goto(url + "/#jobs")
        page.get_by_test_id("search-queue").fill(queue)
        page.get_by_test_id("search-submit").click()
        rows = page.locator('[data-testid="jobs-table"] tbody tr')
        expect(rows).to_have_count(7)
        retry, cancel = page.get_by_test_id("selected-retry"), page.get_by_test_id("selected-cancel")
        count = page.get_by_test_id("selected-count")
        expect(count).to_have_text("No job selected.")
        expect(retry).to_be_disabled()
        expect(cancel).to_be_disabled()

        def box(job_id: uuid.UUID):  # type: ignore[no-untyped-def]
            return page.locator(f'tr[data-job-id="{job_id}"]').get_by_test_id("row-select")

        # "Select every job shown" ticks every row, and unticks them.
        shown = page.get_by_test_id("select-shown")
        shown.check()
        expect(count).to_have_text("7 selected:")
        expect(page.locator('[data-testid="row-select"]:checked')).to_have_count(7)
        shown.uncheck()
        expect(page.locator('[data-testid="row-select"]:checked')).to_have_count(0)
        expect(retry).to_be_disabled()

        # Two dead jobs and a pending one.
        for job in (dead[0], dead[1], waiting[0]):
            box(job.id).check()
        expect(count).to_have_text("3 selected:")
        expect(retry).to_be_enabled()
        expect(cancel).to_be_enabled()
        expect(shown).to_have_js_property("indeterminate", True)

        # A new job changes the page: the refresh redraws every row, and the same ones are ticked again.
        first_row = rows.first.element_handle()
        extra = states.pending(conn, queue=queue, payload={**LISTING, "title": "Arrived later"})
        expect(rows).to_have_count(8)
        expect(rows.first).to_contain_text("Arrived later")
        assert not first_row.evaluate("node => node.isConnected")  # the rows were drawn again
        for job in (dead[0], dead[1], waiting[0]):
            expect(box(job.id)).to_be_checked()
        for job in (dead[2], done, waiting[1], waiting[2], extra):
            expect(box(job.id)).not_to_be_checked()
        expect(count).to_have_text("3 selected:")

        retry.click()
        expect(page.get_by_test_id("jobs-note")).to_have_text("Retried 2 of 3 selected; 1 was not dead.")
        assert [status(j.id) for j in dead] == ["pending", "pending", "dead"]
        assert status(waiting[0].id) == "pending"
        assert status(done.id) == "succeeded"
        # The selection was used: nothing is ticked, the buttons wait for the next one.
        expect(count).to_have_text("No job selected.")
        expect(page.locator('[data-testid="row-select"]:checked')).to_have_count(0)
        expect(retry).to_be_disabled()
        expect(page.locator(f'tr[data-job-id="{dead[0].id}"] .badge')).to_have_text("pending")

        # Two waiting jobs and a finished one.
        for job in (waiting[1], waiting[2], done):
            box(job.id).check()
        expect(count).to_have_text("3 selected:")
        cancel.click()
        expect(page.get_by_test_id("jobs-note")).to_have_text("Cancelled 2 of 3 selected; 1 had already finished.")
        assert [status(j.id) for j in waiting] == ["pending", "cancelled", "cancelled"]
        assert status(done.id) == "succeeded"
        assert [status(j.id) for j in dead] == ["pending", "pending", "dead"]
        assert status(extra.id) == "pending"
        expect(page.locator(f'tr[data-job-id="{waiting[1].id}"] .badge')).to_have_text("cancelled")
        expect(cancel).to_be_disabled()

        # A new search starts a new selection.
        box(dead[2].id).check()
        expect(count).to_have_text("1 selected:")
        page.get_by_test_id("filter-dead").click()
        expect(rows).to_have_count(1)
        expect(count).to_have_text("No job selected.")
        expect(box(dead[2].id)).not_to_be_checked()


def test_browser_shows_a_running_jobs_progress_and_deadline_and_finds_expired_jobs(
    db_url: str, conn: psycopg.Connection, request: pytest.FixtureRequest
) -> None:
    """What a handler reported with ctx.progress (written with a heartbeat under its lease token) in the
    jobs list and on the job's page, with when its attempt times out; an expired job under its filter."""
    from playwright.sync_api import expect

    queue = f"prog-{uuid.uuid4().hex[:8]}"
    late = states.pending(conn, queue=queue, expire_after_ms=1)
    conn.execute("select * from sweep_stuck_at(now() + interval '1 minute')")  # it expires unstarted
    assert db.get_job(conn, job_id=late.id).status == "expired"
    running = states.processing(conn, queue=queue, timeout_ms=600_000)
    db.heartbeat(conn, leases=[(running.id, running.lease_token)], progress=['{"done": 41}'])
    with serve_api(db_url) as url:
        page = request.getfixturevalue("browser_page")
        page.goto(url + "/#jobs")
        page.get_by_test_id("search-queue").fill(queue)
        page.get_by_test_id("search-submit").click()
        row = page.locator(f'[data-testid="jobs-table"] tbody tr[data-job-id="{running.id}"]')
        expect(row.get_by_test_id("job-row-progress")).to_have_text('progress: {"done":41}')
        page.get_by_test_id("filter-expired").click()
        rows = page.locator('[data-testid="jobs-table"] tbody tr')
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-job-id", str(late.id))
        page.goto(url + f"/#job/{running.id}")
        expect(page.get_by_text("Times out")).to_be_visible()
        assert running.deadline_at is not None
        expect(page.locator(f'time[datetime="{iso(running.deadline_at)}"]')).to_be_visible()
        expect(page.get_by_text('{"done":41}', exact=True)).to_be_visible()
