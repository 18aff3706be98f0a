-- set_schedule: makes or replaces the schedule p_name (a DBA's: source 'sql', which a worker's
-- register_schedules never overwrites); a new cron expression starts from now. Pause state is kept.
-- Returns the row. Raises QV400 (bad name, payload, queue or catch_up), QC400 (the cron expression
-- does not parse), QT422 (no such task type is registered), QV413 (payload over max_payload_bytes).
create or replace function set_schedule(
    p_name       text,
    p_task_type  text,
    p_cron       text,
    p_payload    jsonb default '{}'::jsonb,
    p_queue      text default null,
    p_priority   integer default null,
    p_catch_up   text default 'latest'
) returns setof schedules
language plpgsql
security definer
set search_path from current
as $$
declare
    v_problem text;
    v_cron text;
    v_max_bytes integer;
begin
    if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$' then
        raise exception using errcode = 'QV400',
            message = 'a schedule name is 1 to 100 letters, digits, _ . : or -, starting with a letter or digit',
            detail = format('got %s', coalesce(quote_literal(left(p_name, 120)), 'null')),
            column = 'name';
    end if;
    if p_task_type is null then
        raise exception using errcode = 'QV400', message = 'the task type is null',
            column = 'task_type';
    end if;
    v_problem := check_schedule_cron(p_cron);
    if v_problem is not null then
        raise exception using errcode = 'QC400', message = 'the cron expression does not parse: ' || v_problem,
            hint = 'five fields: minute hour day-of-month month day-of-week, e.g. ''*/5 * * * *'', or @hourly, @daily';
    end if;
    v_cron := regexp_replace(regexp_replace(p_cron, '^\s+|\s+$', '', 'g'), '\s+', ' ', 'g');
    if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
        raise exception using errcode = 'QV400',
            message = format('payload must be a JSON object, got %s', coalesce(jsonb_typeof(p_payload), 'null')),
            column = 'payload';
    end if;
    select s.max_payload_bytes into v_max_bytes from queue_settings s;
    if octet_length(p_payload::text) > v_max_bytes then
        raise exception using errcode = 'QV413',
            message = format('payload is %s bytes, more than the limit of %s', octet_length(p_payload::text), v_max_bytes);
    end if;
    if p_queue is not null and (p_queue !~ '\S' or length(p_queue) > 100) then
        raise exception using errcode = 'QV400', message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_catch_up is null or p_catch_up not in ('latest', 'all', 'none') then
        raise exception using errcode = 'QV400', message = 'catch_up must be latest, all or none',
            detail = format('got %s', coalesce(quote_literal(left(p_catch_up, 40)), 'null')),
            column = 'catch_up';
    end if;
    if not exists (select 1 from task_types t where t.name = p_task_type) then
        raise exception using errcode = 'QT422',
            message = format('no task type %L is registered', left(p_task_type, 100)),
            hint = 'a worker registers the task types of its code when it starts: start one first';
    end if;

    return query
    insert into schedules as s (name, task_type, cron, payload, queue, priority, catch_up, source)
    values (p_name, p_task_type, v_cron, p_payload, p_queue, p_priority, p_catch_up, 'sql')
    on conflict on constraint schedules_pkey do update
       set task_type = excluded.task_type, cron = excluded.cron, payload = excluded.payload,
           queue = excluded.queue, priority = excluded.priority, catch_up = excluded.catch_up,
           source = 'sql', updated_at = now(),
           slots_after = case when s.cron = excluded.cron then s.slots_after else greatest(s.slots_after, now()) end
    returning s.*;
end;
$$;
