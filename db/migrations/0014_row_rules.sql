-- 0014_row_rules: the same rules on jobs and job_attempts, checked at a fraction of the cost.
-- PostgreSQL reads every CHECK constraint of a table back from its stored text, and plans it, at the
-- start of each statement that writes the table; a job's claim and its success write jobs twice and
-- job_attempts twice, so the 21 constraint expressions were read and planned four times per job: half
-- of the instructions the server spent on that job, more than the writes themselves
-- (docs/benchmarks.md, "Where a job's time goes"). Now:
--   * A rule about one column is its column's type, a domain. A domain's rules are read once per
--     session, and checked when the column is given a value (an insert, or an update that sets it).
--   * The rules that tie a row's columns together are one CHECK constraint per table calling an
--     immutable function of those columns (check_job_row, check_attempt_row): the constraint's
--     stored expression is one call, and the function is compiled once per session.
-- Every rule keeps its name: a violation is SQLSTATE 23514 with constraint_name the rule's own
-- (jobs_status_check, jobs_processing_is_locked, ...), as before. job_attempts_lease_token_hash_sha256
-- stays as it was (NOT VALID, see 0005).
--
-- The domains are made empty, the columns changed to them (no table rewrite: the type is binary the
-- same) and the domain rules added NOT VALID, then validated: the rows already there are checked by a
-- scan, not rewritten. The indexes on the changed columns are rebuilt under this migration's lock on
-- jobs: on a large table, migrate at a quiet moment.
--
-- The two row functions live here, not in db/functions: they are part of the tables' definition, and a
-- change to a rule must be a new migration that checks the rows already there, not a function file
-- re-applied over them. Only the owner may execute them (a role never writes the tables itself).
-- A return type cannot change with create or replace: the functions that return jobs' columns are
-- dropped at the end, and db/functions makes them again with the domain types in the same migrate.

create domain job_type as text collate "C";
create domain job_queue as text collate "C";
create domain job_status as text collate "C";
create domain job_payload as jsonb;
create domain job_idempotency_key as text collate "C";
create domain job_worker_id as text;
create domain job_max_attempts as integer;
create domain attempt_number as integer;
create domain attempt_outcome as text;

-- The demo's view reads jobs.type; a column a view uses cannot change type.
drop view flyers;

alter table jobs
    drop constraint jobs_type_length,
    drop constraint jobs_queue_length,
    drop constraint jobs_status_check,
    drop constraint jobs_payload_is_object,
    drop constraint jobs_idempotency_key_length,
    drop constraint jobs_idempotency_key_charset,
    drop constraint jobs_locked_by_length,
    drop constraint jobs_max_attempts_positive,
    alter column type type job_type,
    alter column queue type job_queue,
    alter column status type job_status,
    alter column payload type job_payload,
    alter column idempotency_key type job_idempotency_key,
    alter column locked_by type job_worker_id,
    alter column max_attempts type job_max_attempts;

alter table job_attempts
    drop constraint job_attempts_attempt_positive,
    drop constraint job_attempts_outcome_check,
    alter column attempt type attempt_number,
    alter column outcome type attempt_outcome;

alter domain job_type add constraint jobs_type_length check (length(value) between 1 and 100) not valid;
alter domain job_queue add constraint jobs_queue_length check (length(value) between 1 and 100) not valid;
alter domain job_status add constraint jobs_status_check
    check (value in ('pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled')) not valid;
alter domain job_payload add constraint jobs_payload_is_object check (jsonb_typeof(value) = 'object') not valid;
alter domain job_idempotency_key add constraint jobs_idempotency_key_length
    check (length(value) between 1 and 255) not valid;
-- Visible ASCII only, written as "no character outside ! to ~" (0002 says why not as a full-match regex).
alter domain job_idempotency_key add constraint jobs_idempotency_key_charset check (value !~ '[^!-~]') not valid;
alter domain job_worker_id add constraint jobs_locked_by_length check (length(value) between 1 and 200) not valid;
alter domain job_max_attempts add constraint jobs_max_attempts_positive check (value >= 1) not valid;
alter domain attempt_number add constraint job_attempts_attempt_positive check (value >= 1) not valid;
alter domain attempt_outcome add constraint job_attempts_outcome_check
    check (value in ('succeeded', 'failed', 'abandoned', 'cancelled')) not valid;

alter domain job_type validate constraint jobs_type_length;
alter domain job_queue validate constraint jobs_queue_length;
alter domain job_status validate constraint jobs_status_check;
alter domain job_payload validate constraint jobs_payload_is_object;
alter domain job_idempotency_key validate constraint jobs_idempotency_key_length;
alter domain job_idempotency_key validate constraint jobs_idempotency_key_charset;
alter domain job_worker_id validate constraint jobs_locked_by_length;
alter domain job_max_attempts validate constraint jobs_max_attempts_positive;
alter domain attempt_number validate constraint job_attempts_attempt_positive;
alter domain attempt_outcome validate constraint job_attempts_outcome_check;

