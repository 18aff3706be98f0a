-- enqueue_job: adds one job (→ pending; notifies pgqw_jobs with the queue when it is ready now, else pgqw_jobs_at
-- with '<ms> <queue>', how far ahead its run_at is on the server's clock), or returns the job made before
-- with this idempotency key (the unique constraint decides between concurrent calls). Unset queue, priority and
-- max_attempts: the task type's (task_type_settings), then the defaults. Returns the job and created.
-- p_unique_for: the key is unique only for that window; the stored key is `<key>@<window start>` (UTC). That
-- form is reserved to windowed keys and to schedules' slots (`schedule:<name>@<slot>`): a key without p_unique_for
-- may end so only if it starts with `schedule:`, a key with it may not start so (QI422), so none of them meet.
-- A type nobody registered is refused (QT422) unless queue_settings.accept_unregistered_types is on.
-- Raises QV400 (bad argument), QI422 (a plain key in the windowed form), QT422 (unregistered type), QV413
-- (payload over max_payload_bytes), QI409 (the key was used for another job).
create or replace function enqueue_job(
    p_type             text,
    p_payload          jsonb,
    p_idempotency_key  text,
    p_queue            text default null,
    p_priority         integer default null,
    p_run_at           timestamptz default null,
    p_max_attempts     integer default null,
    p_unique_for       interval default null
) returns table (
    id uuid, type job_type, payload job_payload, status job_status, attempts integer, max_attempts job_max_attempts,
    last_error text, run_at timestamptz, created_at timestamptz, started_at timestamptz,
    finished_at timestamptz, locked_by job_worker_id, lease_expires_at timestamptz,
    idempotency_key job_idempotency_key, queue job_queue, priority integer, created boolean
)
language plpgsql
security definer
set search_path from current
-- Rows by key whatever the statistics say: a plan a session keeps from when a table was small (a fresh
-- database, a burst before autoanalyze) read the whole table on every later call. No JIT for the cost of
-- the disabled path (as in claim_jobs_at).
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_variable
declare
    v_max_payload_bytes integer;
    v_max_attempts integer;     -- the type's, else queue_settings'
    v_type_queue text;
    v_type_priority integer;
    v_queue text;
    v_priority integer;
    v_job jobs;
    v_created boolean;
    v_key text := p_idempotency_key;
    v_window_ms bigint;
    v_due_ms bigint;
    v_notified text;            -- pg_notify's answer (void, as text): nothing
    v_known boolean;            -- the type is registered, or queue_settings accepts unregistered ones
begin
    -- Unset queue, priority and max_attempts: the task type's (a DBA's value, else the code's), then
    -- the defaults (an unregistered type, where they are accepted, takes the defaults).
    select s.max_payload_bytes, coalesce(t.max_attempts, s.max_attempts), t.queue, t.priority,
           t.name is not null or s.accept_unregistered_types
      into v_max_payload_bytes, v_max_attempts, v_type_queue, v_type_priority, v_known
      from queue_settings s left join task_type_settings t on t.name = p_type;
    v_queue := coalesce(p_queue, v_type_queue, 'default');
    v_priority := coalesce(p_priority, v_type_priority, 0);
    if p_type is null or p_type !~ '\S' or length(p_type) > 100 then
        raise exception using errcode = 'QV400',
            message = 'type must be a non-empty text of at most 100 characters';
    end if;
    if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
        raise exception using errcode = 'QV400',
            message = format('payload must be a JSON object, got %s',
                             coalesce(jsonb_typeof(p_payload), 'null'));
    end if;
    if octet_length(p_payload::text) > v_max_payload_bytes then
        raise exception using errcode = 'QV413',
            message = format('payload is %s bytes, more than the limit of %s',
                             octet_length(p_payload::text), v_max_payload_bytes);
    end if;
    if p_idempotency_key is null or length(p_idempotency_key) not between 1 and 255
       or p_idempotency_key ~ '[^!-~]' then
        raise exception using errcode = 'QV400',
            message = 'idempotency key must be 1 to 255 visible ASCII characters (! to ~, no spaces)',
            detail = format('got %s characters', coalesce(length(p_idempotency_key)::text, 'null'));
    end if;
    if v_queue !~ '\S' or length(v_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters';
    end if;
    if p_max_attempts is not null and (p_max_attempts < 1 or p_max_attempts > 1000) then
        raise exception using errcode = 'QV400',
            message = format('max_attempts must be between 1 and 1000, got %s', p_max_attempts);
    end if;
    -- The same bounds as the HTTP API's (app/api.py) and enqueue_jobs': from the epoch to 366 days ahead.
    if p_run_at is not null
       and (p_run_at < timestamptz '1970-01-01 00:00:00+00' or p_run_at > now() + interval '366 days') then
        raise exception using errcode = 'QV400',
            message = 'run_at must be between 1970-01-01T00:00:00Z and a year (366 days) from now',
            detail = format('got %s', p_run_at);
    end if;

    -- Unique for a window: the key with the start of the window that holds the job's run_at (now when
    -- unset), windows counted from the epoch in UTC. Within a window it is one key, so the unique
    -- constraint still decides between concurrent calls; the next window's key is a new one.
    -- The stored form of a windowed key, `<key>@<window start>`, is also that of a schedule's slots
    -- (enqueue_schedule_slots: `schedule:<name>@<slot>`): a plain key in that form would be some window's
    -- key, and a windowed key starting with `schedule:` some slot's.
    if p_unique_for is null and p_idempotency_key !~ '^schedule:'
       and p_idempotency_key ~ '@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' then
        raise exception using errcode = 'QI422',
            message = format('idempotency key %L ends in @ and a window start, the stored form of a unique_for '
                             'key: without unique_for a key may not end like that', p_idempotency_key),
            hint = 'use another key, or give unique_for to make it unique within a window';
    end if;
    if p_unique_for is not null and p_idempotency_key ~ '^schedule:' then
        raise exception using errcode = 'QI422',
            message = format('idempotency key %L starts with schedule:, the form of a schedule''s slots: with '
                             'unique_for a key may not start like that', p_idempotency_key),
            hint = 'use another key';
    end if;
    if p_unique_for is not null then
        if p_unique_for < interval '1 millisecond' or p_unique_for > interval '366 days' then
            raise exception using errcode = 'QV400',
                message = 'unique_for must be between 1 millisecond and 366 days',
                detail = format('got %s', p_unique_for);
        end if;
        v_window_ms := floor(extract(epoch from p_unique_for) * 1000);
        v_key := p_idempotency_key || '@' || to_char(
            to_timestamp((floor(extract(epoch from coalesce(p_run_at, now())) * 1000 / v_window_ms) * v_window_ms)
                         / 1000.0) at time zone 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
        if length(v_key) > 255 then
            raise exception using errcode = 'QV400',
                message = 'idempotency key with unique_for must be at most 230 characters (the window start is added)',
                detail = format('got %s characters', length(p_idempotency_key));
        end if;
    end if;

    -- Every argument is well formed: is the type one somebody registered?
    if not v_known then
        raise exception using errcode = 'QT422',
            message = format('task type %L is not registered: register it with `pgqw tasks register --tasks '
                             '<module>` or `pgqw migrate --tasks <module>` (a worker that runs it registers it '
                             'at start too)', p_type),
            detail = (select coalesce('registered: ' || string_agg(t.name, ', ' order by t.name),
                                      'no type is registered')
                        from (select r.name from task_types r order by r.name limit 20) t),
            hint = 'to accept jobs of types not registered yet, a DBA sets '
                   'queue_settings.accept_unregistered_types = true';
    end if;

    loop
        insert into jobs as j (type, payload, max_attempts, idempotency_key, queue, priority, run_at)
        values (p_type, p_payload, coalesce(p_max_attempts, v_max_attempts),
                v_key, v_queue, v_priority, coalesce(p_run_at, now()))
        on conflict on constraint jobs_idempotency_key_key do nothing
        returning j.* into v_job;
        v_created := found;
        exit when v_created;
        -- The key exists (the insert waited for its inserter to commit). Read it back.
        select j.* into v_job from jobs j where j.idempotency_key = v_key;
        exit when found;
        -- It was deleted in between: try the insert again.
    end loop;

    -- The same request again returns the job. A queue or priority the request leaves unset is not
    -- compared: the job took the type's value when it was made, and a DBA or a new release may have
    -- changed the type's since, which does not make the repeated request a different one.
    if not v_created and (v_job.type <> p_type or v_job.payload <> p_payload
                          or (p_queue is not null and v_job.queue <> p_queue)
                          or (p_priority is not null and v_job.priority <> p_priority)) then
        raise exception using errcode = 'QI409',
            message = format('idempotency key %L was already used for a different job', v_key),
            detail = format('existing job %s has type %s in queue %s; the key may only be reused for the same job',
                            v_job.id, v_job.type, v_job.queue),
            hint = 'use a new idempotency key for a different request';
    end if;

    if v_created then
        -- Delivered at commit. How far ahead is measured now, as late as the function can: a transaction
        -- that stays open after this call makes the worker wake that much later (its poll still runs).
        v_due_ms := ceil(extract(epoch from v_job.run_at - clock_timestamp()) * 1000);
        -- An assignment, not perform: an expression alone is evaluated without starting an executor.
        if v_job.run_at <= now() or v_due_ms <= 0 then
            v_notified := pg_notify('pgqw_jobs', v_job.queue);
        else
            v_notified := pg_notify('pgqw_jobs_at', v_due_ms || ' ' || v_job.queue);
        end if;
    end if;

    return query select v_job.*, v_created;
end;
$$;
