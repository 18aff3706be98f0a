-- enqueue_job: adds one job (→ pending; when a worker waits for its queue (has_waiters), notifies pgqw_jobs with the
-- queue when it is ready now, else pgqw_jobs_at with '<ms> <queue>', how far ahead its run_at is on the server's
-- clock), or returns the job made before
-- with this idempotency key (the unique constraint decides between concurrent calls). Unset queue, priority and
-- max_attempts: the task type's (task_type_settings), then the defaults. p_timeout_ms: the job's own timeout, which wins
-- over its type's at each claim (null: the type's, if any). p_expires_at, or p_expire_after_ms from when it may start
-- (greatest(run_at, now())), else its type's expire_after_ms so: not started by then, it is never claimed and the
-- sweep ends it expired (null everywhere: never); an expiry not after that start is refused. Returns the job and created.
-- p_depends_on: the job is blocked until each of these jobs has succeeded (p_run_anyway: has ended, whatever its
-- end), then pending (judge_blocked); a parent already cancelled or expired cancels it at once. p_workflow_id:
-- the graph it belongs to (null: its first parent's, else that parent's id; none without parents); a parent in no
-- workflow joins it. p_serial_key:
-- it starts only once every earlier job of that key has finished, one at a time. p_concurrency_key: counted
-- against its queue's key_max_running (set_queue_key_limit).
-- p_unique_for: the key is unique only for that window; the stored key is `<key>@<window start>` (UTC). That
-- form is reserved to windowed keys and to schedules' slots (`schedule:<name>@<slot>`): a key without p_unique_for
-- may end so only if it starts with `schedule:`, a key with it may not start so (QI422), so none of them meet.
-- A type nobody registered is refused (QT422) unless queue_settings.accept_unregistered_types is on.
-- Raises QV400 (bad argument), QI422 (a plain key in the windowed form), QT422 (unregistered type), QV413
-- (payload over max_payload_bytes), QI409 (the key was used for another job), QW422 (a dependency that does not
-- exist; over 1000 of them).
create or replace function enqueue_job(
    p_type             text,
    p_payload          jsonb,
    p_idempotency_key  text,
    p_queue            text default null,
    p_priority         integer default null,
    p_run_at           timestamptz default null,
    p_max_attempts     integer default null,
    p_unique_for       interval default null,
    p_timeout_ms       integer default null,
    p_expires_at       timestamptz default null,
    p_expire_after_ms  integer default null,
    p_depends_on       uuid[] default null,
    p_run_anyway       boolean default false,
    p_serial_key       text default null,
    p_concurrency_key  text default null,
    p_workflow_id      uuid default null
) returns setof enqueued_job
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
    v_type_expire_ms integer;   -- the type's expire_after_ms
    v_expires_at timestamptz;
    v_parents uuid[];           -- p_depends_on without repeats
    v_missing uuid;
    v_workflow_id uuid := p_workflow_id;
    v_cancelled uuid[];
