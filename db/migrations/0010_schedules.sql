-- 0010_schedules: periodic jobs. A schedule enqueues one job of its task type at each slot of its cron
-- expression (read in UTC). Written only by set_schedule, pause_schedule, resume_schedule,
-- delete_schedule (a DBA, the CLI, the API), register_schedules (a worker, from the code's definitions)
-- and enqueue_schedule_slots (a worker's scheduler). Each slot's job has the idempotency key
-- `schedule:<name>@<slot, UTC>`, so jobs_idempotency_key_key makes every slot enqueue at most once,
-- however many schedulers run at the same time.
create table schedules (
    name         text not null,
    -- A registered type: set_schedule and register_schedules refuse any other (QT422).
    task_type    text not null,
    -- Five fields or a macro, checked by check_schedule_cron; stored with single spaces.
    cron         text not null,
    payload      jsonb not null default '{}'::jsonb,
    -- null: the task type's (then 'default' and 0), as for enqueue_job.
    queue        text,
    priority     integer,
    -- After a stop, which of the missed slots are enqueued: the latest only, all (up to 100 per call),
    -- or none (only a slot at most a minute late).
    catch_up     text not null default 'latest',
    -- A paused schedule enqueues nothing; its slots that pass meanwhile are skipped, not caught up.
    paused       boolean not null default false,
    -- The latest slot a job was enqueued for (null: none yet).
    last_slot    timestamptz,
    -- No slot at or before this is ever enqueued: now() when the schedule is made, when its cron
    -- changes and when it is resumed, and moved past every slot a call skipped.
    slots_after  timestamptz not null default now(),
    -- Who defines it: 'code' (register_schedules rewrites it at every worker start) or 'sql' (a
    -- DBA's set_schedule, which a registration never touches).
    source       text not null default 'sql',
    created_at   timestamptz not null default now(),
    updated_at   timestamptz not null default now(),
    constraint schedules_pkey primary key (name),
    -- A name goes into a URL path and an idempotency key: letters, digits and _ . : - only.
    constraint schedules_name_charset check (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$'),
    -- Task types are never deleted by the functions; the key stops a hand-made delete that would
    -- leave a schedule enqueueing jobs of a type nobody defines.
    constraint schedules_task_type_fkey foreign key (task_type) references task_types (name),
    constraint schedules_cron_length check (length(cron) between 1 and 200),
    constraint schedules_payload_is_object check (jsonb_typeof(payload) = 'object'),
    constraint schedules_queue_length check (length(queue) between 1 and 100 and queue ~ '\S'),
    constraint schedules_catch_up_check check (catch_up in ('latest', 'all', 'none')),
    constraint schedules_source_check check (source in ('code', 'sql'))
);
