-- register_schedules: the schedules a worker's code defines for its task types p_task_types, upserted
-- as source 'code': task type, cron, payload, queue, priority and catch_up are (re)written, a new cron
-- starts from now, a pause is kept, and a DBA's schedule of the same name (source 'sql') is left alone.
-- A code schedule of one of p_task_types that the code no longer defines is deleted. Returns the rows of
-- the given names. p_schedules: a JSON array of {"name", "task_type", "cron", and optionally "payload",
-- "queue", "priority", "catch_up"}. Raises QV400 (a bad element, a name twice, a task type not in
-- p_task_types), QC400 (a cron expression does not parse), QT422 (a task type is not registered).
create or replace function register_schedules(
    p_task_types  text[],
    p_schedules   jsonb
) returns setof schedules
language plpgsql
security definer
set search_path from current
as $$
declare
    v_bad record;
    v_problem text;
begin
    if p_task_types is null or array_position(p_task_types, null) is not null then
        raise exception using errcode = 'QV400', message = 'task types must be an array of names, without nulls',
            column = 'task_types';
    end if;
    if p_schedules is null or jsonb_typeof(p_schedules) <> 'array' then
        raise exception using errcode = 'QV400', message = 'schedules must be a JSON array of objects',
            column = 'schedules';
    end if;
    select e.ord, e.value into v_bad
      from jsonb_array_elements(p_schedules) with ordinality as e(value, ord)
     where jsonb_typeof(e.value) <> 'object'
        or jsonb_typeof(e.value -> 'name') is distinct from 'string'
        or (e.value ->> 'name') !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$'
        or jsonb_typeof(e.value -> 'task_type') is distinct from 'string'
        or jsonb_typeof(e.value -> 'cron') is distinct from 'string'
        or coalesce(jsonb_typeof(e.value -> 'payload'), 'object') <> 'object'
        or coalesce(jsonb_typeof(e.value -> 'queue'), 'null') not in ('null', 'string')
        or (e.value ->> 'queue') !~ '\S' or length(e.value ->> 'queue') > 100
        or coalesce(jsonb_typeof(e.value -> 'priority'), 'null') not in ('null', 'number')
        or coalesce(e.value ->> 'catch_up', 'latest') not in ('latest', 'all', 'none')
     order by e.ord
     limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('schedule %s is not an object with a name (1 to 100 letters, digits, _ . : -), a '
                             'task_type, a cron, and optionally a payload (object), queue, priority and '
                             'catch_up (latest, all or none)', v_bad.ord),
            detail = left(v_bad.value::text, 200),
            column = 'schedules';
    end if;
    select e.value ->> 'name' as name into v_bad
      from jsonb_array_elements(p_schedules) e group by 1 having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('schedule %L is listed twice', v_bad.name),
            column = 'schedules';
    end if;
    select e.value ->> 'name' as name, e.value ->> 'task_type' as task_type into v_bad
      from jsonb_array_elements(p_schedules) e
     where not (e.value ->> 'task_type') = any(p_task_types) limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('schedule %L is of task type %L, which is not one of the registering worker''s',
                             v_bad.name, left(v_bad.task_type, 100)),
            column = 'schedules';
    end if;
    for v_bad in select e.value ->> 'name' as name, e.value ->> 'cron' as cron
                   from jsonb_array_elements(p_schedules) e loop
        v_problem := check_schedule_cron(v_bad.cron);
        if v_problem is not null then
            raise exception using errcode = 'QC400',
                message = format('schedule %L: the cron expression does not parse: %s', v_bad.name, v_problem);
        end if;
    end loop;
    select e.value ->> 'task_type' as task_type into v_bad
      from jsonb_array_elements(p_schedules) e
     where not exists (select 1 from task_types t where t.name = e.value ->> 'task_type') limit 1;
    if found then
        raise exception using errcode = 'QT422',
            message = format('no task type %L is registered', left(v_bad.task_type, 100)),
            hint = 'register the task types (register_task_types) before their schedules';
    end if;

    -- One registration at a time: workers starting together write the same rows in one order.
    perform pg_advisory_xact_lock(hashtext('pgqw.register_schedules'));

    delete from schedules s
     where s.source = 'code' and s.task_type = any(p_task_types)
       and not exists (select 1 from jsonb_array_elements(p_schedules) e where e.value ->> 'name' = s.name);

    insert into schedules as s (name, task_type, cron, payload, queue, priority, catch_up, source)
    select e.value ->> 'name', e.value ->> 'task_type',
           regexp_replace(regexp_replace(e.value ->> 'cron', '^\s+|\s+$', '', 'g'), '\s+', ' ', 'g'),
           coalesce(e.value -> 'payload', '{}'::jsonb), e.value ->> 'queue', (e.value ->> 'priority')::integer,
           coalesce(e.value ->> 'catch_up', 'latest'), 'code'
      from jsonb_array_elements(p_schedules) e
     order by e.value ->> 'name'
    on conflict on constraint schedules_pkey do update
       set task_type = excluded.task_type, cron = excluded.cron, payload = excluded.payload,
           queue = excluded.queue, priority = excluded.priority, catch_up = excluded.catch_up,
           slots_after = case when s.cron = excluded.cron then s.slots_after else greatest(s.slots_after, now()) end,
           updated_at = case when (s.task_type, s.cron, s.payload, s.queue, s.priority, s.catch_up)
                                  is not distinct from (excluded.task_type, excluded.cron, excluded.payload,
                                                        excluded.queue, excluded.priority, excluded.catch_up)
                             then s.updated_at else now() end
     where s.source = 'code';

    return query
    select s.* from schedules s
     where s.name in (select e.value ->> 'name' from jsonb_array_elements(p_schedules) e)
     order by s.name;
exception
    when numeric_value_out_of_range or invalid_text_representation then
        raise exception using errcode = 'QV400',
            message = format('a schedule''s priority is not a whole number in range: %s', sqlerrm),
            column = 'schedules';
end;
$$;
