-- 0008_queues: a row per queue an operator has set something on: paused (claims skip it; enqueues still
-- land in it) and max_running (at most that many of its jobs processing at once, across all workers).
-- A queue with no row is running and unlimited. Written only by pause_queue, resume_queue and
-- set_queue_limit; claim_jobs_at reads it.
create table queues (
    name             text not null,
    paused           boolean not null default false,
    -- null: no limit.
    max_running      integer,
    -- Reserved for a rate limit (jobs started per second); null: none. Not enforced yet.
    jobs_per_second  numeric,
    updated_at       timestamptz not null default now(),
    constraint queues_pkey primary key (name),
    constraint queues_name_length check (length(name) between 1 and 100),
    constraint queues_max_running_positive check (max_running >= 1),
    constraint queues_jobs_per_second_positive check (jobs_per_second > 0)
);
