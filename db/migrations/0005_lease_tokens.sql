-- 0005_lease_tokens: a claim hands its claimer a lease token, a value only that session received;
-- every later call for the attempt (heartbeat, success, failure, hand-back) presents it. The attempt's
-- row keeps only its SHA-256, so no session that can read the tables can speak for another's attempt.
-- The clock: p_now leaves the callable functions; the owner-only claim_jobs_at and sweep_stuck_at
-- take it (tests and repairs), and no role is granted them.
alter table job_attempts add column lease_token_hash bytea;
-- Every attempt made from now on has one (attempts made before this migration have none: a worker
-- still running one is refused, and the sweep recovers its job when the lease runs out). An attempt
-- without one is an ended one: a check holds for every row an update writes, so one that wanted a hash
-- in every row would refuse the sweep's update of such an old attempt, and fail every sweep with it.
-- NOT VALID: the old attempts still open are not checked until the sweep ends them.
alter table job_attempts add constraint job_attempts_lease_token_hash_sha256
    check (case when lease_token_hash is null then outcome is not null
                else octet_length(lease_token_hash) = 32 end) not valid;

drop function if exists claim_job(text, text[], integer, timestamptz, text[]);
drop function if exists claim_jobs(text, integer, text[], integer, timestamptz, text[]);
drop function if exists heartbeat(text, uuid[], integer);
drop function if exists mark_succeeded(uuid, text, integer, text, jsonb, bytea);
drop function if exists mark_jobs_succeeded(text, uuid[], integer[], jsonb);
drop function if exists mark_failed(uuid, text, integer, text, boolean, integer, integer, integer);
drop function if exists release_job(uuid, text, integer, text);
drop function if exists raise_job_not_held(uuid, text, integer);
drop function if exists sweep_stuck(timestamptz);
