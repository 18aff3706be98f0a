"""The worker: a thin loop around the stored functions. It holds no queue logic of its own.

Threads, not asyncio (the handlers are blocking code):
  main       claims only when a slot is free (claim_jobs(limit=free) in one round trip, or claim_job
             one at a time), hands each job to an executor, sweeps at start and every SWEEP_INTERVAL_MS,
             and waits for a wake-up: a NOTIFY, a freed slot, the poll interval or a signal.
  executors  `concurrency` daemon threads; each runs a handler, then records the result with
             mark_succeeded / mark_failed in a new transaction (the claim committed long before).
  heartbeat  extends the lease of every job still running, every HEARTBEAT_INTERVAL_MS.
  listener   one dedicated autocommit connection that LISTENs (WORKER_LISTEN) and wakes main.

Every database call is one statement in autocommit mode (no session state, so PgBouncer in
transaction mode works with WORKER_LISTEN=0). A connection error is logged and retried with a
capped backoff; it never ends the process and never costs a job an attempt.
"""
from __future__ import annotations

import dataclasses

import logging
import os
import queue
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, TextIO, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolClosed

from pgqw import db
from pgqw.config import Settings
from pgqw.listing import InvalidPayload
from pgqw.worker.handlers import Context, Handler, PermanentError, TransientError, registry

T = TypeVar("T")

TABLE_LEASE_MS = 60000          # queue_settings.lease_ms as migrated; used only for the heartbeat default
TCP_USER_TIMEOUT_MS = 5000      # unacknowledged data older than this drops the connection (libpq)
CONNECT_TIMEOUT_S = 5           # a new connection that takes longer fails and is retried
POOL_TIMEOUT_S = 5.0            # wait for a pooled connection before logging and retrying
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
RELEASE_DEADLINE_S = 5.0        # how long shutdown keeps trying to hand a job back
MARK_DRAIN_S = 5.0              # how long shutdown waits for results being recorded
MARK_BATCH_MAX = 500            # most successes one mark_jobs_succeeded records (WORKER_BATCH_MARK)
LISTEN_TIMEOUT_S = 1.0          # the listener checks for shutdown this often


class WorkerExiting(Exception):
    """The process is exiting: stop retrying."""


def is_transient(exc: BaseException) -> bool:
    """A database error worth retrying on another connection: connection lost, server shutting
    down or starting, too many connections, pool timeout, serialization failure or deadlock."""
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state.startswith(("08", "53", "57P")) or state in ("40001", "40P01")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(exc: BaseException) -> str:
    """The error text recorded for a failed attempt."""
    if isinstance(exc, (PermanentError, TransientError)):
        return str(exc) or type(exc).__name__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def clock(at: datetime | None = None) -> str:
    """16:43:07.167Z"""
    at = (at or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}Z"


def short(job_id: uuid.UUID | str) -> str:
    return str(job_id)[:8]


class Backoff:
    """0.1 s, 0.2 s, 0.4 s … capped at 5 s; reset after a success."""

    def __init__(self, first: float = BACKOFF_FIRST_S, cap: float = BACKOFF_MAX_S) -> None:
        self.first, self.cap, self.n = first, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2 ** min(self.n, 20))
        self.n += 1
        return delay

    def reset(self) -> None:
        self.n = 0


class Log:
    """One line per event on stdout, flushed: `16:43:07.167Z [w1] start   ba1b4d28 …`."""

    def __init__(self, worker_id: str, out: TextIO | None = None) -> None:
        self.worker_id = worker_id
        self.out = out or sys.stdout
        self._lock = threading.RLock()  # reentrant: a signal handler may log while main holds it

    def __call__(self, event: str, text: str = "") -> None:
        line = f"{clock()} [{self.worker_id}] {event:<7} {text}".rstrip()
        with self._lock:
            try:
                self.out.write(line + "\n")
                self.out.flush()
            except (OSError, ValueError):
                pass  # stdout closed: keep working, the database has the record


