"""Enqueue jobs from your application, in your own transaction, on the connection you already have.

    from pgqw import client
    from myapp.tasks import send_welcome, Welcome

    with psycopg.connect(DATABASE_URL) as conn:          # one transaction
        conn.execute("insert into users ...")
        job = send_welcome.enqueue(conn, Welcome(email="a@example.com"), idempotency_key="welcome-42")
    # committed: the job is visible and a worker is woken; a rollback would have left no job

    done = client.wait(conn2, job.id, timeout=30)        # LISTEN-based, not a tight poll
    client.result(conn2, job.id)                         # the handler's return value

`conn` is any connection pgqw.connections accepts: psycopg 3, psycopg2, django.db.connection, a
SQLAlchemy Session or Connection (and for the *_async twins a psycopg AsyncConnection, an asyncpg
connection, a SQLAlchemy AsyncSession or AsyncConnection); the statements run in its current
transaction. Without a connection of your own, a Queue (below) binds a pool: `queue.enqueue(...)` and
`send_welcome.defer(...)` enqueue in a short transaction of their own.

A job of a type your code does not import can be enqueued by name: `client.enqueue(conn,
"send_welcome", {"email": ...})` (no payload check here). A type nobody registered is refused by
enqueue_job (pgqw.errors.UnknownTaskType, sqlstate QT422). Every call goes through the stored
functions (pgqw.db's statements); nothing here decides a job's state.

A call the database refuses with one of the project's SQLSTATEs raises pgqw.errors' class for it, a
PgqwError with `.sqlstate` and the driver's error as __cause__ (whichever driver the connection is on):
JobNotFound (QN404), JobStateConflict (QS409: cancel of a finished job, retry of one not dead),
UnknownQueue (QU404), UnknownTaskType (QT422), IdempotencyConflict (QI409), InvalidArgument (QV400),
and PgqwError itself for the rest (QV413, QI422, ...). Other database errors are the driver's own.

The connection's role needs EXECUTE on the functions it calls (enqueue_job(s), cancel_job, retry_dead,
pause_queue, resume_queue: the queue's owner, pgqw_api, pgqw_admin, or a role granted one of them),
SELECT on jobs, job_attempts and job_results to read, and EXECUTE on watch_job / unwatch_job to wait.

Jobs that wait for others: `depends_on=` (job ids or jobs) on any enqueue, `Enqueue(...).after(...)`
among the items of one call, and `workflow(a, b.after(a), ...).enqueue(conn)` (one workflow id for them
all; get_workflow reads the graph back). `enqueue_batch(conn, items, callback=Enqueue(...))` enqueues a
callback once every job of the batch is final (get_batch: its counts). `retry_dead_jobs` and
`cancel_jobs` act on every job matching filters, in bounded calls.

Every name is here; the parts: calls (on your connection, and what the async twins share), calls_async
(the *_async twins), options (EnqueueOptions, Enqueue and their checks, the enqueue statements), queue
(Queue) and orchestration (workflows, batches, the actions by filter). None of them imports pgqw.tasks:
a Task is what options.TaskLike describes (a name and `dump`), so pgqw.tasks can import the client for
Task.enqueue and Task.defer.
"""
from __future__ import annotations

from ..errors import JobNotFound, PgqwError
from ..results import File
from .calls import (
    FINAL,
    JobNotFinished,
    JobTimeout,
    attempts,
    cancel,
    enqueue,
    enqueue_many,
    get_job,
    pause,
    result,
    resume,
    retry,
    wait,
)
from .calls_async import (
    attempts_async,
    cancel_async,
    enqueue_async,
    enqueue_many_async,
    get_job_async,
    pause_async,
    result_async,
    resume_async,
    retry_async,
    wait_async,
)
from .options import Enqueue, EnqueueOptions, TaskLike
from .orchestration import (
    BatchSummary,
    EnqueuedBatch,
    EnqueuedWorkflow,
    Workflow,
    cancel_jobs,
    cancel_jobs_async,
    enqueue_batch,
    enqueue_batch_async,
    get_batch,
    get_batch_async,
    get_workflow,
    get_workflow_async,
    retry_dead_jobs,
    retry_dead_jobs_async,
    workflow,
)
from .queue import Queue

__all__ = [
    "FINAL", "BatchSummary", "Enqueue", "EnqueueOptions", "EnqueuedBatch", "EnqueuedWorkflow", "File",
    "JobNotFinished", "JobNotFound", "JobTimeout", "PgqwError", "Queue", "TaskLike", "Workflow", "attempts",
    "attempts_async", "cancel", "cancel_async", "cancel_jobs", "cancel_jobs_async", "enqueue", "enqueue_async",
    "enqueue_batch", "enqueue_batch_async", "enqueue_many", "enqueue_many_async", "get_batch", "get_batch_async",
    "get_job", "get_job_async", "get_workflow", "get_workflow_async", "pause", "pause_async", "result",
    "result_async", "resume", "resume_async", "retry", "retry_async", "retry_dead_jobs", "retry_dead_jobs_async",
    "wait", "wait_async", "workflow",
]
