-- 0018_job_row_results: the functions that answer with a job return its row, jobs, whole: alone
-- (setof jobs, as retry_dead does), or as the `job` field of a named composite beside what the call
-- adds. A new column of jobs is then in every answer with no DROP FUNCTION, and reads as one:
--   select (c.job).id, (c.job).status, c.lease_token from pgqw.claim_job('w1') c;
--   select (c.job).*, c.lease_token from pgqw.claim_job('w1') c;   -- every column, flat
-- A return type cannot change with create or replace: the old functions are dropped here, and
-- db/functions makes them again in the same migrate.
--
-- The demo's flyers leave the schema: the flyers view (a listing_flyer job's PDF result, which
-- job_results holds as it holds any result) is dropped, and report_double_runs counts results.

-- claim_job, claim_jobs, claim_jobs_at: the claimed job and its lease token (its claimer's alone).
create type claimed_job as (job jobs, lease_token uuid);
-- enqueue_job, enqueue_jobs: the job, and whether this call made it (false: the key's job already was).
create type enqueued_job as (job jobs, created boolean);
-- mark_succeeded, mark_failed, mark_cancelled, release_job, mark_jobs_succeeded: the job as the call left
-- it, and already_recorded (true: an earlier try of the same call had recorded it, nothing changed).
create type recorded_job as (job jobs, already_recorded boolean);
-- cancel_job: the job as the call left it (cancelled, or still processing until its worker stops) and
-- when the cancel was first requested.
create type cancelled_job as (job jobs, cancel_requested_at timestamptz);

drop function if exists cancel_job(uuid);
drop function if exists claim_job(text, text[], integer, text[]);
drop function if exists claim_jobs(text, integer, text[], integer, text[]);
drop function if exists claim_jobs_at(timestamptz, text, integer, text[], integer, text[]);
drop function if exists enqueue_job(text, jsonb, text, text, integer, timestamptz, integer, interval);
drop function if exists enqueue_jobs(jsonb);
drop function if exists mark_cancelled(uuid, uuid);
drop function if exists mark_failed(uuid, uuid, text, boolean, integer, integer, integer);
drop function if exists mark_jobs_succeeded(uuid[], uuid[], jsonb);
drop function if exists mark_succeeded(uuid, uuid, text, jsonb, bytea);
drop function if exists release_job(uuid, uuid, text);
-- Its last column, flyers, becomes results.
drop function if exists report_double_runs(text);

drop view if exists flyers;
