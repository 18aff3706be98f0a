-- serial_turn: whether a job of serial key p_serial_key, at p_serial_seq in its key's order, may start now: no
-- job of the key enqueued before it is unfinished, and none of the key is processing. What claim_jobs_at asks of
-- each serial job it looks at (a function, so that a claim of jobs without a key does not prepare the query).
-- Raises nothing of its own. Internal: security invoker; no role may execute it.
create or replace function serial_turn(
    p_serial_key  text,
    p_serial_seq  bigint
) returns boolean
language plpgsql
stable
set search_path from current
as $$
begin
    return not exists (select 1 from jobs e
                        where e.serial_key = p_serial_key and e.finished_at is null
                          and (e.serial_seq < p_serial_seq or e.status = 'processing'));
end;
$$;
