-- find_lease_attempt: no state change; the attempt of p_job_id this lease token was issued for (its number, worker
-- and outcome, whatever it is: the caller tells a held attempt from one already ended), found through the primary
-- key and the token's SHA-256 (which it does not answer with). Raises QN404 (no such job), QL409 (the token is none of the job's attempts').
-- Internal: security invoker, called by mark_succeeded, mark_failed, mark_cancelled and release_job once they
-- checked their arguments; no role may execute it.
create or replace function find_lease_attempt(
    p_job_id       uuid,
    p_lease_token  uuid,
    out attempt    integer,
    out worker_id  text,
    out outcome    text
)
language plpgsql
set search_path from current
as $$
begin
    select a.attempt, a.worker_id, a.outcome into attempt, worker_id, outcome
      from job_attempts a where a.job_id = p_job_id and a.lease_token_hash = sha256(uuid_send(p_lease_token));
    if not found then
        perform raise_job_not_held(p_job_id, null);
    end if;
end;
$$;
