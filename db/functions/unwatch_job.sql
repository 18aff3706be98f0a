-- unwatch_job: this session no longer waits for the job (watch_job). Returns whether it was waiting.
-- Raises QV400 (null id).
create or replace function unwatch_job(p_job_id uuid) returns boolean
language plpgsql
security definer
set search_path from current
set enable_seqscan = off
set jit = off
as $$
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    delete from job_waiters w where w.job_id = p_job_id and w.backend_pid = pg_backend_pid();
    return found;
end;
$$;
