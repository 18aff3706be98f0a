-- delete_schedule: removes the schedule (its jobs already enqueued stay). A schedule defined in code comes
-- back at the next worker start: pause it instead, or remove it from the code. Returns the deleted row.
-- Raises QV400 (null name), QR404 (no schedule has this name).
create or replace function delete_schedule(
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
    return query delete from schedules s where s.name = p_name returning s.*;
    if not found then
        raise exception using errcode = 'QR404', message = format('no schedule is named %L', left(p_name, 100));
    end if;
end;
$$;
