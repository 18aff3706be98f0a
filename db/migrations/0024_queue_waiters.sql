-- 0024_queue_waiters: who waits for jobs, so that a producer notifies only when someone listens.
-- A commit that notifies takes PostgreSQL's notification lock, held until the commit has been written: the
-- commits of all notifying sessions of the server queue behind each other. queue_waiters holds a row per
-- (queue, worker) for a worker that found nothing to claim and waits for a notification (queue '*': every
-- queue), valid until `until` (the worker renews it well before, while it keeps waiting; a worker that died
-- stops counting then). enqueue_job(s), and the functions that put a job back to wait, notify only when a row
-- of the job's queue (or '*') is valid: while every worker is busy, producers commit without the lock.
-- The handshake that makes it exact (wait_for_jobs, waits_settled) is described in docs/worker.md.

create table queue_waiters (
    queue      text not null,
    worker_id  text not null,
    until      timestamptz not null,
    primary key (queue, worker_id)
);

create index queue_waiters_worker_idx on queue_waiters (worker_id);

-- register_worker takes p_waits_for_jobs (a new signature): a worker of an earlier release, which calls it
-- without, stays notified of every queue while it is alive.
drop function if exists register_worker(text, text[], text[], integer, text, integer, integer);
