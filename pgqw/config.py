"""Every setting in one place: each is declared once, as a field of Settings: its environment
variable, default, bounds and a line for the docs. load(), pgqw.launch's SETTINGS and the docs'
settings tables (docs/tools/make_settings_doc.py) are derived from that.

Every variable carries the PGQW_ prefix: a setting declared as HEARTBEAT_INTERVAL_MS is named
PGQW_HEARTBEAT_INTERVAL_MS, and the name as declared stays readable as a deprecated alias (env_names()).
A setting declared with the prefix (PGQW_SCHEMA, PGQW_TASKS, ...) has no alias. When both names are
set the prefixed one wins; a ConfigError names the variable that was read.

Queue rules (max attempts, backoff, lease) default to None here, meaning "use the row in the
queue_settings table", which a DBA can change without a deploy. Setting the environment variable
overrides the table for this process only, by passing the value as a stored-function argument.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A setting has a value that cannot be used."""


PREFIX = "PGQW_"


def env_names(declared: str) -> tuple[str, ...]:
    """The environment variables of the setting declared as `declared`, its own name first: PGQW_ +
    the declared name, then the declared name (a deprecated alias); a name declared with the prefix is
    its only one."""
    return (declared,) if declared.startswith(PREFIX) else (PREFIX + declared, declared)


def _int(name: str, default: int | None, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value}")
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


def _text(name: str, default: str | None) -> str | None:
    return os.environ.get(name) or default


