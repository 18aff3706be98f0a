-- enqueue_schedule_slots: a scheduler's call for the slots of p_name it found due (at most 100, none in the
-- future of the server's clock, each a slot of the schedule's cron: cron_matches). Under the schedule's row lock, the slots after last_slot and slots_after
-- are due; catch_up picks which get a job: all, the latest only, or none (only the latest, if at most a
-- minute late). Each job is enqueue_job's, run_at its slot, idempotency key `schedule:<name>@<slot, UTC>`
-- (so a slot is enqueued once, however many call). Advances last_slot and slots_after; a paused schedule
-- changes nothing. Returns (slot, job_id, created) per slot enqueued.
-- Raises QV400 (null, too many, future slots, or a time that is not a slot of the cron), QR404 (no schedule has this name), and enqueue_job's QV413.
create or replace function enqueue_schedule_slots(
    p_name   text,
    p_slots  timestamptz[]
) returns table (slot timestamptz, job_id uuid, created boolean)
language plpgsql
security definer
set search_path from current
as $$
#variable_conflict use_variable
declare
    v_schedule schedules;
    v_due timestamptz[];
    v_pick timestamptz[];
    v_slot timestamptz;
    v_first timestamptz;
    v_last timestamptz;
    v_key text;
    v_job_id uuid;
    v_created boolean;
begin
    if p_name is null then
        raise exception using errcode = 'QV400', message = 'the schedule name is null',
            column = 'name';
    end if;
    if p_slots is null or array_position(p_slots, null) is not null or cardinality(p_slots) > 100 then
        raise exception using errcode = 'QV400', message = 'slots must be an array of at most 100 times, without nulls',
            column = 'slots';
    end if;
    select min(x), max(x) into v_first, v_last from unnest(p_slots) x;
    if v_last > now() or v_first < timestamptz '1970-01-01 00:00:00+00' then
        raise exception using errcode = 'QV400',
            message = 'a slot must be between 1970-01-01T00:00:00Z and now (the server''s clock)',
            detail = format('got %s to %s; now is %s', v_first, v_last, now()),
            column = 'slots';
    end if;
    select * into v_schedule from schedules s where s.name = p_name for update;
    if not found then
        raise exception using errcode = 'QR404', message = format('no schedule is named %L', left(p_name, 100));
    end if;
    if v_schedule.paused then
        return;
    end if;
    -- Only the cron's own slots: a caller cannot make a job at a time of its choosing (nor, with catch_up
    -- 'latest', make an off-slot time take the place of the real slot).
    select x into v_slot from unnest(p_slots) x where not cron_matches(v_schedule.cron, x) limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('%s is not a slot of schedule %s (cron %s)', v_slot, v_schedule.name, v_schedule.cron),
            column = 'slots';
    end if;

    v_due := array(select distinct x from unnest(p_slots) x
                    where x > greatest(v_schedule.last_slot, v_schedule.slots_after) order by x);
    if cardinality(v_due) = 0 then
        return;
    end if;
    v_pick := case v_schedule.catch_up
        when 'all' then v_due
        when 'latest' then array[v_due[cardinality(v_due)]]
        else case when v_due[cardinality(v_due)] >= now() - interval '1 minute'
                  then array[v_due[cardinality(v_due)]] else '{}'::timestamptz[] end
    end;

    foreach v_slot in array v_pick loop
        v_key := 'schedule:' || v_schedule.name || '@'
                 || to_char(v_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
        begin
            select (e.job).id, e.created into v_job_id, v_created
              from enqueue_job(v_schedule.task_type, v_schedule.payload, v_key, v_schedule.queue,
                               v_schedule.priority, v_slot) e;
        exception when sqlstate 'QI409' then
            -- The slot's key holds a job made before the schedule's payload or queue changed (last_slot
            -- was moved back by hand): that slot is done.
            select j.id, false into v_job_id, v_created from jobs j where j.idempotency_key = v_key;
        end;
        slot := v_slot;
        job_id := v_job_id;
        created := v_created;
        return next;
    end loop;

    update schedules s
       set last_slot = coalesce(greatest(s.last_slot, (select max(x) from unnest(v_pick) x)), s.last_slot),
           slots_after = greatest(s.slots_after, v_due[cardinality(v_due)])
     where s.name = v_schedule.name;
end;
$$;