@dataclass
class Running:
    job: db.Job
    started: float                  # time.monotonic() at claim
    state: str = "running"          # running → marking (result being recorded) | releasing (shutdown)
    lost: bool = False              # a heartbeat found the lease gone: the result will be ignored
    recorded: bool = False          # the handler's ctx.finish committed the success with its output

    def tag(self) -> str:
        return f"{short(self.job.id)} attempt {self.job.attempts}/{self.job.max_attempts}"


def heartbeat_interval_ms(settings: Settings) -> int:
    """HEARTBEAT_INTERVAL_MS, else a third of the lease (STUCK_JOB_TIMEOUT_MS, or the table's lease,
    which the worker reads at start; the migrated 60 s only before that)."""
    if settings.heartbeat_interval_ms is not None:
        return settings.heartbeat_interval_ms
    return max(1, (settings.lease_ms or TABLE_LEASE_MS) // 3)


def describe_database(conninfo: str) -> str:
    """host:port/dbname (or dbname via socket DIR), without the password."""
    try:
        parts = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "?"
    host, port, name = str(parts.get("host") or ""), parts.get("port"), parts.get("dbname", "")
    if not host or host.startswith("/"):
        return f"{name} via socket {host or 'default'}"
    return f"{host}{':' + str(port) if port else ''}/{name}"


class Worker:
    """One worker process. run() returns the exit code (0 after a clean stop)."""

    def __init__(
        self,
        settings: Settings,
        conninfo: str,
        *,
        handlers: Mapping[str, Handler] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.settings = settings
        self.conninfo = conninfo
        self.id = settings.worker_id
        self.cap = settings.concurrency
        self.handlers = dict(handlers) if handlers is not None else registry()
        self.log = Log(self.id, out)
        self.heartbeat_s = heartbeat_interval_ms(settings) / 1000.0

        self._lock = threading.Lock()
        self._slot_freed = threading.Condition(self._lock)
        self._running: dict[uuid.UUID, Running] = {}
        self._peak = 0
        self.counts: Counter[str] = Counter()

        self._wake = threading.Event()       # main loop: claim now
        self._stopping = threading.Event()   # first signal: no more claims
        self._exiting = threading.Event()    # shutdown done: background threads stop retrying
        self._signal_name = ""
        self._signalled = False
        self._tasks: queue.Queue[Running] = queue.Queue()
        self._done: queue.Queue[tuple[Running, str | None, float]] = queue.Queue()
        self._pool: ConnectionPool | None = None
        self._listen_conn: psycopg.Connection | None = None

    # ----------------------------------------------------------------------------- lifecycle

    def run(self) -> int:
        self._install_signal_handlers()
        self._route_pool_log()
        self._open()
        # The lease and the first sweep come before anything starts, and any error ends startup:
        # a database without the queue (not migrated) is reported, not retried forever.
        try:
            self._adopt_table_lease()
            self._log_started()
            self._sweep_once()
        except BaseException:
            self._close()
            if self._listen_conn is not None:  # no listener thread yet to close it
                self._listen_conn.close()
            raise
        self._start_thread("heartbeat", self._heartbeat_loop)
        if self.settings.batch_mark:
            self._start_thread("completer", self._completer_loop)
        if self.settings.listen:
            self._start_thread("listener", self._listen_loop)
        for n in range(self.cap):
            self._start_thread(f"exec-{n + 1}", self._executor_loop)
        try:
            self._main_loop()
        finally:
            code = self._shutdown()
        return code

    def stop(self, signame: str = "stop requested") -> None:
        """Begins a graceful stop (what the first SIGTERM/SIGINT does)."""
        self._signal_name = self._signal_name or signame
        self._stopping.set()
        self._wake.set()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum: int, frame: Any) -> None:
            name = signal.Signals(signum).name
            if self._signalled or self._stopping.is_set():
                # Second signal: leave at once. Jobs still held are recovered by a sweep once
                # their lease expires. Minimal work here: no locks the interrupted code may hold.
                line = f"{clock()} [{self.id}] exit    second {name}: exiting now; running jobs are left to the sweep\n"
                try:
                    os.write(1, line.encode())
                finally:
                    os._exit(128 + signum)
            self._signalled = True  # a plain flag: the next signal sees it even before stop() ran
            # Event.set() takes a lock the interrupted main thread may hold: do it from a thread.
            threading.Thread(target=self.stop, args=(name,), name="pgqw-stop", daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _connect_kwargs(self, role: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": f"pgqw-worker {self.id} {role}"[:63],
            # Notice a silently dead TCP peer within ~25 s (ignored on Unix sockets).
            "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
        }
        # Keepalives do not cover a connection with data in flight: a statement sent into a network
        # partition waits for TCP's backed-off retransmissions (about 25 s, 51 s, 102 s… after it was
        # sent; tests/acceptance/test_partition.py measured a 24.6 s stall after a 30 s cut). Give up
        # on unacknowledged data after TCP_USER_TIMEOUT_MS instead, and on a connect after
        # CONNECT_TIMEOUT_S: the call fails, is logged as a db error and is retried on a new
        # connection. A value in DATABASE_URL wins.
        given = conninfo_to_dict(self.conninfo)
        if "tcp_user_timeout" not in given:
            kwargs["tcp_user_timeout"] = TCP_USER_TIMEOUT_MS
        if "connect_timeout" not in given:
            kwargs["connect_timeout"] = CONNECT_TIMEOUT_S
        if not self.settings.listen:
            # PgBouncer in transaction mode: no server-side prepared statements either.
            kwargs["prepare_threshold"] = None
        return kwargs

    def _route_pool_log(self) -> None:
        """psycopg_pool warns once per discarded connection; our own `db error` lines already say
        what happened, so only its errors are shown, in our format."""
        log = self.log

        class ToWorkerLog(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                log("db pool", record.getMessage())

        pool_logger = logging.getLogger("psycopg.pool")
        pool_logger.setLevel(logging.ERROR)
        pool_logger.propagate = False
        pool_logger.handlers[:] = [ToWorkerLog()]

    def _open(self) -> None:
        """Connects once directly (so an unreachable database fails with its own message), then
        opens the pool. Raises psycopg errors: startup problems are the caller's to report."""
        probe = psycopg.connect(self.conninfo, **self._connect_kwargs("listen"))
        try:
            if self.settings.listen:
                db.listen(probe)
                self._listen_conn = probe
            else:
                probe.close()
            pool = ConnectionPool(
                self.conninfo,
                min_size=min(2, self.cap + 2),
                max_size=self.cap + 3,   # one per executor, plus main loop, heartbeat and completer
                open=False,
                kwargs=self._connect_kwargs("pool"),
                timeout=POOL_TIMEOUT_S,
                # Give up a background reconnect after 5 s: the next request starts a fresh one
                # at once, instead of waiting out the pool's own ever-growing backoff.
                reconnect_timeout=5.0,
                name=f"pgqw-worker-{self.id}",
            )
            pool.open(wait=True, timeout=15)
            self._pool = pool
        except BaseException:
            probe.close()
            raise

    def _adopt_table_lease(self) -> None:
        """Without STUCK_JOB_TIMEOUT_MS, the lease is queue_settings.lease_ms as it is now: read once
        and then passed explicitly to every claim and heartbeat, so the heartbeat interval (a third
        of the lease) always matches the leases this worker holds. A DBA's change to the table
        reaches a worker when it restarts."""
        if self.settings.lease_ms is not None:
            return
        table = self._with_conn(db.get_queue_settings)
        self.settings = dataclasses.replace(self.settings, lease_ms=table.lease_ms)
        self.heartbeat_s = heartbeat_interval_ms(self.settings) / 1000.0

    def _log_started(self) -> None:
        s = self.settings
        lease = f"{s.lease_ms}ms" if s.lease_ms else "queue_settings"
        retry = (f"base {s.retry_base_delay_ms}ms" if s.retry_base_delay_ms is not None else "queue_settings")
        self.log(
            "worker started:",
            f"pid {os.getpid()}, concurrency {self.cap}, queues {','.join(s.queues) if s.queues else 'all'}, "
            f"listen {'on' if s.listen else 'off'}, batch claim {'on' if s.batch_claim else 'off'}, "
            f"batch mark {'on' if s.batch_mark else 'off'}, "
            f"poll {s.poll_interval_ms}ms, sweep {s.sweep_interval_ms}ms, "
            f"heartbeat {round(self.heartbeat_s * 1000)}ms, lease {lease}, retry {retry}, "
            f"grace {s.shutdown_grace_ms}ms, handlers {','.join(sorted(self.handlers))}, "
            f"sim latency {s.sim_min_latency_ms}-{s.sim_max_latency_ms}ms failure {s.sim_failure_rate:g}, "
            f"database {describe_database(self.conninfo)}",
        )
        lease_ms = s.lease_ms or TABLE_LEASE_MS
        if self.heartbeat_s * 1000 >= lease_ms:
            self.log("warning", f"heartbeat interval {round(self.heartbeat_s * 1000)}ms is not shorter than "
                                f"the lease ({lease_ms}ms): running jobs will be swept and run again")

    def _start_thread(self, name: str, target: Callable[[], None]) -> None:
        threading.Thread(target=target, name=f"pgqw-{name}", daemon=True).start()

    # ----------------------------------------------------------------------------- database calls

    def _db(
        self, op: str, fn: Callable[[psycopg.Connection], T], *, deadline: float | None = None
    ) -> T:
        """Runs fn on a pooled connection. Connection errors are logged and retried with backoff
        until fn returns, the deadline passes (the last error is raised) or the process exits
        (WorkerExiting). Any other error is raised at once."""
        backoff = Backoff()
        while True:
            if self._exiting.is_set() or self._pool is None:
                raise WorkerExiting()
            try:
                with self._pool.connection(timeout=POOL_TIMEOUT_S) as conn:
                    return fn(conn)
            except PoolClosed:
                raise WorkerExiting() from None
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if self._exiting.is_set():
                    raise WorkerExiting() from exc
                self._check_pool()
                delay = backoff.next()
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise
                self._db_error(op, exc, delay)
                if self._exiting.wait(delay):
                    raise WorkerExiting() from exc

    def _check_pool(self) -> None:
        """After a connection error, test every idle pooled connection and replace the broken
        ones, so the retry gets a live connection (a killed backend or a restarted server breaks
        them all at once). Cheaper than a check on every checkout, which costs a round trip per
        call and makes psycopg_pool sleep 1 s or more after a failed check."""
        if self._pool is not None and not self._exiting.is_set():
            try:
                self._pool.check()
            except Exception:
                pass

    def _db_error(self, op: str, exc: BaseException, delay: float) -> None:
        self.log("db error", f"{op}: {first_line(exc)}; reconnecting in {delay:.1f}s")

    # ----------------------------------------------------------------------------- main loop

    def _main_loop(self) -> None:
        s = self.settings
        poll_s = s.poll_interval_ms / 1000.0
        sweep_s = s.sweep_interval_ms / 1000.0
        next_sweep = time.monotonic() + sweep_s  # the first sweep ran in run()
        backoff = Backoff()
        while not self._stopping.is_set():
            op = "sweep"
            try:
                if time.monotonic() >= next_sweep:
                    self._sweep_once()
                    next_sweep = time.monotonic() + sweep_s
                op = "claim"
                # Clear before counting: a slot freed from here on sets the event again.
                self._wake.clear()
                if self._free_slots() > 0 and not self._stopping.is_set():
                    self._claim()
                backoff.reset()
            except Exception as exc:
                # Never leave the loop over a database problem: log it, back off, carry on.
                delay = backoff.next()
                if is_transient(exc):
                    self._check_pool()
                    self._db_error(op, exc, delay)
                else:
                    self.log("error", f"{op}: {describe(exc)}; retrying in {delay:.1f}s")
                self._stopping.wait(delay)
                continue
            self._wake.wait(max(0.0, min(poll_s, next_sweep - time.monotonic())))

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.counts[outcome] += 1

    def _free_slots(self) -> int:
        with self._lock:
            return self.cap - len(self._running)

    def _with_conn(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """One pooled connection, errors raised (the main loop does its own backoff)."""
        assert self._pool is not None
        with self._pool.connection(timeout=POOL_TIMEOUT_S) as conn:
            return fn(conn)

    def _claim(self) -> None:
        s = self.settings
        if s.batch_claim:
            free = self._free_slots()
            jobs = self._with_conn(lambda conn: db.claim_jobs(
                conn, worker_id=self.id, limit=free, queues=s.queues, lease_ms=s.lease_ms))
            for job in jobs:
                self._start(job)
            return
        while self._free_slots() > 0 and not self._stopping.is_set():
            job = self._with_conn(lambda conn: db.claim_job(
                conn, worker_id=self.id, queues=s.queues, lease_ms=s.lease_ms))
            if job is None:
                return
            self._start(job)

    def _start(self, job: db.Job) -> None:
        run = Running(job=job, started=time.monotonic())
        with self._lock:
            self._running[job.id] = run
            count = len(self._running)
            self._peak = max(self._peak, count)
            peak = self._peak
        self.log("start", f"{run.tag()}  (running {count}/{self.cap}, peak {peak})")
        self._tasks.put(run)

    def _sweep_once(self) -> None:
        swept = self._with_conn(db.sweep_stuck)
        for row in swept:
            self._count("swept")
            self.log(
                "swept",
                f"{short(row.job_id)} attempt {row.attempt} of worker {row.worker_id} "
                f"(lease expired {clock(row.lease_expired_at)}) → {row.status}",
            )

    # ----------------------------------------------------------------------------- executors

    def _executor_loop(self) -> None:
        while True:
            run = self._tasks.get()
            try:
                self._execute(run)
            except WorkerExiting:
                return
            except BaseException as exc:  # never lose an executor thread
                self.log("error", f"{run.tag()}: unexpected {describe(exc)}")
                self._release_slot(run)

    def _context(self, run: Running) -> Context:
        op = f"{run.job.type} {short(run.job.id)}"
        job = run.job

        def complete(store: Callable[[psycopg.Connection], Any]) -> Any:
            """The handler's output and the job's success in one transaction (see worker/handlers.py)."""
            def in_transaction(conn: psycopg.Connection) -> Any:
                with conn.transaction():
                    result = store(conn)
                    db.mark_succeeded(conn, job_id=job.id, worker_id=self.id, attempt=job.attempts)
                return result

            with self._lock:
                if run.state == "running":
                    run.state = "marking"
            result = self._db(f"{op} complete", in_transaction)
            run.recorded = True
            return result

        return Context(settings=self.settings, worker_id=self.id, db=lambda fn: self._db(op, fn),
                       complete=complete)

    def _execute(self, run: Running) -> None:
        job = run.job
        handler = self.handlers.get(job.type)
        note: str | None = None
        error: str | None = None
        retryable = True
        try:
            if handler is None:
                raise PermanentError(
                    f"unknown job type {job.type!r} (this worker handles {', '.join(sorted(self.handlers))})")
            note = handler(job, self._context(run))
        except WorkerExiting:
            raise
        except psycopg.Error as exc:
            if exc.sqlstate not in ("QL409", "QN404") or run.state != "marking":
                error = describe(exc)
            else:
                # ctx.finish was refused: this attempt no longer holds the job, and its output was
                # rolled back with the success. Or an earlier try of the same commit went through and
                # only its reply was lost: then the job is succeeded at this attempt.
                if self._recorded_before(run, exc, lambda after: after.status == "succeeded"):
                    self._logged_success(run, None, time.monotonic() - run.started)
                else:
                    self._result_not_recorded(run, exc)
                return
        except (PermanentError, InvalidPayload) as exc:
            error, retryable = describe(exc), False
        except Exception as exc:
            error = describe(exc)
        elapsed = time.monotonic() - run.started
        with self._lock:
            if run.state == "running":
                run.state = "marking"
        if error is None and run.recorded:
            self._logged_success(run, note, elapsed)
        elif error is None:
            self._record_success(run, note, elapsed)
        else:
            self._record_failure(run, error, retryable, elapsed)

    def _record_success(self, run: Running, note: str | None, elapsed: float) -> None:
        if self.settings.batch_mark:
            self._done.put((run, note, elapsed))  # the completer records it with others, then frees the slot
            return
        self._record_success_one(run, note, elapsed)

    def _completer_loop(self) -> None:
        """WORKER_BATCH_MARK: records the successes that finished since its last call, up to
        MARK_BATCH_MAX, with one mark_jobs_succeeded. As with mark_succeeded, a job's slot is freed
        only after its result is committed. A job the call did not change is no longer this
        attempt's (or an earlier try of this very call went through before its reply was lost):
        the one-job path finds out which and logs it."""
        while True:
            try:
                first = self._done.get(timeout=0.2)
            except queue.Empty:
                if self._exiting.is_set():
                    return
                continue
            batch = [first]
            while len(batch) < MARK_BATCH_MAX:
                try:
                    batch.append(self._done.get_nowait())
                except queue.Empty:
                    break
            try:
                changed = self._db(f"mark_jobs_succeeded ({len(batch)} jobs)", lambda conn: db.mark_jobs_succeeded(
                    conn, worker_id=self.id, done=[(r.job.id, r.job.attempts) for r, _, _ in batch]))
            except WorkerExiting:
                return
            except psycopg.Error as exc:
                self.log("error", f"mark_jobs_succeeded: {exc.sqlstate} {first_line(exc)}; recording one by one")
                changed = []
            held = {job.id for job in changed}
            for run, note, elapsed in batch:
                if run.job.id in held:
                    self._logged_success(run, note, elapsed)
                else:
                    try:
                        self._record_success_one(run, note, elapsed)
                    except WorkerExiting:
                        return

    def _logged_success(self, run: Running, note: str | None, elapsed: float) -> None:
        self._count("succeeded")
        count, peak = self._release_slot(run)
        self.log("success", f"{run.tag()} in {elapsed:.2f}s{': ' + note if note else ''}"
                            f"  (running {count}/{self.cap}, peak {peak})")

    def _record_success_one(self, run: Running, note: str | None, elapsed: float) -> None:
        job = run.job
        try:
            self._db(f"mark_succeeded {short(job.id)}", lambda conn: db.mark_succeeded(
                conn, job_id=job.id, worker_id=self.id, attempt=job.attempts))
        except psycopg.Error as exc:
            if not self._recorded_before(run, exc, lambda after: after.status == "succeeded"):
                self._result_not_recorded(run, exc)
                return
        self._logged_success(run, note, elapsed)

    def _record_failure(self, run: Running, error: str, retryable: bool, elapsed: float) -> None:
        job, s = run.job, self.settings
        try:
            after = self._db(f"mark_failed {short(job.id)}", lambda conn: db.mark_failed(
                conn, job_id=job.id, worker_id=self.id, attempt=job.attempts, error=error,
                retryable=retryable, base_ms=s.retry_base_delay_ms, max_jitter_ms=s.retry_max_jitter_ms,
                max_delay_ms=s.retry_max_delay_ms))
        except psycopg.Error as exc:
            found = self._recorded_before(run, exc, lambda after: after.status in ("failed", "dead")
                                          and after.last_error == error[:10000])
            if found is None:
                self._result_not_recorded(run, exc)
                return
            after = found
        count, peak = self._release_slot(run)
        tail = f"  (running {count}/{self.cap}, peak {peak})"
        if not retryable:
            self._count("dead")
            self.log("dead", f"{run.tag()} in {elapsed:.2f}s: {error} (permanent error, not retried){tail}")
        elif after.status == "dead":
            self._count("dead")
            self.log("failed", f"{run.tag()} in {elapsed:.2f}s: {error} → dead{tail}")
        else:
            self._count("failed")
            wait = (after.run_at - datetime.now(timezone.utc)).total_seconds()
            self.log("failed", f"{run.tag()} in {elapsed:.2f}s: {error}; next run {clock(after.run_at)} "
                               f"(in {max(0.0, wait):.1f}s){tail}")

    def _recorded_before(
        self, run: Running, exc: psycopg.Error, matches: Callable[[db.Job], bool]
    ) -> db.Job | None:
        """After QL409 from a mark: was it our own earlier try, whose commit went through but whose
        reply was lost with the connection? Only this attempt's holder can leave the job finished
        at this attempt number with this outcome, so a match means the result is recorded."""
        if exc.sqlstate != "QL409":
            return None
        try:
            after = self._db(f"get_job {short(run.job.id)}", lambda conn: db.get_job(conn, job_id=run.job.id),
                             deadline=time.monotonic() + RELEASE_DEADLINE_S)
        except psycopg.Error:
            return None
        if after is not None and after.attempts == run.job.attempts and after.locked_by is None and matches(after):
            return after
        return None

    def _result_not_recorded(self, run: Running, exc: psycopg.Error) -> None:
        count, peak = self._release_slot(run)
        tail = f"  (running {count}/{self.cap}, peak {peak})"
        if exc.sqlstate in ("QL409", "QN404"):
            self._count("ignored")
            self.log("ignored late result", f"{run.tag()}: {exc.diag.message_primary or first_line(exc)}{tail}")
        else:
            # A bug or an unexpected server error: the lease expires and a sweep recovers the job.
            self.log("error", f"{run.tag()}: result not recorded: {exc.sqlstate} {first_line(exc)}{tail}")

    def _release_slot(self, run: Running) -> tuple[int, int]:
        with self._lock:
            if self._running.get(run.job.id) is run:
                del self._running[run.job.id]
                self._slot_freed.notify_all()
            count, peak = len(self._running), self._peak
        self._wake.set()
        return count, peak

    # ----------------------------------------------------------------------------- heartbeat

    def _heartbeat_loop(self) -> None:
        backoff = Backoff()
        wait = self.heartbeat_s
        while not self._exiting.wait(wait):
            wait = self.heartbeat_s
            with self._lock:
                ids = [r.job.id for r in self._running.values() if r.state in ("running", "marking")]
            if not ids:
                continue
            try:
                leases = self._with_conn(lambda conn: db.heartbeat(
                    conn, worker_id=self.id, job_ids=ids, lease_ms=self.settings.lease_ms))
                backoff.reset()
            except PoolClosed:
                return
            except Exception as exc:
                if self._exiting.is_set():
                    return
                wait = min(backoff.next(), self.heartbeat_s)
                if is_transient(exc):
                    self._check_pool()
                    self._db_error("heartbeat", exc, wait)
                else:
                    self.log("error", f"heartbeat: {exc!r}")
                continue
            held = {lease.job_id for lease in leases}
            lost: list[Running] = []
            with self._lock:
                for job_id in ids:
                    run = self._running.get(job_id)
                    # A job being marked may have just finished: only a running one is lost.
                    if job_id not in held and run is not None and run.state == "running" and not run.lost:
                        run.lost = True
                        lost.append(run)
            for run in lost:
                self._count("lost")
                self.log("lost", f"{run.tag()}: no longer held by {self.id} (its lease expired and a sweep "
                                 "handed it on); its result will be ignored")

    # ----------------------------------------------------------------------------- listener

    def _listen_loop(self) -> None:
        backoff = Backoff()
        queues = set(self.settings.queues or ())
        conn = self._listen_conn
        while not self._exiting.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.conninfo, **self._connect_kwargs("listen"))
                    db.listen(conn)
                    self._listen_conn = conn
                    self.log("listen", "reconnected; claiming in case a notification was missed")
                    self._wake.set()
                for note in conn.notifies(timeout=LISTEN_TIMEOUT_S):
                    if not queues or note.payload == "*" or note.payload in queues:
                        self._wake.set()
                backoff.reset()
            except Exception as exc:
                if self._exiting.is_set():
                    break
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:
                        pass
                conn = None
                delay = backoff.next()
                self._db_error("listen", exc, delay)
                self._exiting.wait(delay)
        if conn is not None:
            conn.close()

    # ----------------------------------------------------------------------------- shutdown

    def _shutdown(self) -> int:
        grace_s = self.settings.shutdown_grace_ms / 1000.0
        with self._lock:
            waiting = len(self._running)
        self.log("stopping", f"({self._signal_name or 'main loop ended'}): no more claims; waiting up to "
                             f"{grace_s:.1f}s for {waiting} running job(s)")
        deadline = time.monotonic() + grace_s
        with self._slot_freed:
            while self._running and (left := deadline - time.monotonic()) > 0:
                self._slot_freed.wait(left)
            leftovers = [r for r in self._running.values() if r.state == "running"]
            for run in leftovers:
                run.state = "releasing"
        for run in leftovers:
            self._hand_back(run, grace_s)
        # Results already being recorded get a little longer (a connection may be reconnecting).
        deadline = time.monotonic() + MARK_DRAIN_S
        with self._slot_freed:
            while any(r.state == "marking" for r in self._running.values()) and (
                    left := deadline - time.monotonic()) > 0:
                self._slot_freed.wait(left)
        self._close()
        c = self.counts
        self.log("stopped", f"{c['succeeded']} succeeded, {c['failed']} failed, {c['dead']} dead, "
                            f"{c['handed back']} handed back, {c['swept']} swept, peak {self._peak}/{self.cap}")
        return 0

    def _close(self) -> None:
        self._exiting.set()  # the listener closes its connection within LISTEN_TIMEOUT_S
        if self._pool is not None:
            self._pool.close(timeout=2.0)

    def _hand_back(self, run: Running, grace_s: float) -> None:
        job = run.job
        reason = f"worker {self.id} shutting down"
        try:
            self._db(f"release_job {short(job.id)}", lambda conn: db.release_job(
                conn, job_id=job.id, worker_id=self.id, attempt=job.attempts, reason=reason),
                deadline=time.monotonic() + RELEASE_DEADLINE_S)
        except psycopg.Error as exc:
            count, _ = self._release_slot(run)
            if exc.sqlstate in ("QL409", "QN404"):
                self.log("not handed back", f"{run.tag()}: {exc.diag.message_primary or first_line(exc)}")
            else:
                self.log("not handed back", f"{run.tag()}: {first_line(exc)}; the sweep will recover it "
                                            "when its lease expires")
            return
        except WorkerExiting:
            return
        self._count("handed back")
        count, _ = self._release_slot(run)
        self.log("handed back", f"{run.tag()} (still running after the {grace_s:.1f}s grace; "
                                f"pending again for any worker)  (running {count}/{self.cap})")