def _names(name: str, default: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """A comma-separated list; empty (or only commas and spaces): the default."""
    return tuple(n.strip() for n in os.environ.get(name, "").split(",") if n.strip()) or default


def _path(name: str, default: Path) -> Path:
    return Path(os.environ.get(name) or default).absolute()


def _schema(name: str, default: None) -> None:
    """PGQW_SCHEMA is read by pgqw.schema wherever SQL is written; checked here, so every command
    refuses a bad one at start."""
    from pgqw import schema

    try:
        schema.name()
    except schema.SchemaNameError as exc:
        raise ConfigError(str(exc)) from None


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


def _tokens(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    return tokens(name) or default


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


# ----------------------------------------------------------------------------- the declaration

# The docs' tables a setting is listed in (docs/tools/make_settings_doc.py writes them).
OPERATING = "operating"    # docs/operating.md, Settings
RETENTION = "retention"    # docs/operating.md, Old jobs (retention)
WORKER = "worker"          # docs/worker.md, Settings
API = "api"                # docs/api.md, Authentication


@dataclass(frozen=True)
class Setting:
    """One setting: its environment variable (and aliases), how it is read, and what the docs say of it."""

    env: str                                  # its name, PGQW_...
    doc: str                                  # one line: what it sets
    read: Callable[[str, Any], Any]           # (env, default) -> the value; raises ConfigError
    shown: str | None = None                  # the docs' default, when the default itself says too little
    tables: tuple[str, ...] = (OPERATING,)    # the docs' tables that list it
    # A child process inherits it from its parent even without inherit_settings (pgqw.launch).
    inherited: bool = False
    field: str | None = None                  # the Settings field (None: read elsewhere)
    aliases: tuple[str, ...] = ()             # older names, still read when env is not set (deprecated)

    @property
    def names(self) -> tuple[str, ...]:
        """Every variable it is read from, in precedence order."""
        return (self.env, *self.aliases)

    def variable(self) -> str:
        """The variable it is read from now: the first of its names set (a blank one counts as unset,
        as it does for every setting), else its own name."""
        for name in self.names:
            raw = os.environ.get(name)
            if raw is not None and raw.strip():
                return name
        return self.env

    def value(self, default: Any = None) -> Any:
        """Its value from the environment (default when unset); ConfigError names the variable read."""
        return self.read(self.variable(), default)


def _setting(read: Callable[[str, Any], Any], name: str, default: Any = None, *, doc: str,
             shown: str | None = None, tables: tuple[str, ...] = (OPERATING,),
             factory: Callable[[], Any] | None = None, repr: bool = True) -> Any:
    """A field declaring one setting; `name` as declared (see env_names(): the variables it is read from)."""
    env, *aliases = env_names(name)
    meta = {"setting": Setting(env, doc, read, shown, tables, aliases=tuple(aliases))}
    if factory is not None:
        return field(default_factory=factory, metadata=meta, repr=repr)
    return field(default=default, metadata=meta, repr=repr)


def integer(name: str, default: int | None, *, minimum: int | None = None, maximum: int | None = None,
            **kw: Any) -> Any:
    return _setting(functools.partial(_int, minimum=minimum, maximum=maximum), name, default, **kw)


def number(name: str, default: float, *, low: float, high: float, **kw: Any) -> Any:
    return _setting(functools.partial(_float, low=low, high=high), name, default, **kw)


def flag(name: str, default: bool, **kw: Any) -> Any:
    return _setting(_bool, name, default, **kw)


def choice(name: str, default: str, choices: tuple[str, ...], **kw: Any) -> Any:
    return _setting(functools.partial(_choice, choices=choices), name, default, **kw)


def text(name: str, default: str | None = None, **kw: Any) -> Any:
    return _setting(_text, name, default, **kw)


def names(name: str, default: tuple[str, ...] | None, **kw: Any) -> Any:
    return _setting(_names, name, default, **kw)


# A field's name is written as declared: PGQW_ is put before it (see env_names()).
@dataclass(frozen=True)
class Settings:
    # Where the database is. None: the embedded server `pgqw up` runs in PGQW_DATA_DIR.
    database_url: str | None = text(
        "DATABASE_URL", shown="the embedded server `pgqw up` runs in `PGQW_DATA_DIR`", tables=(OPERATING, WORKER),
        doc="the database: a libpq URL or DSN")
    # Every connection (API and worker; pgqw/connect.py). A value in the URL wins.
    db_connect_timeout_s: int = integer(
        "DB_CONNECT_TIMEOUT_S", 5, minimum=0,
        doc="a connection (API or worker) that is not made within this fails; `0`: wait forever")
    tcp_user_timeout_ms: int = integer(
        "TCP_USER_TIMEOUT_MS", 5000, minimum=0,
        doc="sent data left unacknowledged this long drops the connection (a partition); `0`: the system's")
    # DATABASE_URL is PgBouncer in transaction mode: no server-side prepared statements, no session
    # options at connect (the roles' settings from `pgqw migrate` apply instead).
    pgbouncer: bool = flag(
        "PGQW_PGBOUNCER", False, doc="`1`: `PGQW_DATABASE_URL` is PgBouncer in transaction mode (see below)")
    data_dir: Path = _setting(
        _path, "PGQW_DATA_DIR", factory=lambda: Path.cwd() / ".pgdata", shown="`.pgdata` in the current folder",
        doc="where the embedded server keeps its data")

    # Queue rules: None means the queue_settings table decides.
    max_attempts: int | None = integer(
        "MAX_ATTEMPTS", None, minimum=1, shown="`queue_settings.max_attempts` (5)",
        doc="tries per job, copied into each job at enqueue (read by whoever enqueues, not by the worker)")
    retry_base_delay_ms: int | None = integer(
        "RETRY_BASE_DELAY_MS", None, minimum=0, shown="`queue_settings.backoff_base_ms` (2000)",
        tables=(OPERATING, WORKER), doc="backoff base: the wait after attempt n is base × 2^(n−1)")
    retry_max_jitter_ms: int | None = integer(
        "RETRY_MAX_JITTER_MS", None, minimum=0, shown="`queue_settings.backoff_max_jitter_ms` (1000)",
        tables=(OPERATING, WORKER), doc="plus a random 0 to this")
    retry_max_delay_ms: int | None = integer(
        "RETRY_MAX_DELAY_MS", None, minimum=0, shown="`queue_settings.backoff_max_delay_ms` (1 h)",
        tables=(OPERATING, WORKER), doc="the longest wait")
    lease_ms: int | None = integer(
        "STUCK_JOB_TIMEOUT_MS", None, minimum=1, shown="`queue_settings.lease_ms` (60000)", tables=(OPERATING, WORKER),
        doc="the lease a claim gives: a job not heartbeated for this long is swept. Each heartbeat renews the "
            "lease that job's claim granted; a DBA's change to the table applies to the next claim, and the first "
            "lease taken from the table is logged (`lease`)")

    # Worker.
    worker_id: str = _setting(
        _text, "WORKER_ID", factory=default_worker_id, shown="`<host>-<pid>`", tables=(WORKER,),
        doc="(`--id`) recorded in `locked_by` and `job_attempts.worker_id`, for people; 1–200 characters (what a "
            "worker may act for is decided by the lease tokens its claims return, not by its id)")
    concurrency: int = integer(
        "WORKER_CONCURRENCY", 5, minimum=1, tables=(WORKER,), doc="(`--concurrency`) jobs at once (the cap)")
    poll_interval_ms: int = integer(
        "POLL_INTERVAL_MS", 1000, minimum=1, tables=(WORKER,),
        doc="claim at least this often while the last claim found jobs, while the LISTEN connection is down, and "
            "always with `PGQW_WORKER_LISTEN=0` (then also jobs whose `run_at` or retry time comes due; with LISTEN "
            "they are woken for on time); a listening worker whose claim found nothing does not poll")
    sweep_interval_ms: int = integer(
        "SWEEP_INTERVAL_MS", 10000, minimum=1, tables=(WORKER,), doc="`sweep_stuck` this often (and at start)")
    heartbeat_interval_ms: int | None = integer(
        "HEARTBEAT_INTERVAL_MS", None, minimum=1, shown="a third of each job's lease", tables=(WORKER,),
        doc="how often leases are extended; must be well below the lease (a `warning` says otherwise, at start "
            "or when a claim grants a shorter lease)")
    shutdown_grace_ms: int = integer(
        "SHUTDOWN_GRACE_MS", 10000, minimum=0, tables=(WORKER,),
        doc="how long a stop waits for running jobs before handing them back")
    # Recycling (worker/recycle.py): a process past one of these stops claiming, finishes or hands back
    # what it holds and exits 0; `pgqw worker --processes N` replaces it at once. 0: no limit.
    max_jobs: int = integer(
        "WORKER_MAX_JOBS", 0, minimum=0, tables=(WORKER,), shown="`0` (no limit)",
        doc="a worker process that has run this many jobs makes way for a fresh one")
    max_memory_mb: int = integer(
        "WORKER_MAX_MEMORY_MB", 0, minimum=0, tables=(WORKER,), shown="`0` (no limit)",
        doc="a worker process whose resident memory passes this many MiB makes way for a fresh one")
    max_leaked: int = integer(
        "WORKER_MAX_LEAKED", 2, minimum=0, tables=(WORKER,),
        doc="a worker process with more handler threads than this still running past their deadline (a sync "
            "handler cannot be stopped) makes way for a fresh one")
    listen: bool = flag(
        "WORKER_LISTEN", True, tables=(WORKER,), doc="`LISTEN` for wake-ups; `0` for PgBouncer in transaction mode")
    # The LISTEN connection's URL (None: DATABASE_URL). Behind PgBouncer: the server, directly.
    listen_url: str | None = text(
        "WORKER_LISTEN_URL", shown="`PGQW_DATABASE_URL`", tables=(OPERATING, WORKER),
        doc="where the worker's LISTEN connection goes (behind PgBouncer: the server directly)")
    # The worker's sessions: a transaction left idle this long is ended by the server (0: off).
    worker_idle_in_transaction_timeout_ms: int = integer(
        "WORKER_IDLE_IN_TRANSACTION_TIMEOUT_MS", 5000, minimum=0,
        doc="the server ends a worker session left idle inside a transaction this long; `0`: off")
    queues: tuple[str, ...] | None = names(
        "WORKER_QUEUES", None, shown="all", tables=(WORKER,),
        doc="(`--queues`) comma-separated queues to take jobs from")
    # The modules whose @task definitions this worker runs (--tasks, PGQW_TASKS; comma-separated).
    task_modules: tuple[str, ...] = names(
        "PGQW_TASKS", ("pgqw.demo",), tables=(OPERATING, WORKER),
        doc="comma-separated task modules: what a worker runs, and what `pgqw migrate` and `pgqw tasks register` "
            "register (`--tasks`, which may repeat, takes precedence)")
    batch_claim: bool = flag(
        "WORKER_BATCH_CLAIM", True, tables=(WORKER,),
        doc="one `claim_jobs(limit)` per wake-up; `0`: `claim_job` per free slot")
    batch_mark: bool = flag(
        "WORKER_BATCH_MARK", True, tables=(WORKER,),
        doc="successes are recorded by the recorder thread, up to 500 per `mark_jobs_succeeded` call; `0`: one "
            "`mark_succeeded` per job. A file result (such as a PDF) is always recorded alone, with its own "
            "`mark_succeeded`")
    # The per-job `start` and `success` log lines (WORKER_LOG_JOBS=0: off; failures and the rest stay).
    log_jobs: bool = flag(
        "WORKER_LOG_JOBS", True, tables=(WORKER,),
        doc="the `start` and `success` line of every job; `0`: a worker logs only what needs a look (failures, "
            "dead jobs, sweeps, database errors, start and stop), which saves formatting two lines per job (see "
            "[benchmarks.md](benchmarks.md))")
    # The worker's lines: `text` (HH:MM:SS.mmmZ [id] event details) or `json` (one object a line).
    log_format: str = choice(
        "WORKER_LOG_FORMAT", "text", LOG_FORMATS, tables=(WORKER,),
        doc="`text`: the lines below ([Logs](#logs)); `json`: one JSON object per line, with the job's fields")
    # Retention (worker/maintenance/pruner.py): every PRUNE_INTERVAL_MS a worker deletes one batch of finished jobs
    # (with their attempts and results) past the database's retention (queue_settings.prune_succeeded_after,
    # prune_finished_after). PRUNE=0 turns it off.
    prune: bool = flag("PRUNE", True, tables=(RETENTION,), doc="`0`: this worker prunes nothing")
    prune_interval_ms: int = integer(
        "PRUNE_INTERVAL_MS", 60_000, minimum=1, tables=(RETENTION,),
        doc="how often a worker prunes (a full batch: again the next round)")
    prune_batch: int = integer(
        "PRUNE_BATCH", 1000, minimum=1, maximum=100_000, tables=(RETENTION,),
        doc="jobs per `prune_expired_jobs` call (one transaction), 1 to 100000")
    # Periodic jobs (worker/maintenance/scheduler.py): every worker enqueues the due slots of the schedules table
    # (each slot once, whoever does it). SCHEDULER=0 turns it off in this worker.
    scheduler: bool = flag(
        "SCHEDULER", True, tables=(WORKER,),
        doc="enqueue the due slots of the `schedules` table ([schedules.md](schedules.md)); `0`: this worker "
            "only registers its code's schedules at start")

    # API.
    port: int = integer(
        "PORT", 3000, minimum=0,
        doc="the API's port (`pgqw api --port` and `pgqw up --port` take precedence)")
    public_url: str | None = text(
        "PUBLIC_URL", shown="`http://127.0.0.1:$PGQW_PORT`",
        doc="the address people reach the API at: its host is answered without tokens (below), and links made "
            "for people (`pgqw up`'s banner, links in results) start with it")
    max_body_bytes: int = integer(
        "MAX_BODY_BYTES", 64 * 1024, minimum=1, doc="the largest request body the API accepts")
    api_threads: int = integer("API_THREADS", 8, minimum=1, doc="waitress threads, and the API's pool size")
    api_processes: int = integer(
        "API_PROCESSES", 1, minimum=1,
        doc="API server processes on the one port, each with `PGQW_API_THREADS` threads and its own pool "
            "(`pgqw api --processes`)")
    # The server cancels an API statement after this; a request whose database work (all of it) has
    # not answered 1 s later gets its connection cut and a 503 (a frozen server). 0: no limit.
    api_statement_timeout_ms: int = integer(
        "API_STATEMENT_TIMEOUT_MS", 5000, minimum=0,
        doc="the server cancels an API statement after this (503); a request's database work that has not "
            "answered 1 s later has its connection cut (503); `0`: no limit")
    # A request that cannot get a pooled connection within this answers 503.
    api_pool_timeout_ms: int = integer(
        "API_POOL_TIMEOUT_MS", 1500, minimum=1,
        doc="a request that cannot get a database connection within this answers 503")
    # Bearer tokens (app/auth.py): full access, and read-only. Empty: the API is open (loopback only).
    api_tokens: tuple[str, ...] = _setting(
        _tokens, "API_TOKENS", (), repr=False,
        doc="comma-separated bearer tokens (16+ characters each) that may do everything under `/api`")
    api_read_tokens: tuple[str, ...] = _setting(
        _tokens, "API_READ_TOKENS", (), repr=False,
        doc="comma-separated bearer tokens that may only read (`GET`)")
    # Without tokens, the Host and Origin names a request may carry beside loopback and PUBLIC_URL's
    # (app/auth.py): comma-separated `name` (any port) or `name:port`.
    api_allowed_hosts: tuple[str, ...] = names(
        "API_ALLOWED_HOSTS", (), tables=(API,),
        doc="without tokens: more host names the API answers to (docs/api.md)")
    # /metrics: how long one queue_stats() answer is served to scrapes (0: every scrape runs it), and
    # bearer tokens a scrape must present (empty: /metrics is open).
    metrics_cache_ms: int = integer(
        "METRICS_CACHE_MS", 5000, minimum=0, tables=(API,),
        doc="how long each API process serves one `queue_stats()` answer on `/metrics` (docs/api.md)")
    metrics_tokens: tuple[str, ...] = _setting(
        _tokens, "METRICS_TOKEN", (), repr=False, tables=(API,), doc="bearer tokens `/metrics` asks for (docs/api.md)")

    # migrate: create the pgqw_api / pgqw_worker / pgqw_admin roles (off where a managed database
    # forbids CREATE ROLE; grants then go to whichever of them a DBA made).
    create_roles: bool = flag(
        "PGQW_CREATE_ROLES", True,
        doc="`0`: `migrate` does not create the three roles (managed databases); grants still apply")


def _declared() -> tuple[Setting, ...]:
    found = [
        # Read by pgqw.schema wherever SQL is written, so not a field; every process of one queue must
        # be given the same one, so a child inherits it.
        Setting("PGQW_SCHEMA", "the schema that holds everything the queue makes (its tables, views, types, "
                "functions and the `migrations` ledger); every process of one queue (migrate, API, workers, the "
                "client in your application, the CLI) must be given the same", _schema, shown="`pgqw`",
                inherited=True),
    ]
    for f in dataclasses.fields(Settings):
        found.append(dataclasses.replace(f.metadata["setting"], field=f.name))
    return tuple(found)


SETTINGS: tuple[Setting, ...] = _declared()   # every setting, in declaration order


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def load() -> Settings:
    """Reads the settings from the environment. Raises ConfigError naming the bad variable."""
    defaults = {f.name: _default(f) for f in dataclasses.fields(Settings)}
    values = {}
    for setting in SETTINGS:
        value = setting.value(defaults.get(setting.field) if setting.field else None)
        if setting.field is not None:
            values[setting.field] = value
    return Settings(**values)


_UNSET: Any = object()


def by_field(field: str) -> Setting:
    """The setting of a Settings field."""
    found = next((s for s in SETTINGS if s.field == field), None)
    if found is None:
        raise KeyError(f"Settings has no field {field!r}")
    return found


def read(field: str, default: Any = _UNSET) -> Any:
    """One setting of Settings from the environment, the others unread (the field's default, or
    `default`, when it is unset): for code that needs one, such as the database's URL."""
    f = Settings.__dataclass_fields__[field]
    return by_field(field).value(_default(f) if default is _UNSET else default)


def declared(cls: Any) -> tuple[Setting, ...]:
    """The settings of a dataclass whose fields are declared as Settings' are (integer(), flag(), ...):
    how a task module declares its own (the demo's pgqw.demo.settings)."""
    return tuple(dataclasses.replace(f.metadata["setting"], field=f.name) for f in dataclasses.fields(cls))


def load_declared(cls: type[T]) -> T:
    """An instance of such a dataclass, each field read from its environment variable (ConfigError
    naming a bad one)."""
    found: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(cls)  # type: ignore[arg-type]
    return cls(**{f.name: f.metadata["setting"].value(_default(f)) for f in found})


def public_base_url(settings: Settings) -> str:
    """The base URL people and QR codes use to reach the API."""
    return (settings.public_url or f"http://127.0.0.1:{settings.port}").rstrip("/")
