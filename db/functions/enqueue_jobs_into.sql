-- enqueue_jobs_into: enqueue_jobs, each new job a member of the batch p_batch_id (null: of none; enqueue_batch
-- gives one). Internal: security invoker; no role may execute it (a job joins a batch only when the batch is made).
-- enqueue_jobs: enqueue_job for a JSON array of {type, payload, idempotency_key[, queue, priority, run_at or delay_ms,
-- max_attempts, unique_for_ms, timeout_ms, expires_at or expire_after_ms, depends_on, run_anyway, serial_key,
-- concurrency_key, workflow_id]} in one insert (→ pending), one notification per queue a worker waits for
-- (has_waiters): pgqw_jobs with the queue for
-- jobs ready now, pgqw_jobs_at with '<ms> <queue>' for the earliest later one ('<ms>+ <queue>' when others of that
-- queue come due later still). Returns one row per element,
-- in order. unique_for_ms: as enqueue_job's p_unique_for (the stored key is `<key>@<window start>`, a form a key
-- without unique_for_ms may take only if it starts with `schedule:`, and a key with it may not: QI422).
-- expires_at, expire_after_ms: as enqueue_job's (an expiry not after when the job may start is refused: QV400).
-- depends_on: an array whose items are job ids (strings), or integers n naming the n-th element (from 1) of this
-- same array, which must come before the one that names it (so no cycle can be written: QW422); run_anyway: as
-- enqueue_job's p_run_anyway for every parent, or an array of booleans, one per depends_on item, each for that
-- parent; serial_key, concurrency_key, workflow_id: as enqueue_job's p_serial_key, p_concurrency_key,
-- p_workflow_id (an element naming an earlier one without a workflow_id takes that one's, else its id).
-- A type nobody registered is refused (QT422) unless queue_settings.accept_unregistered_types is on.
-- Raises QV400 (not an array, a bad element, a key twice in the batch), QI422, QT422, QV413 (payload too large),
-- QI409, QW422 (a dependency that does not exist, or not an earlier element; over 1000 of them).
create or replace function enqueue_jobs_into(
    p_jobs      jsonb,
    p_batch_id  uuid
) returns setof enqueued_job
language plpgsql
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
    v_timeouts integer[];
    v_expiries timestamptz[];
    v_registered boolean[];
    v_new jobs[];
    v_bad record;
    v_queue text;
    v_later record;
    v_due_ms bigint;
    -- Dependencies, keys and workflows: read only when some element gives one (v_orchestrated).
    v_orchestrated boolean;
    v_ids uuid[];               -- each element's id, made here so that later elements can name it
    v_serial_keys text[];
    v_serial_seqs bigint[];
    v_concurrency_keys text[];
    v_workflows uuid[];
    v_blocked boolean[];
    v_run_anyway boolean[];
    v_parents uuid[];
    v_cancelled uuid[];
    v_ref record;
begin
    select * into v_settings from queue_settings;
    if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' then
        raise exception using errcode = 'QV400', message = 'jobs must be a JSON array of job objects',
            column = 'jobs';
    end if;
    if jsonb_array_length(p_jobs) > 10000 then
        raise exception using errcode = 'QV400',
            message = format('at most 10000 jobs per call, got %s', jsonb_array_length(p_jobs)),
            column = 'jobs';
    end if;
    select e.n, jsonb_typeof(e.elem) as kind into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where jsonb_typeof(e.elem) <> 'object' order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('job %s must be a JSON object, got %s', v_bad.n, v_bad.kind),
            column = 'jobs';
    end if;
    -- Fields of the wrong JSON kind would otherwise be turned into text ({"type": {"x": 1}} stored as
    -- the type '{"x": 1}'). A JSON null counts as absent: the field's default applies.
    -- Each field looked up by name (no set of every element's fields to build): the first element with a
    -- field of the wrong kind, and its first such field by name.
    select e.n, f.key, f.kind || coalesce(' or ' || f.also, '') as expected, jsonb_typeof(e.elem -> f.key) as kind
      into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
      cross join (values ('delay_ms', 'number', null), ('expire_after_ms', 'number', null),
                         ('expires_at', 'string', null), ('depends_on', 'array', null), ('run_anyway', 'boolean', 'array'),
                         ('serial_key', 'string', null), ('concurrency_key', 'string', null),
                         ('workflow_id', 'string', null), ('idempotency_key', 'string', null),
                         ('max_attempts', 'number', null), ('priority', 'number', null), ('queue', 'string', null),
                         ('run_at', 'string', null), ('timeout_ms', 'number', null), ('type', 'string', null),
                         ('unique_for_ms', 'number', null)) as f(key, kind, also)
     where jsonb_typeof(e.elem -> f.key) not in ('null', f.kind) and jsonb_typeof(e.elem -> f.key) is distinct from f.also
     order by e.n, f.key limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: %s must be a JSON %s, got %s', v_bad.n, v_bad.key, v_bad.expected, v_bad.kind),
            column = 'jobs';
    end if;

    begin
        select array_agg(e.elem ->> 'type' order by e.n),
               array_agg(e.elem -> 'payload' order by e.n),
               array_agg(e.elem ->> 'idempotency_key' order by e.n),
               array_agg(coalesce(e.elem ->> 'queue', t.queue, 'default') order by e.n),
               array_agg(coalesce((e.elem ->> 'priority')::integer, t.priority, 0) order by e.n),
               array_agg(w.run_at order by e.n),
               array_agg(coalesce((e.elem ->> 'max_attempts')::integer, t.max_attempts, v_settings.max_attempts)
                         order by e.n),
               array_agg((e.elem ->> 'timeout_ms')::integer order by e.n),
               -- Counted from when the job may start (enqueue_job's rule).
               array_agg(coalesce((e.elem ->> 'expires_at')::timestamptz,
                                  greatest(now(), w.run_at) + make_interval(
                                      secs => coalesce((e.elem ->> 'expire_after_ms')::integer, t.expire_after_ms) / 1000.0))
                         order by e.n),
               array_agg(t.name is not null order by e.n)
          into v_types, v_payloads, v_keys, v_queues, v_priorities, v_run_ats, v_max_attempts, v_timeouts,
               v_expiries, v_registered
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          cross join lateral (
              select coalesce((e.elem ->> 'run_at')::timestamptz,
                              now() + make_interval(secs => (e.elem ->> 'delay_ms')::bigint / 1000.0), now()) as run_at
          ) w
          -- Unset queue, priority and max_attempts: the task type's, then the defaults.
          left join task_type_settings t on t.name = e.elem ->> 'type';
    exception when data_exception then
        raise exception using errcode = 'QV400',
            message = 'a job has a priority, run_at, delay_ms, max_attempts, timeout_ms, expires_at or expire_after_ms '
                      'of the wrong type',
            column = 'jobs';
    end;
    if exists (select 1 from jsonb_array_elements(p_jobs) as e(elem)
                where (e.elem ? 'run_at' and jsonb_typeof(e.elem -> 'run_at') <> 'null'
                       and e.elem ? 'delay_ms' and jsonb_typeof(e.elem -> 'delay_ms') <> 'null')
                   or (e.elem ->> 'delay_ms')::numeric < 0) then
        raise exception using errcode = 'QV400', message = 'a job gives both run_at and delay_ms, or a negative delay_ms',
            column = 'jobs';
    end if;
    select e.n into v_bad from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where jsonb_typeof(e.elem -> 'expires_at') = 'string' and jsonb_typeof(e.elem -> 'expire_after_ms') = 'number'
     order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s gives both expires_at and expire_after_ms', v_bad.n), column = 'jobs';
    end if;
    if v_types is null then
        return;  -- an empty array: nothing to do
    end if;

    -- Each element's limits are enqueue_job's (max_attempts 1 to 1000; run_at, or now + delay_ms, from
    -- the epoch to 366 days ahead), which are the HTTP API's (app/models/requests.py).
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
             when b.timeout_ms < 1
                 then 'timeout_ms must be at least 1 (or null for the task type''s)'
             when b.expire_after_ms < 1
                 then 'expire_after_ms must be at least 1 (or null for the task type''s)'
             when b.run_at < timestamptz '1970-01-01 00:00:00+00' or b.run_at > now() + interval '366 days'
                 then 'run_at (or now + delay_ms) must be between 1970-01-01T00:00:00Z and a year (366 days) from now'
             when not isfinite(b.expires_at) or b.expires_at <= greatest(now(), b.run_at)
                 then 'expires_at must be later than now and than run_at'
             else format('payload is larger than the limit of %s bytes', v_settings.max_payload_bytes)
           end as problem,
           b.payload is not null and jsonb_typeof(b.payload) = 'object'
             and octet_length(b.payload::text) > v_settings.max_payload_bytes as too_large
      into v_bad
      from unnest(v_types, v_payloads, v_keys, v_queues, v_max_attempts, v_run_ats, v_timeouts, v_expiries,
                  array(select (e.elem ->> 'expire_after_ms')::integer
                          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n) order by e.n))
           with ordinality as b(type, payload, key, queue, max_attempts, run_at, timeout_ms, expires_at, expire_after_ms, n)
     where b.type is null or b.type !~ '\S' or length(b.type) > 100
        or b.payload is null or jsonb_typeof(b.payload) <> 'object'
        or b.key is null or length(b.key) not between 1 and 255 or b.key ~ '[^!-~]'
        or b.queue !~ '\S' or length(b.queue) > 100
        or b.max_attempts < 1 or b.max_attempts > 1000
        or b.timeout_ms < 1
        or b.expire_after_ms < 1
        or not isfinite(b.expires_at) or b.expires_at <= greatest(now(), b.run_at)
        or b.run_at < timestamptz '1970-01-01 00:00:00+00' or b.run_at > now() + interval '366 days'
        or octet_length(b.payload::text) > v_settings.max_payload_bytes
     order by b.n limit 1;
    if found then
        raise exception using errcode = case when v_bad.too_large and v_bad.problem like 'payload is larger%'
                                             then 'QV413' else 'QV400' end,
            message = format('job %s: %s', v_bad.n, v_bad.problem),
            column = 'jobs';
    end if;
    -- Unique for a window (enqueue_job's p_unique_for): the key with the start of its run_at's window.
    select e.n into v_bad from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where (e.elem ->> 'unique_for_ms')::numeric not between 1 and 31622400000 order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: unique_for_ms must be between 1 and 31622400000 (366 days)', v_bad.n),
            column = 'jobs';
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
                             '(the window start is added)', v_bad.n),
            column = 'jobs';
    end if;
    select k.key into v_bad from unnest(v_keys) as k(key) group by k.key having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('idempotency key %L appears twice in one batch', v_bad.key),
            column = 'jobs';
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
    -- Dependencies, keys, workflows and batches: read only when some element gives one.
    v_orchestrated := p_batch_id is not null or exists (
        select 1 from jsonb_array_elements(p_jobs) as e(elem)
         where e.elem ?| array['depends_on', 'run_anyway', 'serial_key', 'concurrency_key', 'workflow_id']);
    if v_orchestrated then
        select e.n, case when length(e.elem ->> 'serial_key') not between 1 and 200
                         then 'serial_key must be 1 to 200 characters'
                         when length(e.elem ->> 'concurrency_key') not between 1 and 200
                         then 'concurrency_key must be 1 to 200 characters'
                         else 'workflow_id must be a UUID' end as problem into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
         where length(e.elem ->> 'serial_key') not between 1 and 200
            or length(e.elem ->> 'concurrency_key') not between 1 and 200
            or e.elem ->> 'workflow_id' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
         order by e.n limit 1;
        if found then
            raise exception using errcode = 'QV400', message = format('job %s: %s', v_bad.n, v_bad.problem),
                column = 'jobs';
        end if;
        -- run_anyway as an array: one boolean per depends_on item.
        select e.n, case when exists (select 1 from jsonb_array_elements(e.elem -> 'run_anyway') as f(flag)
                                       where jsonb_typeof(f.flag) <> 'boolean')
                         then 'run_anyway, as an array, must hold only booleans'
                         else format('run_anyway, as an array, must hold one boolean per depends_on item (%s), '
                                     'got %s', coalesce(jsonb_array_length(
                                         case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                              then e.elem -> 'depends_on' end), 0),
                                     jsonb_array_length(e.elem -> 'run_anyway')) end as problem into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
         where jsonb_typeof(e.elem -> 'run_anyway') = 'array'
           and (jsonb_array_length(e.elem -> 'run_anyway')
                  <> coalesce(jsonb_array_length(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                      then e.elem -> 'depends_on' end), 0)
                or exists (select 1 from jsonb_array_elements(e.elem -> 'run_anyway') as f(flag)
                            where jsonb_typeof(f.flag) <> 'boolean'))
         order by e.n limit 1;
        if found then
            raise exception using errcode = 'QV400', message = format('job %s: %s', v_bad.n, v_bad.problem),
                column = 'jobs';
        end if;
        -- Each item of a depends_on: a job id, or the number of an earlier element of this call.
        select e.n, r.item into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          cross join lateral jsonb_array_elements(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                       then e.elem -> 'depends_on' else '[]' end) as r(item)
         where case jsonb_typeof(r.item)
                   when 'string' then r.item #>> '{}' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                   when 'number' then (r.item #>> '{}')::numeric <> floor((r.item #>> '{}')::numeric)
                                      or (r.item #>> '{}')::numeric not between 1 and e.n - 1
                   else true end
         order by e.n limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s: depends_on item %s is neither a job id nor the number of an earlier element '
                                 'of this call (a job depends only on jobs enqueued before it, so no cycle can be made)',
                                 v_bad.n, v_bad.item),
                column = 'jobs';
        end if;
        select e.n, count(distinct r.item) as many into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          cross join lateral jsonb_array_elements(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                       then e.elem -> 'depends_on' else '[]' end) as r(item)
         group by e.n having count(distinct r.item) > 1000 order by e.n limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s: a job may depend on at most 1000 jobs, got %s', v_bad.n, v_bad.many),
                column = 'jobs';
        end if;
        -- The parents that exist already, locked until this commits, as enqueue_job's are.
        v_parents := array(
            select distinct (r.item #>> '{}')::uuid
              from jsonb_array_elements(p_jobs) as e(elem)
              cross join lateral jsonb_array_elements(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                           then e.elem -> 'depends_on' else '[]' end) as r(item)
             where jsonb_typeof(r.item) = 'string');
        perform 1 from jobs p where p.id = any (v_parents) order by p.id for no key update;
        select m as id into v_bad from unnest(v_parents) as m
         where not exists (select 1 from jobs p where p.id = m) limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s, a dependency, does not exist', v_bad.id), column = 'jobs';
        end if;
        v_ids := array(select gen_random_uuid() from generate_series(1, cardinality(v_types)));
        select array_agg(e.elem ->> 'serial_key' order by e.n),
               array_agg(e.elem ->> 'concurrency_key' order by e.n),
               array_agg((e.elem ->> 'workflow_id')::uuid order by e.n),
               array_agg(coalesce(jsonb_array_length(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                          then e.elem -> 'depends_on' end), 0) > 0 order by e.n),
               array_agg(case when jsonb_typeof(e.elem -> 'run_anyway') = 'boolean'
                              then (e.elem ->> 'run_anyway')::boolean else false end order by e.n)
          into v_serial_keys, v_concurrency_keys, v_workflows, v_blocked, v_run_anyway
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n);
        -- In element order, so that an element's workflow is known before a later one takes it: the first
        -- parent's workflow, else that parent's id.
        v_serial_seqs := array_fill(null::bigint, array[cardinality(v_types)]);
        for i in 1 .. cardinality(v_types) loop
            if v_serial_keys[i] is not null then
                v_serial_seqs[i] := nextval('job_serial_seq');
            end if;
            if v_workflows[i] is null and v_blocked[i] then
                v_workflows[i] := (
                    select case jsonb_typeof(r.item)
                               -- An earlier element: its workflow, else the job its key names already (one
                               -- made before with that key), else the id it is about to get.
                               when 'number' then coalesce(
                                   v_workflows[(r.item #>> '{}')::integer],
                                   (select coalesce(p.workflow_id, p.id) from jobs p
                                     where p.idempotency_key = v_keys[(r.item #>> '{}')::integer]),
                                   v_ids[(r.item #>> '{}')::integer])
                               else (select coalesce(p.workflow_id, p.id) from jobs p where p.id = (r.item #>> '{}')::uuid)
                           end
                      from jsonb_array_elements(p_jobs -> (i - 1) -> 'depends_on') with ordinality as r(item, k)
                     order by r.k limit 1);
            end if;
            -- An earlier element it depends on joins its workflow (a job with dependents is always in one).
            if v_blocked[i] and v_workflows[i] is not null then
                for v_ref in select (r.item #>> '{}')::integer as k
                               from jsonb_array_elements(p_jobs -> (i - 1) -> 'depends_on') as r(item)
                              where jsonb_typeof(r.item) = 'number'
                loop
                    v_workflows[v_ref.k] := coalesce(v_workflows[v_ref.k], v_workflows[i]);
                end loop;
            end if;
        end loop;
    end if;

    -- The inserted rows are kept (v_new), so the usual case, every key new, needs no second
    -- look at the table: only keys that already existed are read back by key.
    with inserted as (
        -- Without dependencies, keys or a batch (v_orchestrated false) the arrays of those are null, which
        -- unnest reads as nulls: the id and status take their defaults.
        insert into jobs as j (type, payload, max_attempts, idempotency_key, queue, priority, run_at, timeout_ms,
                               expires_at, id, status, workflow_id, batch_id, serial_key, serial_seq, concurrency_key)
        select b.type, b.payload, b.max_attempts, b.key, b.queue, b.priority, b.run_at, b.timeout_ms, b.expires_at,
               coalesce(b.id, gen_random_uuid()), case when b.blocked then 'blocked' else 'pending' end,
               b.workflow_id, p_batch_id, b.serial_key, b.serial_seq, b.concurrency_key
          from unnest(v_types, v_payloads, v_keys, v_queues, v_priorities, v_run_ats, v_max_attempts, v_timeouts,
                      v_expiries, v_ids, v_blocked, v_workflows, v_serial_keys, v_serial_seqs, v_concurrency_keys)
               as b(type, payload, key, queue, priority, run_at, max_attempts, timeout_ms, expires_at, id, blocked,
                    workflow_id, serial_key, serial_seq, concurrency_key)
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

    if v_orchestrated and true = any (v_blocked) then
        -- Each new blocked job's parents, by id: an earlier element's is the job its key names (made now, or
        -- the one made before with that key).
        -- A parent named twice is waited for as strictly as either mention asks (run anyway only if both do).
        insert into job_dependencies (job_id, parent_id, run_anyway)
        select c.id, case jsonb_typeof(r.item)
                         when 'number' then (select j.id from jobs j where j.idempotency_key = v_keys[(r.item #>> '{}')::integer])
                         else (r.item #>> '{}')::uuid end,
               -- The element's one flag, or the item's own of an array of them.
               bool_and(coalesce((p_jobs -> (b.n::integer - 1) -> 'run_anyway' -> (r.k::integer - 1))::boolean,
                                 v_run_anyway[b.n]))
          from unnest(v_keys) with ordinality as b(key, n)
          join unnest(v_new) as c on c.idempotency_key = b.key
          cross join lateral jsonb_array_elements(case when v_blocked[b.n] then p_jobs -> (b.n::integer - 1) -> 'depends_on'
                                                       else '[]' end) with ordinality as r(item, k)
         group by 1, 2
        on conflict on constraint job_dependencies_pkey do nothing;
        -- The parents made before this call under an element's key were not locked above: they are now (a
        -- parent's end must wait for these dependencies, or be seen by judge_blocked below); and a parent in
        -- no workflow (one made before, or a job named by id) joins its first dependent's.
        perform 1 from jobs p
         where p.id in (select d.parent_id from job_dependencies d join unnest(v_new) as c on c.id = d.job_id)
           and not p.id = any (v_parents)
         order by p.id for no key update;
        update jobs p set workflow_id = w.workflow_id
          from (select distinct on (d.parent_id) d.parent_id, c.workflow_id
                  from job_dependencies d join unnest(v_new) as c on c.id = d.job_id
                 order by d.parent_id, c.id) w
         where p.id = w.parent_id and p.workflow_id is null;
        -- Judged now, as a parent's end would; a job cancelled so (a parent already cancelled) cancels its own.
        v_cancelled := judge_blocked(array(select c.id from unnest(v_new) as c where c.status = 'blocked'));
        perform settle_jobs(v_cancelled);
    end if;

    for v_queue in
        select distinct c.queue from unnest(v_new) as c where c.run_at <= now() and c.status = 'pending'
    loop
        continue when not has_waiters(v_queue);  -- nobody waits: a busy worker claims again before it does
        perform pg_notify('pgqw_jobs', v_queue);
    end loop;
    -- Jobs for later: the queue's earliest, and whether more of it come due after that one (a worker then
    -- asks next_run_at when that time comes). Delivered at commit, measured now (as enqueue_job does).
    for v_later in
        select c.queue, min(c.run_at) as first_at, max(c.run_at) > min(c.run_at) as more
          from unnest(v_new) as c where c.run_at > now() and c.status = 'pending' group by c.queue
    loop
        continue when not has_waiters(v_later.queue);  -- a worker asks next_run_at when it begins to wait
        v_due_ms := ceil(extract(epoch from v_later.first_at - clock_timestamp()) * 1000);
        if v_due_ms <= 0 then
            perform pg_notify('pgqw_jobs', v_later.queue);
        end if;
        if v_due_ms > 0 or v_later.more then
            perform pg_notify('pgqw_jobs_at', greatest(v_due_ms, 1) || case when v_later.more then '+' else '' end
                                              || ' ' || v_later.queue);
        end if;
    end loop;

    -- A blocked job may have changed since its insert (judge_blocked): then every row is read back.
    if cardinality(v_new) = cardinality(v_keys) and not (v_orchestrated and true = any (v_blocked)) then
        return query
        select c, true
          from unnest(v_keys) with ordinality as b(key, n)
          join unnest(v_new) as c on c.idempotency_key = b.key
         order by b.n;
    else
        return query
        select j, c.idempotency_key is not null
          from unnest(v_keys) with ordinality as b(key, n)
          join jobs j on j.idempotency_key = b.key
          left join unnest(v_new) as c on c.idempotency_key = b.key
         order by b.n;
    end if;
end;
$$;
