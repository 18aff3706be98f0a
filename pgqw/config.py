"""Every setting in one place: a default and the environment variable that changes it.

Queue rules (max attempts, backoff, lease) default to None here, meaning "use the row in the
queue_settings table", which a DBA can change without a deploy. Setting the environment variable
overrides the table for this process only, by passing the value as a stored-function argument.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload


class ConfigError(ValueError):
    """A setting has a value that cannot be used."""


@overload
def _int(name: str, default: int, *, minimum: int | None = None) -> int: ...
@overload
def _int(name: str, default: None, *, minimum: int | None = None) -> int | None: ...
def _int(name: str, default: int | None, *, minimum: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return value


def _float(name: str, default: float, *, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if raw.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be 1/0, true/false, yes/no or on/off, got {raw!r}")


def _choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name} must be {' or '.join(choices)}, got {raw!r}")
    return value


TOKEN_MIN_LENGTH = 16
LOG_FORMATS = ("text", "json")  # WORKER_LOG_FORMAT


def tokens(name: str, raw: str | None = None) -> tuple[str, ...]:
    """A comma-separated token list. Each token: at least 16 characters, no spaces or control
    characters. The error names the variable and which token (by position), never the token."""
    raw = os.environ.get(name, "") if raw is None else raw
    found = []
    for n, token in enumerate((t.strip() for t in raw.split(",")), start=1):
        if not token:
            continue
        if len(token) < TOKEN_MIN_LENGTH:
            raise ConfigError(f"{name}: token {n} is shorter than {TOKEN_MIN_LENGTH} characters; "
                              "use a long random one (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
        if any(c.isspace() or not c.isprintable() for c in token):
            raise ConfigError(f"{name}: token {n} contains spaces or control characters")
        found.append(token)
    return tuple(found)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Settings:
    # Where the database is. None: the embedded server `pgqw up` runs in PGQW_DATA_DIR.
    database_url: str | None = None
    # Every connection (API and worker; pgqw/connect.py). A value in the URL wins.
    db_connect_timeout_s: int = 5        # a connect that takes longer fails (0: libpq waits forever)
    tcp_user_timeout_ms: int = 5000      # sent data unacknowledged this long drops the connection (0: the OS's)
    # DATABASE_URL is PgBouncer in transaction mode: no server-side prepared statements, no session
    # options at connect (the roles' settings from `pgqw migrate` apply instead).
    pgbouncer: bool = False
    data_dir: Path = field(default_factory=lambda: Path.cwd() / ".pgdata")

    # Queue rules: None means the queue_settings table decides.
    max_attempts: int | None = None
    retry_base_delay_ms: int | None = None
    retry_max_jitter_ms: int | None = None
    retry_max_delay_ms: int | None = None
    lease_ms: int | None = None

    # Worker.
    worker_id: str = field(default_factory=default_worker_id)
    concurrency: int = 5
    poll_interval_ms: int = 1000
    sweep_interval_ms: int = 10000
    heartbeat_interval_ms: int | None = None  # None: a third of the lease
    shutdown_grace_ms: int = 10000
    listen: bool = True
    # The LISTEN connection's URL (None: DATABASE_URL). Behind PgBouncer: the server, directly.
    listen_url: str | None = None
    # The worker's sessions: a transaction left idle this long is ended by the server (0: off).
    worker_idle_in_transaction_timeout_ms: int = 5000
    queues: tuple[str, ...] | None = None
    # The modules whose @task definitions this worker runs (--tasks, PGQW_TASKS; comma-separated).
    task_modules: tuple[str, ...] = ("pgqw.demo",)
    batch_claim: bool = True
    batch_mark: bool = True
    # The per-job `start` and `success` log lines (WORKER_LOG_JOBS=0: off; failures and the rest stay).
    log_jobs: bool = True
    # The worker's lines: `text` (HH:MM:SS.mmmZ [id] event details) or `json` (one object a line).
    log_format: str = "text"
    # Retention (worker/pruner.py): every PRUNE_INTERVAL_MS a worker deletes one batch of finished jobs
    # (with their attempts and results) past the database's retention (queue_settings.prune_succeeded_after,
    # prune_finished_after). PRUNE=0 turns it off.
    prune: bool = True
    prune_interval_ms: int = 60_000
    prune_batch: int = 1000
    # Periodic jobs (worker/scheduler.py): every worker enqueues the due slots of the schedules table
    # (each slot once, whoever does it). SCHEDULER=0 turns it off in this worker.
    scheduler: bool = True

    # Simulated faults of the demo work.
    sim_min_latency_ms: int = 2000
    sim_max_latency_ms: int = 4000
    sim_failure_rate: float = 0.2

    # API.
    port: int = 3000
    public_url: str | None = None
    max_body_bytes: int = 64 * 1024
    api_threads: int = 8
    api_processes: int = 1
    # The server cancels an API statement after this; a request whose database work (all of it) has
    # not answered 1 s later gets its connection cut and a 503 (a frozen server). 0: no limit.
    api_statement_timeout_ms: int = 5000
    # A request that cannot get a pooled connection within this answers 503.
    api_pool_timeout_ms: int = 1500
    # Bearer tokens (app/auth.py): full access, and read-only. Empty: the API is open (loopback only).
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    api_read_tokens: tuple[str, ...] = field(default=(), repr=False)
    # Without tokens, the Host and Origin names a request may carry beside loopback and PUBLIC_URL's
    # (app/auth.py): comma-separated `name` (any port) or `name:port`.
    api_allowed_hosts: tuple[str, ...] = ()
    # /metrics: how long one queue_stats() answer is served to scrapes (0: every scrape runs it), and
    # bearer tokens a scrape must present (empty: /metrics is open).
    metrics_cache_ms: int = 5000
    metrics_tokens: tuple[str, ...] = field(default=(), repr=False)

    # migrate: create the pgqw_api / pgqw_worker / pgqw_admin roles (off where a managed database
    # forbids CREATE ROLE; grants then go to whichever of them a DBA made).
    create_roles: bool = True


def load() -> Settings:
    """Reads the settings from the environment. Raises ConfigError naming the bad variable."""
    from pgqw import schema

    try:
        schema.name()  # PGQW_SCHEMA: checked here, so every command refuses a bad one at start
    except schema.SchemaNameError as exc:
        raise ConfigError(str(exc)) from None
    queues_raw = os.environ.get("WORKER_QUEUES", "").strip()
    s = Settings(
        database_url=os.environ.get("DATABASE_URL") or None,
        db_connect_timeout_s=_int("DB_CONNECT_TIMEOUT_S", 5, minimum=0),
        tcp_user_timeout_ms=_int("TCP_USER_TIMEOUT_MS", 5000, minimum=0),
        pgbouncer=_bool("PGQW_PGBOUNCER", False),
        data_dir=Path(os.environ.get("PGQW_DATA_DIR") or Path.cwd() / ".pgdata").absolute(),
        max_attempts=_int("MAX_ATTEMPTS", None, minimum=1),
        retry_base_delay_ms=_int("RETRY_BASE_DELAY_MS", None, minimum=0),
        retry_max_jitter_ms=_int("RETRY_MAX_JITTER_MS", None, minimum=0),
        retry_max_delay_ms=_int("RETRY_MAX_DELAY_MS", None, minimum=0),
        lease_ms=_int("STUCK_JOB_TIMEOUT_MS", None, minimum=1),
        worker_id=os.environ.get("WORKER_ID") or default_worker_id(),
        concurrency=_int("WORKER_CONCURRENCY", 5, minimum=1),
        poll_interval_ms=_int("POLL_INTERVAL_MS", 1000, minimum=1),
        sweep_interval_ms=_int("SWEEP_INTERVAL_MS", 10000, minimum=1),
        heartbeat_interval_ms=_int("HEARTBEAT_INTERVAL_MS", None, minimum=1),
        shutdown_grace_ms=_int("SHUTDOWN_GRACE_MS", 10000, minimum=0),
        listen=_bool("WORKER_LISTEN", True),
        listen_url=os.environ.get("WORKER_LISTEN_URL") or None,
        worker_idle_in_transaction_timeout_ms=_int("WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS", 5000, minimum=0),
        queues=tuple(q.strip() for q in queues_raw.split(",") if q.strip()) or None,
        task_modules=tuple(m.strip() for m in os.environ.get("PGQW_TASKS", "").split(",") if m.strip())
        or ("pgqw.demo",),
        batch_claim=_bool("WORKER_BATCH_CLAIM", True),
        batch_mark=_bool("WORKER_BATCH_MARK", True),
        log_jobs=_bool("WORKER_LOG_JOBS", True),
        log_format=_choice("WORKER_LOG_FORMAT", "text", LOG_FORMATS),
        prune=_bool("PRUNE", True),
        prune_interval_ms=_int("PRUNE_INTERVAL_MS", 60_000, minimum=1),
        prune_batch=_int("PRUNE_BATCH", 1000, minimum=1),
        scheduler=_bool("SCHEDULER", True),
        sim_min_latency_ms=_int("SIM_MIN_LATENCY_MS", 2000, minimum=0),
        sim_max_latency_ms=_int("SIM_MAX_LATENCY_MS", 4000, minimum=0),
        sim_failure_rate=_float("SIM_FAILURE_RATE", 0.2, low=0.0, high=1.0),
        port=_int("PORT", 3000, minimum=0),
        public_url=os.environ.get("PUBLIC_URL") or None,
        max_body_bytes=_int("MAX_BODY_BYTES", 64 * 1024, minimum=1),
        api_threads=_int("API_THREADS", 8, minimum=1),
        api_processes=_int("API_PROCESSES", 1, minimum=1),
        api_statement_timeout_ms=_int("API_STATEMENT_TIMEOUT_MS", 5000, minimum=0),
        api_pool_timeout_ms=_int("API_POOL_TIMEOUT_MS", 1500, minimum=1),
        api_tokens=tokens("API_TOKENS"),
        api_read_tokens=tokens("API_READ_TOKENS"),
        api_allowed_hosts=tuple(h.strip() for h in os.environ.get("API_ALLOWED_HOSTS", "").split(",") if h.strip()),
        metrics_cache_ms=_int("METRICS_CACHE_MS", 5000, minimum=0),
        metrics_tokens=tokens("METRICS_TOKEN"),
        create_roles=_bool("PGQW_CREATE_ROLES", True),
    )
    if s.prune_batch > 100_000:
        raise ConfigError(f"PRUNE_BATCH must be at most 100000, got {s.prune_batch}")
    if s.sim_max_latency_ms < s.sim_min_latency_ms:
        raise ConfigError(
            f"SIM_MAX_LATENCY_MS ({s.sim_max_latency_ms}) must not be below "
            f"SIM_MIN_LATENCY_MS ({s.sim_min_latency_ms})"
        )
    return s


def public_base_url(settings: Settings) -> str:
    """The base URL people and QR codes use to reach the API."""
    return (settings.public_url or f"http://127.0.0.1:{settings.port}").rstrip("/")


def flyer_url(settings: Settings, job_id: object) -> str:
    return f"{public_base_url(settings)}/api/jobs/{job_id}/flyer"