begin
    -- Unset queue, priority and max_attempts: the task type's (a DBA's value, else the code's), then
    -- the defaults (an unregistered type, where they are accepted, takes the defaults).
    select s.max_payload_bytes, coalesce(t.max_attempts, s.max_attempts), t.queue, t.priority,
           t.name is not null or s.accept_unregistered_types, t.expire_after_ms
      into v_max_payload_bytes, v_max_attempts, v_type_queue, v_type_priority, v_known, v_type_expire_ms
      from queue_settings s left join task_type_settings t on t.name = p_type;
    v_queue := coalesce(p_queue, v_type_queue, 'default');
    v_priority := coalesce(p_priority, v_type_priority, 0);
    if p_type is null or p_type !~ '\S' or length(p_type) > 100 then
        raise exception using errcode = 'QV400',
            message = 'type must be a non-empty text of at most 100 characters',
            column = 'type';
    end if;
    if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
        raise exception using errcode = 'QV400',
            message = format('payload must be a JSON object, got %s',
                             coalesce(jsonb_typeof(p_payload), 'null')),
            column = 'payload';
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
            detail = format('got %s characters', coalesce(length(p_idempotency_key)::text, 'null')),
            column = 'idempotency_key';
    end if;
    if v_queue !~ '\S' or length(v_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_max_attempts is not null and (p_max_attempts < 1 or p_max_attempts > 1000) then
        raise exception using errcode = 'QV400',
            message = format('max_attempts must be between 1 and 1000, got %s', p_max_attempts),
            column = 'max_attempts';
    end if;
    if p_timeout_ms < 1 then
        raise exception using errcode = 'QV400',
            message = format('timeout must be at least 1 ms (or null for the task type''s), got %s', p_timeout_ms),
            column = 'timeout_ms';
    end if;
    -- The same bounds as the HTTP API's (app/models/requests.py) and enqueue_jobs': from the epoch to 366 days ahead.
    if p_run_at is not null
       and (p_run_at < timestamptz '1970-01-01 00:00:00+00' or p_run_at > now() + interval '366 days') then
        raise exception using errcode = 'QV400',
            message = 'run_at must be between 1970-01-01T00:00:00Z and a year (366 days) from now',
            detail = format('got %s', p_run_at),
            column = 'run_at';
    end if;
    -- Expiry: counted from when the job may start, which it must come after (an expiry already past, or before
    -- the job may run, would make a job that can never run).
    if p_expires_at is not null and p_expire_after_ms is not null then
        raise exception using errcode = 'QV400', message = 'give expires_at or expire_after_ms, not both',
            column = 'expire_after_ms';
    end if;
    if p_expire_after_ms < 1 then
        raise exception using errcode = 'QV400',
            message = format('expire_after_ms must be at least 1 (or null for the task type''s), got %s', p_expire_after_ms),
            column = 'expire_after_ms';
    end if;
    if p_expires_at is not null
       and (not isfinite(p_expires_at) or p_expires_at <= greatest(now(), coalesce(p_run_at, now()))) then
        raise exception using errcode = 'QV400',
            message = 'expires_at must be later than now and than run_at',
            detail = format('got %s', p_expires_at),
            column = 'expires_at';
    end if;
    -- Dependencies and keys: one test when none is given (each statement of a function costs every call).
    if p_depends_on is not null or p_serial_key is not null or p_concurrency_key is not null
       or p_run_anyway is not false then
        if length(p_serial_key) not between 1 and 200 then
            raise exception using errcode = 'QV400', message = 'serial key must be 1 to 200 characters',
                column = 'serial_key';
        end if;
        if length(p_concurrency_key) not between 1 and 200 then
            raise exception using errcode = 'QV400', message = 'concurrency key must be 1 to 200 characters',
                column = 'concurrency_key';
        end if;
        if p_run_anyway is null then
            raise exception using errcode = 'QV400', message = 'run_anyway must not be null', column = 'run_anyway';
        end if;
        if cardinality(p_depends_on) > 0 then
            if array_position(p_depends_on, null) is not null then
                raise exception using errcode = 'QV400', message = 'depends_on must not hold a null job id',
                    column = 'depends_on';
            end if;
            v_parents := array(select distinct d from unnest(p_depends_on) as d);
            if cardinality(v_parents) > 1000 then
                raise exception using errcode = 'QW422',
                    message = format('a job may depend on at most 1000 jobs, got %s', cardinality(v_parents));
            end if;
        end if;
    end if;
    v_expires_at := coalesce(p_expires_at, greatest(now(), coalesce(p_run_at, now()))
                                           + make_interval(secs => coalesce(p_expire_after_ms, v_type_expire_ms) / 1000.0));

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
                detail = format('got %s', p_unique_for),
                column = 'unique_for';
        end if;
        v_window_ms := floor(extract(epoch from p_unique_for) * 1000);
        v_key := p_idempotency_key || '@' || to_char(
            to_timestamp((floor(extract(epoch from coalesce(p_run_at, now())) * 1000 / v_window_ms) * v_window_ms)
                         / 1000.0) at time zone 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
        if length(v_key) > 255 then
            raise exception using errcode = 'QV400',
                message = 'idempotency key with unique_for must be at most 230 characters (the window start is added)',
                detail = format('got %s characters', length(p_idempotency_key)),
                column = 'idempotency_key';
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

    if v_parents is not null then
        -- The parents are locked until this commits: a parent's end waits for the dependency to be seen, or
        -- this waits for the end and judge_blocked below sees it. (Not a share lock: a parent may be put in
        -- the workflow below, and two enqueues sharing a parent must not both hold it shared, then wait.)
        perform 1 from jobs p where p.id = any (v_parents) order by p.id for no key update;
        select m into v_missing from unnest(v_parents) as m
         where not exists (select 1 from jobs p where p.id = m) limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s, a dependency, does not exist', v_missing), column = 'depends_on';
        end if;
        if v_workflow_id is null then
            select coalesce(p.workflow_id, p.id) into v_workflow_id from jobs p where p.id = p_depends_on[1];
        end if;
    end if;

    loop
        insert into jobs as j (type, payload, max_attempts, idempotency_key, queue, priority, run_at, timeout_ms,
                               expires_at, status, workflow_id, serial_key, serial_seq, concurrency_key)
        values (p_type, p_payload, coalesce(p_max_attempts, v_max_attempts),
                v_key, v_queue, v_priority, coalesce(p_run_at, now()), p_timeout_ms, v_expires_at,
                case when v_parents is null then 'pending' else 'blocked' end, v_workflow_id, p_serial_key,
                case when p_serial_key is not null then nextval('job_serial_seq') end, p_concurrency_key)
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

    if v_created and v_parents is not null then
        -- Blocked until its parents release it: judged now, as a parent's end would (a parent already ended
        -- may release it, or cancel it at once); judge_blocked wakes a worker if it may run.
        insert into job_dependencies (job_id, parent_id, run_anyway)
        select v_job.id, d, p_run_anyway from unnest(v_parents) as d;
        -- A parent in no workflow joins this one: a job with dependents is always in a workflow, so the end
        -- of a job in none has nothing to settle.
        update jobs p set workflow_id = v_workflow_id where p.id = any (v_parents) and p.workflow_id is null;
        v_cancelled := judge_blocked(array[v_job.id]);
        select j.* into v_job from jobs j where j.id = v_job.id;
    elsif v_created and has_waiters(v_job.queue) then
        -- Only when a worker waits for the queue (has_waiters): a busy worker claims again before it waits.
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

    return query select v_job, v_created;
end;
$$;
