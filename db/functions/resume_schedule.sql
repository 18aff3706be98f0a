-- resume_schedule: a paused schedule enqueues again from its next slot after now: the slots that passed
-- while it was paused are skipped, whatever its catch_up. Idempotent (a running schedule is unchanged).
-- Returns the row. Raises QV400 (null name), QR404 (no schedule has this name).
create or replace function resume_schedule(
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
    update schedules s
       set paused = false,
           slots_after = case when s.paused then greatest(s.slots_after, now()) else s.slots_after end,
           updated_at = case when s.paused then now() else s.updated_at end
     where s.name = p_name
    returning s.*;
    if not found then
        raise exception using errcode = 'QR404', message = format('no schedule is named %L', left(p_name, 100));
    end if;
end;
$$;
