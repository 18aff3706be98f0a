-- pause_schedule: the schedule enqueues nothing until resumed (jobs already enqueued are untouched).
-- Idempotent. A registration from code keeps the pause. Returns the row.
-- Raises QV400 (null name), QR404 (no schedule has this name).
create or replace function pause_schedule(
    p_name  text
) returns setof schedules
language plpgsql
security definer
set search_path from current
as $$
begin
    if p_name is null then
        raise exception using errcode = 'QV400', message = 'the schedule name is null',
            column = 'name';
    end if;
    return query
    update schedules s set paused = true, updated_at = now()
     where s.name = p_name
    returning s.*;
    if not found then
        raise exception using errcode = 'QR404', message = format('no schedule is named %L', left(p_name, 100));
    end if;
end;
$$;