-- check_job_row: the rules between a job's columns, for jobs_row_rules. True when they hold; else raises
-- 23514 (check_violation) naming the rule broken, as a CHECK constraint of that name would.
create function check_job_row(
    p_status text, p_attempts integer, p_max_attempts integer, p_last_error text,
    p_started_at timestamptz, p_finished_at timestamptz, p_locked_by text, p_lease_expires_at timestamptz
) returns boolean
language plpgsql immutable
-- No SET clause (the queue's other functions pin search_path): this runs once per row written, where a
-- setting changed and restored per call costs more than the rules, and it names only built-in
-- operators, which pg_catalog resolves before any schema of a search_path.
as $$
declare
    v_rule text;
begin
    -- Each rule as it was a CHECK constraint; a null result passes, as it does for one.
    if not (p_attempts >= 0 and p_attempts <= p_max_attempts) then
        v_rule := 'jobs_attempts_range';
    elsif not (p_status <> 'processing'
               or (p_locked_by is not null and p_started_at is not null and p_lease_expires_at is not null)) then
        v_rule := 'jobs_processing_is_locked';
    elsif not (p_status = 'processing' or (p_locked_by is null and p_lease_expires_at is null)) then
        v_rule := 'jobs_locked_only_when_processing';
    elsif not (p_status not in ('failed', 'dead') or p_last_error is not null) then
        v_rule := 'jobs_failure_has_error';
    elsif not ((p_status in ('succeeded', 'dead', 'cancelled')) = (p_finished_at is not null)) then
        v_rule := 'jobs_finished_iff_final';
    elsif not (p_status <> 'succeeded' or p_attempts >= 1) then
        v_rule := 'jobs_succeeded_was_attempted';
    else
        return true;
    end if;
    raise exception using errcode = 'check_violation', constraint = v_rule, table = 'jobs',
        message = format('new row for relation "jobs" violates check constraint "%s"', v_rule);
end;
$$;

-- check_attempt_row: the rules between an attempt's columns, for job_attempts_row_rules; as check_job_row.
create function check_attempt_row(
    p_outcome text, p_error text, p_abandon_reason text, p_started_at timestamptz, p_finished_at timestamptz
) returns boolean
language plpgsql immutable
-- No SET clause: see check_job_row.
as $$
declare
    v_rule text;
begin
    if not ((p_outcome is null) = (p_finished_at is null)) then
        v_rule := 'job_attempts_finished_iff_outcome';
    elsif not (p_outcome is null or p_outcome = 'succeeded' or p_error is not null) then
        v_rule := 'job_attempts_failure_has_error';
    elsif not (case when p_outcome = 'abandoned'
                    then coalesce(p_abandon_reason in ('lease_expired', 'handed_back'), false)
                    else p_abandon_reason is null end) then
        v_rule := 'job_attempts_abandon_reason_check';
    elsif not (p_finished_at is null or p_finished_at >= p_started_at) then
        v_rule := 'job_attempts_finish_after_start';
    else
        return true;
    end if;
    raise exception using errcode = 'check_violation', constraint = v_rule, table = 'job_attempts',
        message = format('new row for relation "job_attempts" violates check constraint "%s"', v_rule);
end;
$$;

revoke all on function check_job_row(text, integer, integer, text, timestamptz, timestamptz, text, timestamptz)
    from public;
revoke all on function check_attempt_row(text, text, text, timestamptz, timestamptz) from public;

-- The rows there were checked by the constraints these replace; validated again all the same.
alter table jobs
    drop constraint jobs_attempts_range,
    drop constraint jobs_processing_is_locked,
    drop constraint jobs_locked_only_when_processing,
    drop constraint jobs_failure_has_error,
    drop constraint jobs_finished_iff_final,
    drop constraint jobs_succeeded_was_attempted,
    add constraint jobs_row_rules check (check_job_row(status, attempts, max_attempts, last_error, started_at,
                                                       finished_at, locked_by, lease_expires_at)) not valid;
alter table jobs validate constraint jobs_row_rules;

alter table job_attempts
    drop constraint job_attempts_finished_iff_outcome,
    drop constraint job_attempts_failure_has_error,
    drop constraint job_attempts_abandon_reason_check,
    drop constraint job_attempts_finish_after_start,
    add constraint job_attempts_row_rules check (check_attempt_row(outcome, error, abandon_reason, started_at,
                                                                   finished_at)) not valid;
alter table job_attempts validate constraint job_attempts_row_rules;

-- As in 0004.
create view flyers as
select r.job_id, r.data as pdf, r.created_at
  from job_results r
  join jobs j on j.id = r.job_id
 where j.type = 'listing_flyer' and r.content_type = 'application/pdf';

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
