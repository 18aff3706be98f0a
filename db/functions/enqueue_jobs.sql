-- enqueue_jobs: enqueue_job for a JSON array of {type, payload, idempotency_key[, queue, priority, run_at or delay_ms,
-- max_attempts, unique_for_ms]} in one insert (→ pending), one notification per queue: pgqw_jobs with the queue for
-- jobs ready now, pgqw_jobs_at with '<ms> <queue>' for the earliest later one ('<ms>+ <queue>' when others of that
-- queue come due later still). Returns one row per element,
-- in order. unique_for_ms: as enqueue_job's p_unique_for (the stored key is `<key>@<window start>`, a form a key
-- without unique_for_ms may take only if it starts with `schedule:`, and a key with it may not: QI422).
-- A type nobody registered is refused (QT422) unless queue_settings.accept_unregistered_types is on.
-- Raises QV400 (not an array, a bad element, a key twice in the batch), QI422, QT422, QV413 (payload too large),
-- QI409.
create or replace function enqueue_jobs(
    p_jobs  jsonb
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
    v_settings queue_settings;
    v_types text[];
    v_payloads jsonb[];
    v_keys text[];
    v_queues text[];
    v_priorities integer[];
    v_run_ats timestamptz[];
    v_max_attempts integer[];
    v_registered boolean[];
    v_new jobs[];
    v_bad record;
    v_queue text;
    v_later record;
    v_due_ms bigint;
begin
    select * into v_settings from queue_settings;
    if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' then
        raise exception using errcode = 'QV400', message = 'jobs must be a JSON array of job objects';
    end if;
    if jsonb_array_length(p_jobs) > 10000 then
        raise exception using errcode = 'QV400',
            message = format('at most 10000 jobs per call, got %s', jsonb_array_length(p_jobs));
    end if;
    select e.n, jsonb_typeof(e.elem) as kind into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where jsonb_typeof(e.elem) <> 'object' order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('job %s must be a JSON object, got %s', v_bad.n, v_bad.kind);
    end if;
    -- Fields of the wrong JSON kind would otherwise be turned into text ({"type": {"x": 1}} stored as
    -- the type '{"x": 1}'). A JSON null counts as absent: the field's default applies.
    -- Each field looked up by name (no set of every element's fields to build): the first element with a
    -- field of the wrong kind, and its first such field by name.
    select e.n, f.key, jsonb_typeof(e.elem -> f.key) as kind into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
      cross join (values ('delay_ms', 'number'), ('idempotency_key', 'string'), ('max_attempts', 'number'),
                         ('priority', 'number'), ('queue', 'string'), ('run_at', 'string'), ('type', 'string'),
                         ('unique_for_ms', 'number')) as f(key, kind)
     where jsonb_typeof(e.elem -> f.key) not in ('null', f.kind)
     order by e.n, f.key limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: %s must be a JSON %s, got %s', v_bad.n, v_bad.key,
                             case when v_bad.key in ('priority', 'max_attempts', 'delay_ms', 'unique_for_ms')
                                  then 'number' else 'string' end,
                             v_bad.kind);
    end if;

    begin
        select array_agg(e.elem ->> 'type' order by e.n),
               array_agg(e.elem -> 'payload' order by e.n),
               array_agg(e.elem ->> 'idempotency_key' order by e.n),
               array_agg(coalesce(e.elem ->> 'queue', t.queue, 'default') order by e.n),
               array_agg(coalesce((e.elem ->> 'priority')::integer, t.priority, 0) order by e.n),
               array_agg(coalesce((e.elem ->> 'run_at')::timestamptz,
                                  now() + make_interval(secs => (e.elem ->> 'delay_ms')::bigint / 1000.0), now())
                         order by e.n),
               array_agg(coalesce((e.elem ->> 'max_attempts')::integer, t.max_attempts, v_settings.max_attempts)
                         order by e.n),
               array_agg(t.name is not null order by e.n)
          into v_types, v_payloads, v_keys, v_queues, v_priorities, v_run_ats, v_max_attempts, v_registered
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          -- Unset queue, priority and max_attempts: the task type's, then the defaults.
          left join task_type_settings t on t.name = e.elem ->> 'type';
    exception when data_exception then
        raise exception using errcode = 'QV400',
            message = 'a job has a priority, run_at, delay_ms or max_attempts of the wrong type';
    end;
    if exists (select 1 from jsonb_array_elements(p_jobs) as e(elem)
                where (e.elem ? 'run_at' and jsonb_typeof(e.elem -> 'run_at') <> 'null'
                       and e.elem ? 'delay_ms' and jsonb_typeof(e.elem -> 'delay_ms') <> 'null')
                   or (e.elem ->> 'delay_ms')::numeric < 0) then
        raise exception using errcode = 'QV400', message = 'a job gives both run_at and delay_ms, or a negative delay_ms';
    end if;
    if v_types is null then
        return;  -- an empty array: nothing to do
    end if;

    -- Each element's limits are enqueue_job's (max_attempts 1 to 1000; run_at, or now + delay_ms, from
    -- the epoch to 366 days ahead), which are the HTTP API's (app/api.py).
    select b.n, case
             when b.type is null or b.type !~ '\S' or length(b.type) > 100
                 then 'type must be a non-empty text of at most 100 characters'
             when b.payload is null or jsonb_typeof(b.payload) <> 'object'
                 then 'payload must be a JSON object'
             when b.key is null or length(b.key) not between 1 and 255 or b.key ~ '[^!-~]'
                 then 'idempotency_key must be 1 to 255 visible ASCII characters (! to ~, no spaces)'
             when b.queue !~ '\S' or length(b.queue) > 100
                 then 'queue must be a non-empty text of at most 100 characters'
             when b.max_attempts < 1 or b.max_attempts > 1000
                 then 'max_attempts must be between 1 and 1000'
             when b.run_at < timestamptz '1970-01-01 00:00:00+00' or b.run_at > now() + interval '366 days'
                 then 'run_at (or now + delay_ms) must be between 1970-01-01T00:00:00Z and a year (366 days) from now'
             else format('payload is larger than the limit of %s bytes', v_settings.max_payload_bytes)
           end as problem,
           b.payload is not null and jsonb_typeof(b.payload) = 'object'
             and octet_length(b.payload::text) > v_settings.max_payload_bytes as too_large
      into v_bad
      from unnest(v_types, v_payloads, v_keys, v_queues, v_max_attempts, v_run_ats)
           with ordinality as b(type, payload, key, queue, max_attempts, run_at, n)
     where b.type is null or b.type !~ '\S' or length(b.type) > 100
        or b.payload is null or jsonb_typeof(b.payload) <> 'object'
        or b.key is null or length(b.key) not between 1 and 255 or b.key ~ '[^!-~]'
        or b.queue !~ '\S' or length(b.queue) > 100
        or b.max_attempts < 1 or b.max_attempts > 1000
        or b.run_at < timestamptz '1970-01-01 00:00:00+00' or b.run_at > now() + interval '366 days'
        or octet_length(b.payload::text) > v_settings.max_payload_bytes
     order by b.n limit 1;
    if found then
        raise exception using errcode = case when v_bad.too_large and v_bad.problem like 'payload is larger%'
                                             then 'QV413' else 'QV400' end,
            message = format('job %s: %s', v_bad.n, v_bad.problem);
    end if;
    -- Unique for a window (enqueue_job's p_unique_for): the key with the start of its run_at's window.
    select e.n into v_bad from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where (e.elem ->> 'unique_for_ms')::numeric not between 1 and 31622400000 order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: unique_for_ms must be between 1 and 31622400000 (366 days)', v_bad.n);
    end if;
    -- Keys in the stored form of another kind of key (as in enqueue_job): a plain one that ends as a windowed
    -- key does, a windowed one that starts as a schedule's slot does.
    select e.n, e.elem ->> 'idempotency_key' as key, e.elem ->> 'unique_for_ms' is null as plain into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where case when e.elem ->> 'unique_for_ms' is null
                then e.elem ->> 'idempotency_key' !~ '^schedule:' and e.elem ->> 'idempotency_key'
                     ~ '@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'
                else e.elem ->> 'idempotency_key' ~ '^schedule:' end
     order by e.n limit 1;
    if found then
        raise exception using errcode = 'QI422',
            message = case when v_bad.plain
                           then format('job %s: idempotency key %L ends in @ and a window start, the stored form of a '
                                       'unique_for_ms key: without unique_for_ms a key may not end like that',
                                       v_bad.n, v_bad.key)
                           else format('job %s: idempotency key %L starts with schedule:, the form of a schedule''s '
                                       'slots: with unique_for_ms a key may not start like that', v_bad.n, v_bad.key)
                      end,
            hint = 'use another key';
    end if;
    select array_agg(case when e.elem ->> 'unique_for_ms' is null then b.key
                          else b.key || '@' || to_char(to_timestamp(
                              (floor(extract(epoch from b.run_at) * 1000 / floor((e.elem ->> 'unique_for_ms')::numeric))
                               * floor((e.elem ->> 'unique_for_ms')::numeric)) / 1000.0) at time zone 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') end
                     order by b.n)
      into v_keys
      from unnest(v_keys, v_run_ats) with ordinality as b(key, run_at, n)
      join jsonb_array_elements(p_jobs) with ordinality as e(elem, n) on e.n = b.n;
    select b.n into v_bad from unnest(v_keys) with ordinality as b(key, n) where length(b.key) > 255 order by b.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: idempotency_key with unique_for_ms must be at most 230 characters '
                             '(the window start is added)', v_bad.n);
    end if;
    select k.key into v_bad from unnest(v_keys) as k(key) group by k.key having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('idempotency key %L appears twice in one batch', v_bad.key);
    end if;

    -- Every element is well formed: is each type one somebody registered?
    if not v_settings.accept_unregistered_types then
        select b.n, b.type into v_bad from unnest(v_types, v_registered) with ordinality as b(type, registered, n)
         where not b.registered order by b.n limit 1;
        if found then
            raise exception using errcode = 'QT422',
                message = format('job %s: task type %L is not registered: register it with `pgqw tasks register '
                                 '--tasks <module>` or `pgqw migrate --tasks <module>` (a worker that runs it '
                                 'registers it at start too)', v_bad.n, v_bad.type),
                detail = (select coalesce('registered: ' || string_agg(t.name, ', ' order by t.name),
                                          'no type is registered')
                            from (select r.name from task_types r order by r.name limit 20) t),
                hint = 'to accept jobs of types not registered yet, a DBA sets '
                       'queue_settings.accept_unregistered_types = true';
        end if;
    end if;
    -- The inserted rows are kept (v_new), so the usual case, every key new, needs no second
    -- look at the table: only keys that already existed are read back by key.
    with inserted as (
        insert into jobs as j (type, payload, max_attempts, idempotency_key, queue, priority, run_at)
        select b.type, b.payload, b.max_attempts, b.key, b.queue, b.priority, b.run_at
          from unnest(v_types, v_payloads, v_keys, v_queues, v_priorities, v_run_ats, v_max_attempts)
               as b(type, payload, key, queue, priority, run_at, max_attempts)
        on conflict on constraint jobs_idempotency_key_key do nothing
        returning j
    )
    select coalesce(array_agg(i.j), '{}') into v_new from inserted i;

    if cardinality(v_new) < cardinality(v_keys) then
        -- A new statement, a new snapshot: the keys that already existed are read as committed now.
        -- As in enqueue_job, a queue or priority the element leaves unset is not compared.
        select b.n, b.key, j.id into v_bad
          from unnest(v_types, v_payloads, v_keys, v_queues, v_priorities)
               with ordinality as b(type, payload, key, queue, priority, n)
          join jsonb_array_elements(p_jobs) with ordinality as e(elem, n) on e.n = b.n
          join jobs j on j.idempotency_key = b.key
          left join unnest(v_new) as c on c.idempotency_key = b.key
         where c.idempotency_key is null
           and (j.type <> b.type or j.payload <> b.payload
                or (e.elem ->> 'queue' is not null and j.queue <> b.queue)
                or (e.elem ->> 'priority' is not null and j.priority <> b.priority))
         order by b.n limit 1;
        if found then
            raise exception using errcode = 'QI409',
                message = format('job %s: idempotency key %L was already used for a different job', v_bad.n, v_bad.key),
                detail = format('existing job %s', v_bad.id),
                hint = 'use a new idempotency key for a different request';
        end if;
    end if;

    for v_queue in
        select distinct c.queue from unnest(v_new) as c where c.run_at <= now()
    loop
        perform pg_notify('pgqw_jobs', v_queue);
    end loop;
    -- Jobs for later: the queue's earliest, and whether more of it come due after that one (a worker then
    -- asks next_run_at when that time comes). Delivered at commit, measured now (as enqueue_job does).
    for v_later in
        select c.queue, min(c.run_at) as first_at, max(c.run_at) > min(c.run_at) as more
          from unnest(v_new) as c where c.run_at > now() group by c.queue
    loop
        v_due_ms := ceil(extract(epoch from v_later.first_at - clock_timestamp()) * 1000);
        if v_due_ms <= 0 then
            perform pg_notify('pgqw_jobs', v_later.queue);
        end if;
        if v_due_ms > 0 or v_later.more then
            perform pg_notify('pgqw_jobs_at', greatest(v_due_ms, 1) || case when v_later.more then '+' else '' end
                                              || ' ' || v_later.queue);
        end if;
    end loop;

    if cardinality(v_new) = cardinality(v_keys) then
        return query
        select c.id, c.type, c.payload, c.status, c.attempts, c.max_attempts, c.last_error, c.run_at,
               c.created_at, c.started_at, c.finished_at, c.locked_by, c.lease_expires_at,
               c.idempotency_key, c.queue, c.priority, true
          from unnest(v_keys) with ordinality as b(key, n)
          join unnest(v_new) as c on c.idempotency_key = b.key
         order by b.n;
    else
        return query
        select j.id, j.type, j.payload, j.status, j.attempts, j.max_attempts, j.last_error, j.run_at,
               j.created_at, j.started_at, j.finished_at, j.locked_by, j.lease_expires_at,
               j.idempotency_key, j.queue, j.priority, c.idempotency_key is not null
          from unnest(v_keys) with ordinality as b(key, n)
          join jobs j on j.idempotency_key = b.key
          left join unnest(v_new) as c on c.idempotency_key = b.key
         order by b.n;
    end if;
end;
$$;
