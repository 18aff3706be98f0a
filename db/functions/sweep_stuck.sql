-- sweep_stuck: recovers the processing jobs whose lease expired before now(), by the server's clock (→ pending with
-- tries left, else → dead; asked to cancel → cancelled; last_error names the worker; its attempt abandoned; locked
-- rows skipped; a lease that ran to the attempt's deadline: timed_out, → failed or dead); notifies.
-- Returns one row per swept job. Raises nothing of its own.
create or replace function sweep_stuck()
returns table (job_id uuid, attempt integer, worker_id text, status text, lease_expired_at timestamptz)
language plpgsql
security definer
set search_path from current
as $$
begin
    -- The server's clock: only the owner may sweep as of another time (sweep_stuck_at).
    return query select * from sweep_stuck_at(now());
end;
$$;
