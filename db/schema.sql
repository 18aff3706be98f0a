-- The schema a fresh `pgqw migrate` makes (schema pgqw), as pg_dump prints it. Generated: do not edit.
-- Regenerate after a migration or a function changes: .venv/bin/python docs/tools/dump_schema.py [DSN]
-- CI compares it with a fresh migration (tests/test_schema_dump.py).

--
-- PostgreSQL database dump
--

-- Dumped from database version 15
-- Dumped by pg_dump version 15

--
-- Name: pgqw; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA pgqw;

--
-- Name: attempt_number; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.attempt_number AS integer
	CONSTRAINT job_attempts_attempt_positive CHECK ((VALUE >= 1));

--
-- Name: attempt_outcome; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.attempt_outcome AS text
	CONSTRAINT job_attempts_outcome_check CHECK ((VALUE = ANY (ARRAY['succeeded'::text, 'failed'::text, 'abandoned'::text, 'cancelled'::text, 'timed_out'::text, 'snoozed'::text])));

--
-- Name: job_concurrency_key; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_concurrency_key AS text COLLATE pg_catalog."C"
	CONSTRAINT jobs_concurrency_key_form CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 200)));

--
-- Name: job_idempotency_key; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_idempotency_key AS text COLLATE pg_catalog."C"
	CONSTRAINT jobs_idempotency_key_charset CHECK ((VALUE !~ '[^!-~]'::text))
	CONSTRAINT jobs_idempotency_key_length CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 255)));

--
-- Name: job_max_attempts; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_max_attempts AS integer
	CONSTRAINT jobs_max_attempts_positive CHECK ((VALUE >= 1));

--
-- Name: job_payload; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_payload AS jsonb
	CONSTRAINT jobs_payload_is_object CHECK ((jsonb_typeof(VALUE) = 'object'::text));

--
-- Name: job_progress; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_progress AS jsonb
	CONSTRAINT jobs_progress_size CHECK ((octet_length((VALUE)::text) <= 8192));

--
-- Name: job_queue; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_queue AS text COLLATE pg_catalog."C"
	CONSTRAINT jobs_queue_length CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 100)));

--
-- Name: job_serial_key; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_serial_key AS text COLLATE pg_catalog."C"
	CONSTRAINT jobs_serial_key_form CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 200)));

--
-- Name: job_status; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_status AS text COLLATE pg_catalog."C"
	CONSTRAINT jobs_status_check CHECK ((VALUE = ANY (ARRAY['blocked'::text, 'pending'::text, 'processing'::text, 'succeeded'::text, 'failed'::text, 'dead'::text, 'cancelled'::text, 'expired'::text])));

--
-- Name: job_timeout_ms; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_timeout_ms AS integer
	CONSTRAINT jobs_timeout_ms_range CHECK ((VALUE >= 1));

--
-- Name: job_type; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_type AS text COLLATE pg_catalog."C"
	CONSTRAINT jobs_type_length CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 100)));

--
-- Name: job_worker_id; Type: DOMAIN; Schema: pgqw; Owner: -
--

CREATE DOMAIN pgqw.job_worker_id AS text
	CONSTRAINT jobs_locked_by_length CHECK (((length(VALUE) >= 1) AND (length(VALUE) <= 200)));

--
-- Name: check_job_row(text, integer, integer, text, timestamp with time zone, timestamp with time zone, text, timestamp with time zone); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.check_job_row(p_status text, p_attempts integer, p_max_attempts integer, p_last_error text, p_started_at timestamp with time zone, p_finished_at timestamp with time zone, p_locked_by text, p_lease_expires_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
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
    elsif not ((p_status in ('succeeded', 'dead', 'cancelled', 'expired')) = (p_finished_at is not null)) then
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

--
-- Name: jobs; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.jobs (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    type pgqw.job_type NOT NULL,
    payload pgqw.job_payload DEFAULT '{}'::jsonb NOT NULL,
    status pgqw.job_status DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts pgqw.job_max_attempts NOT NULL,
    last_error text,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    locked_by pgqw.job_worker_id,
    lease_expires_at timestamp with time zone,
    idempotency_key pgqw.job_idempotency_key NOT NULL,
    queue pgqw.job_queue DEFAULT 'default'::text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    timeout_ms pgqw.job_timeout_ms,
    deadline_at timestamp with time zone,
    expires_at timestamp with time zone,
    progress pgqw.job_progress,
    workflow_id uuid,
    batch_id uuid,
    serial_key pgqw.job_serial_key,
    serial_seq bigint,
    concurrency_key pgqw.job_concurrency_key,
    CONSTRAINT jobs_row_rules CHECK (pgqw.check_job_row((status)::text, attempts, (max_attempts)::integer, last_error, started_at, finished_at, (locked_by)::text, lease_expires_at))
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.05');

--
-- Name: cancelled_job; Type: TYPE; Schema: pgqw; Owner: -
--

CREATE TYPE pgqw.cancelled_job AS (
	job pgqw.jobs,
	cancel_requested_at timestamp with time zone
);

--
-- Name: claimed_job; Type: TYPE; Schema: pgqw; Owner: -
--

CREATE TYPE pgqw.claimed_job AS (
	job pgqw.jobs,
	lease_token uuid
);

--
-- Name: enqueued_batch_job; Type: TYPE; Schema: pgqw; Owner: -
--

CREATE TYPE pgqw.enqueued_batch_job AS (
	batch_id uuid,
	job pgqw.jobs,
	created boolean
);

--
-- Name: enqueued_job; Type: TYPE; Schema: pgqw; Owner: -
--

CREATE TYPE pgqw.enqueued_job AS (
	job pgqw.jobs,
	created boolean
);

--
-- Name: recorded_job; Type: TYPE; Schema: pgqw; Owner: -
--

CREATE TYPE pgqw.recorded_job AS (
	job pgqw.jobs,
	already_recorded boolean
);

--
-- Name: workflow_job; Type: TYPE; Schema: pgqw; Owner: -
--

CREATE TYPE pgqw.workflow_job AS (
	job pgqw.jobs,
	depends_on uuid[],
	run_anyway boolean,
	run_anyway_for uuid[]
);

--
-- Name: backoff_delay(integer, integer, integer, integer, double precision); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.backoff_delay(p_attempt integer, p_base_ms integer DEFAULT NULL::integer, p_max_jitter_ms integer DEFAULT NULL::integer, p_max_delay_ms integer DEFAULT NULL::integer, p_jitter double precision DEFAULT random()) RETURNS interval
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_settings queue_settings;
    v_ms double precision;
begin
    if p_attempt is null or p_attempt < 1 then
        raise exception using errcode = 'QV400',
            message = format('attempt must be 1 or more, got %s', coalesce(p_attempt::text, 'null')),
            column = 'attempt';
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative',
            column = case when p_base_ms < 0 then 'base_ms' when p_max_jitter_ms < 0 then 'max_jitter_ms'
                          else 'max_delay_ms' end;
    end if;
    if p_jitter is null or p_jitter < 0 or p_jitter > 1 then
        raise exception using errcode = 'QV400',
            message = format('jitter must be between 0 and 1, got %s', coalesce(p_jitter::text, 'null')),
            column = 'jitter';
    end if;
    select * into v_settings from queue_settings;
    v_ms := least(
        coalesce(p_base_ms, v_settings.backoff_base_ms) * power(2::double precision, least(p_attempt - 1, 60))
            + p_jitter * coalesce(p_max_jitter_ms, v_settings.backoff_max_jitter_ms),
        coalesce(p_max_delay_ms, v_settings.backoff_max_delay_ms));
    return make_interval(secs => round(v_ms)::double precision / 1000.0);
end;
$$;

--
-- Name: batch_status(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.batch_status(p_batch_id uuid) RETURNS TABLE(batch_id uuid, total integer, blocked integer, pending integer, processing integer, failed integer, succeeded integer, dead integer, cancelled integer, expired integer, callback_job_id uuid, callback_error text, created_at timestamp with time zone, finished_at timestamp with time zone)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_batch_id is null then
        raise exception using errcode = 'QV400', message = 'batch id must not be null', column = 'batch_id';
    end if;
    if not exists (select 1 from batches b where b.id = p_batch_id) then
        raise exception using errcode = 'QN404', message = format('batch %s does not exist', p_batch_id);
    end if;
    return query
    select b.id, b.total,
           (count(*) filter (where j.status = 'blocked'))::integer,
           (count(*) filter (where j.status = 'pending'))::integer,
           (count(*) filter (where j.status = 'processing'))::integer,
           (count(*) filter (where j.status = 'failed'))::integer,
           (count(*) filter (where j.status = 'succeeded'))::integer,
           (count(*) filter (where j.status = 'dead'))::integer,
           (count(*) filter (where j.status = 'cancelled'))::integer,
           (count(*) filter (where j.status = 'expired'))::integer,
           b.callback_job_id, b.callback_error, b.created_at, b.finished_at
      from batches b left join jobs j on j.batch_id = b.id
     where b.id = p_batch_id
     group by b.id;
end;
$$;

--
-- Name: cancel_job(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.cancel_job(p_job_id uuid) RETURNS SETOF pgqw.cancelled_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
#variable_conflict use_column
declare
    v_job jobs;
    v_requested_at timestamptz;
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null', column = 'job_id';
    end if;
    -- The row lock orders this call with a claim (which skips locked rows) and with mark_*: whichever
    -- commits first, the other sees its result.
    select j.* into v_job from jobs j where j.id = p_job_id for update;
    if not found then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    if v_job.status not in ('blocked', 'pending', 'failed', 'processing', 'dead') then
        raise exception using errcode = 'QS409',
            message = format('job %s is %s; only blocked, pending, failed, processing or dead jobs can be cancelled',
                             p_job_id, v_job.status);
    end if;

    insert into job_cancel_requests as r (job_id) values (p_job_id)
    on conflict on constraint job_cancel_requests_pkey do nothing;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;

    if v_job.status in ('blocked', 'pending', 'failed', 'dead') then
        update jobs j
           set status = 'cancelled', finished_at = greatest(now(), j.started_at)
         where j.id = p_job_id
        returning j.* into v_job;
        perform notify_watchers(p_job_id);  -- watch_job
        if v_job.workflow_id is not null or v_job.batch_id is not null then
            perform settle_jobs(array[p_job_id]);  -- its dependents and batch
        end if;
    elsif v_job.deadline_at is null or v_job.deadline_at > now() then
        -- Running: its deadline is now (least skips a null one), as a timeout's would be. The worker has what
        -- is left of its lease to end the attempt; a handler that does not look is stopped at its end.
        update jobs j set deadline_at = least(j.deadline_at, now()) where j.id = p_job_id returning j.* into v_job;
        update job_attempts a set deadline_at = least(a.deadline_at, now())
         where a.job_id = p_job_id and a.attempt = v_job.attempts;
    end if;
    return query select v_job, v_requested_at;
end;
$$;

--
-- Name: cancel_jobs(text, text, text, timestamp with time zone, timestamp with time zone, uuid, uuid, text[], integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.cancel_jobs(p_type text DEFAULT NULL::text, p_queue text DEFAULT NULL::text, p_error text DEFAULT NULL::text, p_since timestamp with time zone DEFAULT NULL::timestamp with time zone, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_workflow_id uuid DEFAULT NULL::uuid, p_batch_id uuid DEFAULT NULL::uuid, p_statuses text[] DEFAULT NULL::text[], p_limit integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_id uuid;
    v_count integer := 0;
    v_statuses text[] := coalesce(p_statuses, array['blocked', 'pending', 'failed', 'processing']);
begin
    perform check_bulk_filter(p_type, p_queue, p_error, p_since, p_until, p_limit);
    if cardinality(v_statuses) = 0 or exists (select 1 from unnest(v_statuses) as s
                                              where s is null or s not in ('blocked', 'pending', 'failed', 'processing')) then
        raise exception using errcode = 'QV400',
            message = 'statuses must be some of blocked, pending, failed and processing', column = 'statuses';
    end if;
    for v_id in
        select j.id from jobs j
         where j.status = any (v_statuses)
           and (p_type is null or j.type = p_type)
           and (p_queue is null or j.queue = p_queue)
           and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
           and (p_since is null or j.created_at >= p_since)
           and (p_until is null or j.created_at < p_until)
           and (p_workflow_id is null or j.workflow_id = p_workflow_id or j.id = p_workflow_id)
           and (p_batch_id is null or j.batch_id = p_batch_id)
           and not exists (select 1 from job_cancel_requests r where r.job_id = j.id)
         order by j.created_at, j.id
         limit p_limit
           for update skip locked
    loop
        v_count := v_count + 1;
        -- One cancelled before in this loop may have cancelled this one (a dependent of it): counted, as it
        -- matched and changed.
        continue when not exists (select 1 from jobs j where j.id = v_id and j.status = any (v_statuses));
        perform cancel_job(v_id);
    end loop;
    return v_count;
end;
$$;

--
-- Name: check_attempt_row(text, text, text, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.check_attempt_row(p_outcome text, p_error text, p_abandon_reason text, p_started_at timestamp with time zone, p_finished_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    AS $$
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

--
-- Name: check_bulk_filter(text, text, text, timestamp with time zone, timestamp with time zone, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.check_bulk_filter(p_type text, p_queue text, p_error text, p_since timestamp with time zone, p_until timestamp with time zone, p_limit integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_type is not null and (p_type !~ '\S' or length(p_type) > 100) then
        raise exception using errcode = 'QV400', message = 'type must be a non-empty text of at most 100 characters',
            column = 'type';
    end if;
    if p_queue is not null and (p_queue !~ '\S' or length(p_queue) > 100) then
        raise exception using errcode = 'QV400', message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_error is not null and (p_error = '' or length(p_error) > 1000) then
        raise exception using errcode = 'QV400', message = 'error text must be 1 to 1000 characters',
            column = 'error';
    end if;
    if p_since >= p_until then
        raise exception using errcode = 'QV400',
            message = format('since (%s) must be before until (%s)', p_since, p_until), column = 'since';
    end if;
    if p_limit is null or p_limit not between 1 and 10000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 10000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
end;
$$;

--
-- Name: check_schedule_cron(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.check_schedule_cron(p_cron text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $_$
declare
    v_names constant text[] := array['minute', 'hour', 'day of month', 'month', 'day of week'];
    v_low constant integer[] := array[0, 0, 1, 1, 0];
    v_high constant integer[] := array[59, 23, 31, 12, 7];
    v_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct',
                                      'nov', 'dec'];
    v_days constant text[] := array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    v_month_days constant integer[] := array[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    v_cron text;
    v_fields text[];
    v_item text;
    v_m text[];
    v_from integer;
    v_to integer;
    v_step integer;
    v_values integer[];
    v_dom integer[];
    v_month integer[];
    v_dow integer[];
    v_where text;
begin
    if p_cron is null then
        return 'the cron expression is null';
    end if;
    v_cron := lower(regexp_replace(p_cron, '^\s+|\s+$', '', 'g'));
    if v_cron = '' then
        return 'the cron expression is empty';
    end if;
    if length(v_cron) > 200 then
        return 'the cron expression is longer than 200 characters';
    end if;
    if v_cron like '@%' then
        if v_cron in ('@hourly', '@daily', '@midnight', '@weekly', '@monthly', '@yearly', '@annually') then
            return null;
        end if;
        return format('%s is not a macro: use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually',
                      left(v_cron, 40));
    end if;
    v_fields := regexp_split_to_array(v_cron, '\s+');
    if cardinality(v_fields) <> 5 then
        return format('a cron expression has 5 fields (minute hour day-of-month month day-of-week), this one has %s',
                      cardinality(v_fields));
    end if;
    for i in 1 .. 5 loop
        v_values := '{}';
        v_where := format('field %s (%s) %L', i, v_names[i], left(v_fields[i], 40));
        foreach v_item in array string_to_array(v_fields[i], ',') loop
            v_m := regexp_match(v_item, '^(?:(\*)|([0-9]{1,2}|[a-z]{3})(?:-([0-9]{1,2}|[a-z]{3}))?)(?:/([0-9]{1,2}))?$');
            if v_m is null then
                return format('%s: %L is not *, a number, a range a-b, or one of them with a /step', v_where,
                              left(v_item, 40));
            end if;
            -- Each bound: a number, or a name in the month and day-of-week fields.
            for j in 2 .. 3 loop
                if v_m[j] ~ '^[a-z]' then
                    if i = 4 and v_m[j] = any(v_months) then
                        v_m[j] := array_position(v_months, v_m[j])::text;
                    elsif i = 5 and v_m[j] = any(v_days) then
                        v_m[j] := (array_position(v_days, v_m[j]) - 1)::text;
                    else
                        return format('%s: %L is not a %s', v_where, v_m[j],
                                      case i when 4 then 'month (jan to dec, or 1 to 12)'
                                             when 5 then 'day (sun to sat, or 0 to 7)'
                                             else 'number' end);
                    end if;
                end if;
            end loop;
            if v_m[1] = '*' then
                v_from := v_low[i];
                v_to := v_high[i];
            else
                v_from := v_m[2]::integer;
                v_to := coalesce(v_m[3]::integer, case when v_m[4] is null then v_from else v_high[i] end);
                if v_from not between v_low[i] and v_high[i] or v_to not between v_low[i] and v_high[i] then
                    return format('%s: %s is out of range %s to %s', v_where,
                                  case when v_from not between v_low[i] and v_high[i] then v_from else v_to end,
                                  v_low[i], v_high[i]);
                end if;
                if v_m[3] is not null and v_to < v_from then
                    return format('%s: the range %s-%s runs backwards', v_where, v_from, v_to);
                end if;
                -- croniter reads a range of one value (5-5) as the whole field: refused, write the value.
                if v_m[3] is not null and v_to = v_from then
                    return format('%s: the range %s-%s has one value: write %s', v_where, v_from, v_to, v_from);
                end if;
            end if;
            -- a/step runs to the field's end; where the week ends (6 or 7) is read differently: refused.
            if i = 5 and v_m[1] is null and v_m[3] is null and v_m[4] is not null then
                return format('%s: %L: give the day-of-week step a range (a-b/step or */step)', v_where, v_item);
            end if;
            v_step := coalesce(v_m[4]::integer, 1);
            if v_step < 1 or v_step > v_high[i] - v_low[i] + 1 then
                return format('%s: the step %s is not between 1 and %s', v_where, v_step, v_high[i] - v_low[i] + 1);
            end if;
            v_values := v_values || array(select generate_series(v_from, v_to, v_step));
        end loop;
        if i = 3 then
            v_dom := v_values;
        elsif i = 4 then
            v_month := v_values;
        elsif i = 5 then
            v_dow := array(select distinct d % 7 from unnest(v_values) d);
        end if;
    end loop;
    -- With every day of the week allowed, the day-of-month field alone decides: it must fit a month given.
    if cardinality(v_dow) = 7 and not exists (
        select 1 from unnest(v_dom) d, unnest(v_month) m where d <= v_month_days[m]) then
        return format('day %s of month %s never comes', array_to_string(v_dom, ','), array_to_string(v_month, ','));
    end if;
    return null;
end;
$_$;

--
-- Name: claim_job(text, text[], integer, text[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.claim_job(p_worker_id text, p_queues text[] DEFAULT NULL::text[], p_lease_ms integer DEFAULT NULL::integer, p_task_types text[] DEFAULT NULL::text[]) RETURNS SETOF pgqw.claimed_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    -- plpgsql, not sql: its call of claim_jobs_at is planned once per session, not once per call.
    return query select * from claim_jobs_at(now(), p_worker_id, 1, p_queues, p_lease_ms, p_task_types);
end;
$$;

--
-- Name: claim_jobs(text, integer, text[], integer, text[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.claim_jobs(p_worker_id text, p_limit integer, p_queues text[] DEFAULT NULL::text[], p_lease_ms integer DEFAULT NULL::integer, p_task_types text[] DEFAULT NULL::text[]) RETURNS SETOF pgqw.claimed_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    -- The server's clock: only the owner may claim as of another time (claim_jobs_at).
    return query select * from claim_jobs_at(now(), p_worker_id, p_limit, p_queues, p_lease_ms, p_task_types);
end;
$$;

--
-- Name: claim_jobs_at(timestamp with time zone, text, integer, text[], integer, text[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.claim_jobs_at(p_now timestamp with time zone, p_worker_id text, p_limit integer, p_queues text[] DEFAULT NULL::text[], p_lease_ms integer DEFAULT NULL::integer, p_task_types text[] DEFAULT NULL::text[]) RETURNS SETOF pgqw.claimed_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_ids   uuid[];
    v_queue record;
    v_slots bigint;
    v_tokens numeric;
    -- The rated queues this claim may take from, and their buckets refilled as of p_now.
    v_rated text[] := '{}'::text[];
    v_rated_tokens numeric[] := '{}'::numeric[];
    -- Every rated queue whose limit let this claim take from it, with its bucket as of p_now and its rate:
    -- if the bucket holds back ready jobs, the time of its next token is announced (below).
    v_buckets text[] := '{}'::text[];
    v_bucket_tokens numeric[] := '{}'::numeric[];
    v_bucket_rates numeric[] := '{}'::numeric[];
    v_left numeric;
    -- Isolated jobs (job_isolation): the ones this claim may take (null: any job), the ones it must not.
    v_limit integer := p_limit;
    v_only uuid[];
    v_exclude uuid[] := '{}'::uuid[];
    -- Some task type has a timeout: only then does a job without its own look its type's up.
    v_type_timeouts boolean;
    v_cancelled uuid[];
    -- Limits per key: a queue's keys at their key_max_running, and the picks of one queue before they are cut
    -- to what each key has left.
    v_saturated text[];
    v_picked uuid[];
    v_kept uuid[];
    v_trimmed uuid[];
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters', column = 'worker_id';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
    -- At most a day: a lease is renewed by heartbeats, and a session must not park a job for years.
    if p_lease_ms is not null and (p_lease_ms < 1 or p_lease_ms > 86400000) then
        raise exception using errcode = 'QV400',
            message = format('lease must be between 1 ms and one day (86400000 ms), got %s', p_lease_ms),
            column = 'lease_ms';
    end if;
    if p_queues is not null and cardinality(p_queues) = 0 then
        raise exception using errcode = 'QV400', message = 'queues, when given, must name at least one queue',
            column = 'queues';
    end if;
    if p_task_types is not null and cardinality(p_task_types) = 0 then
        raise exception using errcode = 'QV400', message = 'task types, when given, must name at least one type',
            column = 'task_types';
    end if;
    if p_now is null or not isfinite(p_now) or p_now >= '9999-01-01' then
        raise exception using errcode = 'QV400',
            message = format('now must be a finite time before the year 9999, got %s', coalesce(p_now::text, 'null')),
            column = 'now';
    end if;
    -- Each statement below must see what committed before it (a limited queue's running jobs after its row
    -- lock): under repeatable read or serializable it would see the transaction's first snapshot.
    if current_setting('transaction_isolation') <> 'read committed' then
        raise exception using errcode = 'QV400',
            message = format('a claim must run in a read committed transaction, not %s',
                             current_setting('transaction_isolation'));
    end if;

    if exists (select 1 from job_isolation) then
        if exists (select 1 from job_isolation i join jobs p on p.id = i.job_id where p.locked_by = p_worker_id) then
            return;  -- it runs an isolated job: nothing else until that ends
        end if;
        v_only := array(
            select r.id
              from job_isolation i join jobs r on r.id = i.job_id
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
               and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and not exists (select 1 from queues q where q.name = r.queue and q.paused));
        if cardinality(v_only) = 0 then
            v_only := null;
            v_exclude := array(select i.job_id from job_isolation i);
        elsif exists (select 1 from jobs p where p.lease_expires_at is not null and p.locked_by = p_worker_id) then
            return;  -- it holds other jobs: it takes the isolated one once they end
        else
            v_limit := 1;
        end if;
    end if;

    -- Plan (measured in docs/benchmarks.md): whatever the statistics say, the ready index is read in its
    -- order up to the limit and the picked rows are updated through the primary key, so a claim costs the
    -- same with 10 or 1,000,000 jobs waiting. One generic plan per session (plan_cache_mode) spares a
    -- replan per call; it may be made on an empty table, so scans that only look cheap there are ruled
    -- out: no bitmap scan (with stale statistics, a burst, it sorted the whole backlog on every call), no
    -- sequential scan (a plan made while idle updated the picked rows by reading the whole table). The
    -- cost of those disabled paths would trip JIT compilation, which a claim never needs (jit = off).
    if not exists (select 1 from queues q
                    where q.paused or q.max_running is not null or q.jobs_per_second is not null
                       or q.key_max_running is not null) then
        -- The common case, no queue paused, limited or rated: the ready index in its order, no lock but the
        -- rows'.
        -- The rows picked here stay locked by this transaction: nothing can change them before the update.
        v_ids := array(
            select r.id
              from jobs r
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
               and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and (v_only is null or r.id = any (v_only))
               and not r.id = any (v_exclude)
             order by r.priority desc, r.run_at, r.id
             limit v_limit
               for update skip locked);
    else
        -- A limited or rated queue: its row is locked (in name order, so two claims never wait on each other
        -- in a circle) before its processing jobs are counted, so claims racing for it take turns, and each
        -- one's count (a statement after the lock, a new snapshot under read committed) sees the claims
        -- committed before it. It gives at most max_running - running jobs. The locked row is its latest
        -- version, so its bucket is what the claim before this one left: refilled by the rate × the time
        -- since (none when p_now is earlier), up to greatest(1, rate), it gives at most its whole tokens.
        -- Queues neither limited nor rated take no lock.
        v_ids := '{}';
        for v_queue in
            select q.name, q.max_running, q.jobs_per_second, q.rate_tokens, q.rate_refilled_at, q.key_max_running
              from queues q
             where (q.max_running is not null or q.jobs_per_second is not null or q.key_max_running is not null)
               and not q.paused
               and (p_queues is null or q.name = any (p_queues))
             order by q.name
               for update
        loop
            v_slots := v_limit;
            if v_queue.max_running is not null then
                select v_queue.max_running - count(*) into v_slots
                  from jobs p where p.status = 'processing' and p.queue = v_queue.name;
            end if;
            if v_queue.jobs_per_second is not null then
                -- No bucket yet (a rate set by hand): a full one.
                v_tokens := least(greatest(1, v_queue.jobs_per_second),
                                  coalesce(v_queue.rate_tokens, greatest(1, v_queue.jobs_per_second))
                                  + v_queue.jobs_per_second * greatest(0, extract(epoch from
                                        p_now - coalesce(v_queue.rate_refilled_at, p_now))));
                if v_slots >= 1 then
                    v_buckets := v_buckets || v_queue.name::text;
                    v_bucket_tokens := v_bucket_tokens || v_tokens;
                    v_bucket_rates := v_bucket_rates || v_queue.jobs_per_second;
                end if;
                v_slots := least(v_slots, floor(v_tokens));
            end if;
            continue when v_slots < 1;
            if v_queue.jobs_per_second is not null then
                v_rated := v_rated || v_queue.name::text;
                v_rated_tokens := v_rated_tokens || v_tokens;
            end if;
            -- A limit per key: the keys at it are skipped, so the next key's jobs are taken.
            v_saturated := '{}';
            if v_queue.key_max_running is not null then
                v_saturated := array(select p.concurrency_key from jobs p
                                      where p.status = 'processing' and p.queue = v_queue.name
                                        and p.concurrency_key is not null
                                      group by p.concurrency_key having count(*) >= v_queue.key_max_running);
            end if;
            v_picked := array(
                select r.id
                  from jobs r
                 where r.status in ('pending', 'failed')
                   and r.run_at <= p_now
                   and r.attempts < r.max_attempts
                   and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
                   and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
                   and r.queue = v_queue.name
                   and (p_task_types is null or r.type = any (p_task_types))
                   and (v_only is null or r.id = any (v_only))
                   and not r.id = any (v_exclude)
                   and (r.concurrency_key is null or not r.concurrency_key = any (v_saturated))
                 order by r.priority desc, r.run_at, r.id
                 limit least(v_limit, v_slots)
                   for update skip locked);
            if v_queue.key_max_running is not null then
                -- Picks of one key beyond what it has left are let go (they stay locked until this commits:
                -- other claims skip them, and take them once it has), and the slots they leave are filled from
                -- the other keys: again, with the keys now at their limit (this claim's picks counted) skipped,
                -- until a round lets nothing go (at most 10 rounds).
                v_kept := '{}';
                for v_round in 1 .. 10 loop
                    v_trimmed := array(
                        select c.id
                          from (select r.id, r.concurrency_key,
                                       row_number() over (partition by r.concurrency_key
                                                          order by r.priority desc, r.run_at, r.id) as n
                                  from jobs r where r.id = any (v_picked)) c
                         where c.concurrency_key is null
                            or c.n <= v_queue.key_max_running
                                      - (select count(*) from jobs p
                                          where p.concurrency_key = c.concurrency_key and p.queue = v_queue.name
                                            and (p.status = 'processing' or p.id = any (v_kept))));
                    v_kept := v_kept || v_trimmed;
                    exit when cardinality(v_trimmed) = cardinality(v_picked)
                              or cardinality(v_kept) >= least(v_limit, v_slots);
                    v_saturated := array(
                        select p.concurrency_key from jobs p
                         where p.queue = v_queue.name and p.concurrency_key is not null
                           and (p.status = 'processing' or p.id = any (v_kept))
                         group by p.concurrency_key having count(*) >= v_queue.key_max_running);
                    v_picked := array(
                        select r.id
                          from jobs r
                         where r.status in ('pending', 'failed')
                           and r.run_at <= p_now
                           and r.attempts < r.max_attempts
                           and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
                           and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
                           and r.queue = v_queue.name
                           and (p_task_types is null or r.type = any (p_task_types))
                           and (v_only is null or r.id = any (v_only))
                           and not r.id = any (v_exclude)
                           and not r.id = any (v_kept)
                           and (r.concurrency_key is null or not r.concurrency_key = any (v_saturated))
                         order by r.priority desc, r.run_at, r.id
                         limit least(v_limit, v_slots) - cardinality(v_kept)
                           for update skip locked);
                    exit when cardinality(v_picked) = 0;
                end loop;
                v_picked := v_kept;
            end if;
            v_ids := v_ids || v_picked;
        end loop;
        -- The queues with no row, or a row neither paused, limited nor rated.
        v_ids := v_ids || array(
            select r.id
              from jobs r
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
               and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and (v_only is null or r.id = any (v_only))
               and not r.id = any (v_exclude)
               and not exists (select 1 from queues q
                                where q.name = r.queue
                                  and (q.paused or q.max_running is not null or q.jobs_per_second is not null
                                       or q.key_max_running is not null))
             order by r.priority desc, r.run_at, r.id
             limit v_limit
               for update skip locked);
        -- The best v_limit of them; the others stay locked (skipped by other claims) until this commits.
        v_ids := array(select r.id from jobs r where r.id = any (v_ids)
                        order by r.priority desc, r.run_at, r.id limit v_limit);
        -- Each rated queue's bucket pays for what is claimed from it, still under its row's lock. A bucket
        -- nothing was claimed from is left as it was: refilling it later from its older state comes to the
        -- same tokens, and a claim that finds nothing ready writes nothing.
        update queues q
           set rate_tokens = b.tokens - b.taken,
               rate_refilled_at = greatest(q.rate_refilled_at, p_now)
          from (select t.name, t.tokens, (select count(*) from jobs r
                                           where r.id = any (v_ids) and r.queue = t.name) as taken
                  from unnest(v_rated, v_rated_tokens) as t(name, tokens)) b
         where q.name = b.name and b.taken > 0;
        -- A bucket that held back ready jobs (less than one token left, jobs of the queue still ready that
        -- this claim could take): when its next token comes is announced on pgqw_jobs_at, as a job for later
        -- is, so a listening worker that found nothing (it does not poll) claims then, on time.
        for i in 1 .. cardinality(v_buckets) loop
            v_left := v_bucket_tokens[i] - (select count(*) from jobs r where r.id = any (v_ids) and r.queue = v_buckets[i]);
            if v_left < 1 and exists (
                select 1 from jobs r
                 where r.status in ('pending', 'failed')
                   and r.run_at <= p_now
                   and r.attempts < r.max_attempts
                   and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
                   and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
                   and r.queue = v_buckets[i]
                   and (p_task_types is null or r.type = any (p_task_types))
                   and not r.id = any (v_ids)) then
                perform pg_notify('pgqw_jobs_at',
                                  greatest(1, ceil((1 - v_left) / v_bucket_rates[i] * 1000))::bigint || ' ' || v_buckets[i]);
            end if;
        end loop;
    end if;

    -- A job asked to cancel is not started (a request is made with the job's row lock, which this claim
    -- holds now; a waiting job it finds is cancelled at once, so this is a request left from before).
    if exists (select 1 from job_cancel_requests r where r.job_id = any (v_ids)) then
        with ended as (
            update jobs j
               set status = 'cancelled', finished_at = greatest(p_now, j.started_at, j.created_at)
             where j.id = any (v_ids) and exists (select 1 from job_cancel_requests r where r.job_id = j.id)
            returning j.id
        )
        select array(select e.id from ended e) into v_cancelled;
        v_ids := array(select x from unnest(v_ids) x where not x = any (v_cancelled));
        perform settle_jobs(v_cancelled);  -- their dependents and batches
    end if;

    if cardinality(v_ids) > 0 then
        v_type_timeouts := exists (select 1 from task_types t
                                    where t.timeout_ms is not null or t.code_timeout_ms is not null);
    end if;
    return query
    with claimed as (
        update jobs j
           set status = 'processing',
               attempts = j.attempts + 1,
               started_at = p_now,
               locked_by = p_worker_id,
               -- The deadline (null: none), and a lease that ends at it at the latest (least skips a null).
               deadline_at = case when j.timeout_ms is not null or v_type_timeouts then p_now + make_interval(
                   secs => coalesce(j.timeout_ms, (select t.timeout_ms from task_type_settings t where t.name = j.type))
                           / 1000.0) end,
               lease_expires_at = least(
                   p_now + make_interval(
                       secs => coalesce(p_lease_ms, (select t.lease_ms from task_type_settings t where t.name = j.type),
                                        (select s.lease_ms from queue_settings s)) / 1000.0),
                   case when j.timeout_ms is not null or v_type_timeouts then p_now + make_interval(
                       secs => coalesce(j.timeout_ms, (select t.timeout_ms from task_type_settings t where t.name = j.type))
                               / 1000.0) end)
         where j.id = any (v_ids)
        -- The lease token: a random value for this attempt, returned to this caller only. The attempt's
        -- row keeps its SHA-256, which every later call for the attempt must match.
        -- The row whole (a new column of jobs is in the answer), and what the attempt's row and the order need.
        returning j as job, j.id, j.attempts, j.locked_by, j.started_at, j.deadline_at, j.priority, j.run_at,
                  gen_random_uuid() as lease_token
    ), recorded as (
        insert into job_attempts (job_id, attempt, worker_id, started_at, deadline_at, lease_token_hash)
        select c.id, c.attempts, c.locked_by, c.started_at, c.deadline_at, sha256(uuid_send(c.lease_token))
          from claimed c
    )
    select c.job, c.lease_token from claimed c order by c.priority desc, c.run_at, c.id;
end;
$$;

--
-- Name: count_jobs_by_status(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.count_jobs_by_status() RETURNS TABLE(status text, jobs double precision)
    LANGUAGE sql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select s.status, coalesce(sum(q.value), 0)
      from unnest(array['blocked', 'pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled', 'expired'])
           with ordinality as s(status, n)
      left join queue_stats() q on q.metric = 'jobs' and q.label = s.status
     group by s.status, s.n
     order by s.n;
$$;

--
-- Name: cron_matches(text, timestamp with time zone); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.cron_matches(p_cron text, p_at timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $_$
declare
    v_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct',
                                      'nov', 'dec'];
    v_days constant text[] := array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    v_low constant integer[] := array[0, 0, 1, 1, 0];
    v_high constant integer[] := array[59, 23, 31, 12, 7];
    v_cron text;
    v_fields text[];
    v_at timestamp;
    v_now integer[];
    v_item text;
    v_m text[];
    v_from integer;
    v_to integer;
    v_hit boolean[] := array[false, false, false, false, false];
begin
    if p_cron is null or p_at is null or check_schedule_cron(p_cron) is not null then
        return null;
    end if;
    v_cron := lower(regexp_replace(p_cron, '^\s+|\s+$', '', 'g'));
    v_cron := case v_cron when '@hourly' then '0 * * * *' when '@daily' then '0 0 * * *'
                          when '@midnight' then '0 0 * * *' when '@weekly' then '0 0 * * 0'
                          when '@monthly' then '0 0 1 * *' when '@yearly' then '0 0 1 1 *'
                          when '@annually' then '0 0 1 1 *' else v_cron end;
    v_fields := regexp_split_to_array(v_cron, '\s+');
    v_at := p_at at time zone 'UTC';
    if date_trunc('minute', v_at) <> v_at then
        return false;
    end if;
    v_now := array[extract(minute from v_at), extract(hour from v_at), extract(day from v_at),
                   extract(month from v_at), extract(dow from v_at)]::integer[];
    for i in 1 .. 5 loop
        foreach v_item in array string_to_array(v_fields[i], ',') loop
            v_m := regexp_match(v_item, '^(?:(\*)|([0-9]{1,2}|[a-z]{3})(?:-([0-9]{1,2}|[a-z]{3}))?)(?:/([0-9]{1,2}))?$');
            for j in 2 .. 3 loop
                if v_m[j] ~ '^[a-z]' then
                    v_m[j] := case i when 4 then array_position(v_months, v_m[j])::text
                                     else (array_position(v_days, v_m[j]) - 1)::text end;
                end if;
            end loop;
            if v_m[1] = '*' then
                v_from := v_low[i];
                v_to := v_high[i];
            else
                v_from := v_m[2]::integer;
                v_to := coalesce(v_m[3]::integer, case when v_m[4] is null then v_from else v_high[i] end);
            end if;
            if exists (select 1 from generate_series(v_from, v_to, coalesce(v_m[4]::integer, 1)) v
                        where v = v_now[i] or (i = 5 and v % 7 = v_now[i])) then
                v_hit[i] := true;
            end if;
        end loop;
    end loop;
    if not (v_hit[1] and v_hit[2] and v_hit[4]) then
        return false;
    end if;
    if v_fields[3] <> '*' and v_fields[5] <> '*' then
        return v_hit[3] or v_hit[5];
    end if;
    return v_hit[3] and v_hit[5];
end;
$_$;

--
-- Name: schedules; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.schedules (
    name text NOT NULL,
    task_type text NOT NULL,
    cron text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    queue text,
    priority integer,
    catch_up text DEFAULT 'latest'::text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    last_slot timestamp with time zone,
    slots_after timestamp with time zone DEFAULT now() NOT NULL,
    source text DEFAULT 'sql'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_catch_up_check CHECK ((catch_up = ANY (ARRAY['latest'::text, 'all'::text, 'none'::text]))),
    CONSTRAINT schedules_cron_length CHECK (((length(cron) >= 1) AND (length(cron) <= 200))),
    CONSTRAINT schedules_name_charset CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$'::text)),
    CONSTRAINT schedules_payload_is_object CHECK ((jsonb_typeof(payload) = 'object'::text)),
    CONSTRAINT schedules_queue_length CHECK ((((length(queue) >= 1) AND (length(queue) <= 100)) AND (queue ~ '\S'::text))),
    CONSTRAINT schedules_source_check CHECK ((source = ANY (ARRAY['code'::text, 'sql'::text])))
);

--
-- Name: delete_schedule(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.delete_schedule(p_name text) RETURNS SETOF pgqw.schedules
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
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

--
-- Name: enqueue_batch(jsonb, jsonb, text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.enqueue_batch(p_jobs jsonb, p_callback jsonb DEFAULT NULL::jsonb, p_idempotency_key text DEFAULT NULL::text) RETURNS SETOF pgqw.enqueued_batch_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_batch batches;
    v_job enqueued_job;
begin
    if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' or jsonb_array_length(p_jobs) not between 1 and 10000 then
        raise exception using errcode = 'QV400', message = 'a batch is a JSON array of 1 to 10000 job objects',
            column = 'jobs';
    end if;
    if p_idempotency_key is not null and (length(p_idempotency_key) not between 1 and 255
                                          or p_idempotency_key ~ '[^!-~]') then
        raise exception using errcode = 'QV400',
            message = 'idempotency key must be 1 to 255 visible ASCII characters (! to ~, no spaces)',
            column = 'idempotency_key';
    end if;
    if p_callback is not null then
        if jsonb_typeof(p_callback) <> 'object' or jsonb_typeof(p_callback -> 'type') is distinct from 'string'
           or coalesce(jsonb_typeof(p_callback -> 'payload'), 'object') not in ('object', 'null')
           or coalesce(jsonb_typeof(p_callback -> 'queue'), 'string') not in ('string', 'null')
           or coalesce(jsonb_typeof(p_callback -> 'priority'), 'number') not in ('number', 'null')
           or coalesce(jsonb_typeof(p_callback -> 'max_attempts'), 'number') not in ('number', 'null')
           or exists (select 1 from jsonb_object_keys(p_callback) as k
                       where k not in ('type', 'payload', 'queue', 'priority', 'max_attempts')) then
            raise exception using errcode = 'QV400',
                message = 'callback must be a JSON object {type, payload, queue, priority, max_attempts} with a '
                          'type, a payload object if any, a queue text and numbers',
                column = 'callback';
        end if;
        if not exists (select 1 from task_type_settings t where t.name = p_callback ->> 'type')
           and not (select s.accept_unregistered_types from queue_settings s) then
            raise exception using errcode = 'QT422',
                message = format('task type %L of the callback is not registered', p_callback ->> 'type'),
                hint = 'register it with `pgqw tasks register --tasks <module>`';
        end if;
    end if;

    if p_idempotency_key is not null then
        insert into batches as b (idempotency_key, callback, total)
        values (p_idempotency_key, p_callback, jsonb_array_length(p_jobs))
        on conflict (idempotency_key) do nothing
        returning b.* into v_batch;
        if not found then
            select b.* into v_batch from batches b where b.idempotency_key = p_idempotency_key;
            -- In the order of p_jobs's keys where they name the batch's jobs (the same call again: its order).
            return query select v_batch.id, j, false from jobs j where j.batch_id = v_batch.id
                          order by array_position(array(select e ->> 'idempotency_key'
                                                          from jsonb_array_elements(p_jobs) as e),
                                                  j.idempotency_key::text), j.created_at, j.id;
            return;
        end if;
    else
        insert into batches as b (callback, total) values (p_callback, jsonb_array_length(p_jobs))
        returning b.* into v_batch;
    end if;

    for v_job in select * from enqueue_jobs_into(p_jobs, v_batch.id) loop
        if not v_job.created then
            raise exception using errcode = 'QI409',
                message = format('idempotency key %L already names job %s, which is not of this batch',
                                 (v_job.job).idempotency_key, (v_job.job).id),
                hint = 'a batch is made of new jobs: use new keys, or the batch''s own idempotency key to repeat it';
        end if;
        return next (v_batch.id, v_job.job, true)::enqueued_batch_job;
    end loop;
end;
$$;

--
-- Name: enqueue_job(text, jsonb, text, text, integer, timestamp with time zone, integer, interval, integer, timestamp with time zone, integer, uuid[], boolean, text, text, uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.enqueue_job(p_type text, p_payload jsonb, p_idempotency_key text, p_queue text DEFAULT NULL::text, p_priority integer DEFAULT NULL::integer, p_run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_max_attempts integer DEFAULT NULL::integer, p_unique_for interval DEFAULT NULL::interval, p_timeout_ms integer DEFAULT NULL::integer, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expire_after_ms integer DEFAULT NULL::integer, p_depends_on uuid[] DEFAULT NULL::uuid[], p_run_anyway boolean DEFAULT false, p_serial_key text DEFAULT NULL::text, p_concurrency_key text DEFAULT NULL::text, p_workflow_id uuid DEFAULT NULL::uuid) RETURNS SETOF pgqw.enqueued_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $_$
#variable_conflict use_variable
declare
    v_max_payload_bytes integer;
    v_max_attempts integer;     -- the type's, else queue_settings'
    v_type_queue text;
    v_type_priority integer;
    v_queue text;
    v_priority integer;
    v_job jobs;
    v_created boolean;
    v_key text := p_idempotency_key;
    v_window_ms bigint;
    v_due_ms bigint;
    v_notified text;            -- pg_notify's answer (void, as text): nothing
    v_known boolean;            -- the type is registered, or queue_settings accepts unregistered ones
    v_type_expire_ms integer;   -- the type's expire_after_ms
    v_expires_at timestamptz;
    v_parents uuid[];           -- p_depends_on without repeats
    v_missing uuid;
    v_workflow_id uuid := p_workflow_id;
    v_cancelled uuid[];
begin
    -- Unset queue, priority and max_attempts: the task type's (a DBA's value, else the code's), then
    -- the defaults (an unregistered type, where they are accepted, takes the defaults).
    select s.max_payload_bytes, coalesce(t.max_attempts, s.max_attempts), t.queue, t.priority,
           t.name is not null or s.accept_unregistered_types, t.expire_after_ms
      into v_max_payload_bytes, v_max_attempts, v_type_queue, v_type_priority, v_known, v_type_expire_ms
      from queue_settings s left join task_type_settings t on t.name = p_type;
    v_queue := coalesce(p_queue, v_type_queue, 'default');
    v_priority := coalesce(p_priority, v_type_priority, 0);
    if p_type is null or p_type !~ '\S' or length(p_type) > 100 then
        raise exception using errcode = 'QV400',
            message = 'type must be a non-empty text of at most 100 characters',
            column = 'type';
    end if;
    if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
        raise exception using errcode = 'QV400',
            message = format('payload must be a JSON object, got %s',
                             coalesce(jsonb_typeof(p_payload), 'null')),
            column = 'payload';
    end if;
    if octet_length(p_payload::text) > v_max_payload_bytes then
        raise exception using errcode = 'QV413',
            message = format('payload is %s bytes, more than the limit of %s',
                             octet_length(p_payload::text), v_max_payload_bytes);
    end if;
    if p_idempotency_key is null or length(p_idempotency_key) not between 1 and 255
       or p_idempotency_key ~ '[^!-~]' then
        raise exception using errcode = 'QV400',
            message = 'idempotency key must be 1 to 255 visible ASCII characters (! to ~, no spaces)',
            detail = format('got %s characters', coalesce(length(p_idempotency_key)::text, 'null')),
            column = 'idempotency_key';
    end if;
    if v_queue !~ '\S' or length(v_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_max_attempts is not null and (p_max_attempts < 1 or p_max_attempts > 1000) then
        raise exception using errcode = 'QV400',
            message = format('max_attempts must be between 1 and 1000, got %s', p_max_attempts),
            column = 'max_attempts';
    end if;
    if p_timeout_ms < 1 then
        raise exception using errcode = 'QV400',
            message = format('timeout must be at least 1 ms (or null for the task type''s), got %s', p_timeout_ms),
            column = 'timeout_ms';
    end if;
    -- The same bounds as the HTTP API's (app/models/requests.py) and enqueue_jobs': from the epoch to 366 days ahead.
    if p_run_at is not null
       and (p_run_at < timestamptz '1970-01-01 00:00:00+00' or p_run_at > now() + interval '366 days') then
        raise exception using errcode = 'QV400',
            message = 'run_at must be between 1970-01-01T00:00:00Z and a year (366 days) from now',
            detail = format('got %s', p_run_at),
            column = 'run_at';
    end if;
    -- Expiry: counted from when the job may start, which it must come after (an expiry already past, or before
    -- the job may run, would make a job that can never run).
    if p_expires_at is not null and p_expire_after_ms is not null then
        raise exception using errcode = 'QV400', message = 'give expires_at or expire_after_ms, not both',
            column = 'expire_after_ms';
    end if;
    if p_expire_after_ms < 1 then
        raise exception using errcode = 'QV400',
            message = format('expire_after_ms must be at least 1 (or null for the task type''s), got %s', p_expire_after_ms),
            column = 'expire_after_ms';
    end if;
    if p_expires_at is not null
       and (not isfinite(p_expires_at) or p_expires_at <= greatest(now(), coalesce(p_run_at, now()))) then
        raise exception using errcode = 'QV400',
            message = 'expires_at must be later than now and than run_at',
            detail = format('got %s', p_expires_at),
            column = 'expires_at';
    end if;
    -- Dependencies and keys: one test when none is given (each statement of a function costs every call).
    if p_depends_on is not null or p_serial_key is not null or p_concurrency_key is not null
       or p_run_anyway is not false then
        if length(p_serial_key) not between 1 and 200 then
            raise exception using errcode = 'QV400', message = 'serial key must be 1 to 200 characters',
                column = 'serial_key';
        end if;
        if length(p_concurrency_key) not between 1 and 200 then
            raise exception using errcode = 'QV400', message = 'concurrency key must be 1 to 200 characters',
                column = 'concurrency_key';
        end if;
        if p_run_anyway is null then
            raise exception using errcode = 'QV400', message = 'run_anyway must not be null', column = 'run_anyway';
        end if;
        if cardinality(p_depends_on) > 0 then
            if array_position(p_depends_on, null) is not null then
                raise exception using errcode = 'QV400', message = 'depends_on must not hold a null job id',
                    column = 'depends_on';
            end if;
            v_parents := array(select distinct d from unnest(p_depends_on) as d);
            if cardinality(v_parents) > 1000 then
                raise exception using errcode = 'QW422',
                    message = format('a job may depend on at most 1000 jobs, got %s', cardinality(v_parents));
            end if;
        end if;
    end if;
    v_expires_at := coalesce(p_expires_at, greatest(now(), coalesce(p_run_at, now()))
                                           + make_interval(secs => coalesce(p_expire_after_ms, v_type_expire_ms) / 1000.0));

    -- Unique for a window: the key with the start of the window that holds the job's run_at (now when
    -- unset), windows counted from the epoch in UTC. Within a window it is one key, so the unique
    -- constraint still decides between concurrent calls; the next window's key is a new one.
    -- The stored form of a windowed key, `<key>@<window start>`, is also that of a schedule's slots
    -- (enqueue_schedule_slots: `schedule:<name>@<slot>`): a plain key in that form would be some window's
    -- key, and a windowed key starting with `schedule:` some slot's.
    if p_unique_for is null and p_idempotency_key !~ '^schedule:'
       and p_idempotency_key ~ '@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$' then
        raise exception using errcode = 'QI422',
            message = format('idempotency key %L ends in @ and a window start, the stored form of a unique_for '
                             'key: without unique_for a key may not end like that', p_idempotency_key),
            hint = 'use another key, or give unique_for to make it unique within a window';
    end if;
    if p_unique_for is not null and p_idempotency_key ~ '^schedule:' then
        raise exception using errcode = 'QI422',
            message = format('idempotency key %L starts with schedule:, the form of a schedule''s slots: with '
                             'unique_for a key may not start like that', p_idempotency_key),
            hint = 'use another key';
    end if;
    if p_unique_for is not null then
        if p_unique_for < interval '1 millisecond' or p_unique_for > interval '366 days' then
            raise exception using errcode = 'QV400',
                message = 'unique_for must be between 1 millisecond and 366 days',
                detail = format('got %s', p_unique_for),
                column = 'unique_for';
        end if;
        v_window_ms := floor(extract(epoch from p_unique_for) * 1000);
        v_key := p_idempotency_key || '@' || to_char(
            to_timestamp((floor(extract(epoch from coalesce(p_run_at, now())) * 1000 / v_window_ms) * v_window_ms)
                         / 1000.0) at time zone 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
        if length(v_key) > 255 then
            raise exception using errcode = 'QV400',
                message = 'idempotency key with unique_for must be at most 230 characters (the window start is added)',
                detail = format('got %s characters', length(p_idempotency_key)),
                column = 'idempotency_key';
        end if;
    end if;

    -- Every argument is well formed: is the type one somebody registered?
    if not v_known then
        raise exception using errcode = 'QT422',
            message = format('task type %L is not registered: register it with `pgqw tasks register --tasks '
                             '<module>` or `pgqw migrate --tasks <module>` (a worker that runs it registers it '
                             'at start too)', p_type),
            detail = (select coalesce('registered: ' || string_agg(t.name, ', ' order by t.name),
                                      'no type is registered')
                        from (select r.name from task_types r order by r.name limit 20) t),
            hint = 'to accept jobs of types not registered yet, a DBA sets '
                   'queue_settings.accept_unregistered_types = true';
    end if;

    if v_parents is not null then
        -- The parents are locked until this commits: a parent's end waits for the dependency to be seen, or
        -- this waits for the end and judge_blocked below sees it. (Not a share lock: a parent may be put in
        -- the workflow below, and two enqueues sharing a parent must not both hold it shared, then wait.)
        perform 1 from jobs p where p.id = any (v_parents) order by p.id for no key update;
        select m into v_missing from unnest(v_parents) as m
         where not exists (select 1 from jobs p where p.id = m) limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s, a dependency, does not exist', v_missing), column = 'depends_on';
        end if;
        if v_workflow_id is null then
            select coalesce(p.workflow_id, p.id) into v_workflow_id from jobs p where p.id = p_depends_on[1];
        end if;
    end if;

    loop
        insert into jobs as j (type, payload, max_attempts, idempotency_key, queue, priority, run_at, timeout_ms,
                               expires_at, status, workflow_id, serial_key, serial_seq, concurrency_key)
        values (p_type, p_payload, coalesce(p_max_attempts, v_max_attempts),
                v_key, v_queue, v_priority, coalesce(p_run_at, now()), p_timeout_ms, v_expires_at,
                case when v_parents is null then 'pending' else 'blocked' end, v_workflow_id, p_serial_key,
                case when p_serial_key is not null then nextval('job_serial_seq') end, p_concurrency_key)
        on conflict on constraint jobs_idempotency_key_key do nothing
        returning j.* into v_job;
        v_created := found;
        exit when v_created;
        -- The key exists (the insert waited for its inserter to commit). Read it back.
        select j.* into v_job from jobs j where j.idempotency_key = v_key;
        exit when found;
        -- It was deleted in between: try the insert again.
    end loop;

    -- The same request again returns the job. A queue or priority the request leaves unset is not
    -- compared: the job took the type's value when it was made, and a DBA or a new release may have
    -- changed the type's since, which does not make the repeated request a different one.
    if not v_created and (v_job.type <> p_type or v_job.payload <> p_payload
                          or (p_queue is not null and v_job.queue <> p_queue)
                          or (p_priority is not null and v_job.priority <> p_priority)) then
        raise exception using errcode = 'QI409',
            message = format('idempotency key %L was already used for a different job', v_key),
            detail = format('existing job %s has type %s in queue %s; the key may only be reused for the same job',
                            v_job.id, v_job.type, v_job.queue),
            hint = 'use a new idempotency key for a different request';
    end if;

    if v_created and v_parents is not null then
        -- Blocked until its parents release it: judged now, as a parent's end would (a parent already ended
        -- may release it, or cancel it at once); judge_blocked wakes a worker if it may run.
        insert into job_dependencies (job_id, parent_id, run_anyway)
        select v_job.id, d, p_run_anyway from unnest(v_parents) as d;
        -- A parent in no workflow joins this one: a job with dependents is always in a workflow, so the end
        -- of a job in none has nothing to settle.
        update jobs p set workflow_id = v_workflow_id where p.id = any (v_parents) and p.workflow_id is null;
        v_cancelled := judge_blocked(array[v_job.id]);
        select j.* into v_job from jobs j where j.id = v_job.id;
    elsif v_created and has_waiters(v_job.queue) then
        -- Only when a worker waits for the queue (has_waiters): a busy worker claims again before it waits.
        -- Delivered at commit. How far ahead is measured now, as late as the function can: a transaction
        -- that stays open after this call makes the worker wake that much later (its poll still runs).
        v_due_ms := ceil(extract(epoch from v_job.run_at - clock_timestamp()) * 1000);
        -- An assignment, not perform: an expression alone is evaluated without starting an executor.
        if v_job.run_at <= now() or v_due_ms <= 0 then
            v_notified := pg_notify('pgqw_jobs', v_job.queue);
        else
            v_notified := pg_notify('pgqw_jobs_at', v_due_ms || ' ' || v_job.queue);
        end if;
    end if;

    return query select v_job, v_created;
end;
$_$;

--
-- Name: enqueue_jobs(jsonb); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.enqueue_jobs(p_jobs jsonb) RETURNS SETOF pgqw.enqueued_job
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select * from enqueue_jobs_into(p_jobs, null);
$$;

--
-- Name: enqueue_jobs_into(jsonb, uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.enqueue_jobs_into(p_jobs jsonb, p_batch_id uuid) RETURNS SETOF pgqw.enqueued_job
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $_$
#variable_conflict use_variable
declare
    v_settings queue_settings;
    v_types text[];
    v_payloads jsonb[];
    v_keys text[];
    v_queues text[];
    v_priorities integer[];
    v_run_ats timestamptz[];
    v_max_attempts integer[];
    v_timeouts integer[];
    v_expiries timestamptz[];
    v_registered boolean[];
    v_new jobs[];
    v_bad record;
    v_queue text;
    v_later record;
    v_due_ms bigint;
    -- Dependencies, keys and workflows: read only when some element gives one (v_orchestrated).
    v_orchestrated boolean;
    v_ids uuid[];               -- each element's id, made here so that later elements can name it
    v_serial_keys text[];
    v_serial_seqs bigint[];
    v_concurrency_keys text[];
    v_workflows uuid[];
    v_blocked boolean[];
    v_run_anyway boolean[];
    v_parents uuid[];
    v_cancelled uuid[];
    v_ref record;
begin
    select * into v_settings from queue_settings;
    if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' then
        raise exception using errcode = 'QV400', message = 'jobs must be a JSON array of job objects',
            column = 'jobs';
    end if;
    if jsonb_array_length(p_jobs) > 10000 then
        raise exception using errcode = 'QV400',
            message = format('at most 10000 jobs per call, got %s', jsonb_array_length(p_jobs)),
            column = 'jobs';
    end if;
    select e.n, jsonb_typeof(e.elem) as kind into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where jsonb_typeof(e.elem) <> 'object' order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('job %s must be a JSON object, got %s', v_bad.n, v_bad.kind),
            column = 'jobs';
    end if;
    -- Fields of the wrong JSON kind would otherwise be turned into text ({"type": {"x": 1}} stored as
    -- the type '{"x": 1}'). A JSON null counts as absent: the field's default applies.
    -- Each field looked up by name (no set of every element's fields to build): the first element with a
    -- field of the wrong kind, and its first such field by name.
    select e.n, f.key, f.kind || coalesce(' or ' || f.also, '') as expected, jsonb_typeof(e.elem -> f.key) as kind
      into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
      cross join (values ('delay_ms', 'number', null), ('expire_after_ms', 'number', null),
                         ('expires_at', 'string', null), ('depends_on', 'array', null), ('run_anyway', 'boolean', 'array'),
                         ('serial_key', 'string', null), ('concurrency_key', 'string', null),
                         ('workflow_id', 'string', null), ('idempotency_key', 'string', null),
                         ('max_attempts', 'number', null), ('priority', 'number', null), ('queue', 'string', null),
                         ('run_at', 'string', null), ('timeout_ms', 'number', null), ('type', 'string', null),
                         ('unique_for_ms', 'number', null)) as f(key, kind, also)
     where jsonb_typeof(e.elem -> f.key) not in ('null', f.kind) and jsonb_typeof(e.elem -> f.key) is distinct from f.also
     order by e.n, f.key limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: %s must be a JSON %s, got %s', v_bad.n, v_bad.key, v_bad.expected, v_bad.kind),
            column = 'jobs';
    end if;

    begin
        select array_agg(e.elem ->> 'type' order by e.n),
               array_agg(e.elem -> 'payload' order by e.n),
               array_agg(e.elem ->> 'idempotency_key' order by e.n),
               array_agg(coalesce(e.elem ->> 'queue', t.queue, 'default') order by e.n),
               array_agg(coalesce((e.elem ->> 'priority')::integer, t.priority, 0) order by e.n),
               array_agg(w.run_at order by e.n),
               array_agg(coalesce((e.elem ->> 'max_attempts')::integer, t.max_attempts, v_settings.max_attempts)
                         order by e.n),
               array_agg((e.elem ->> 'timeout_ms')::integer order by e.n),
               -- Counted from when the job may start (enqueue_job's rule).
               array_agg(coalesce((e.elem ->> 'expires_at')::timestamptz,
                                  greatest(now(), w.run_at) + make_interval(
                                      secs => coalesce((e.elem ->> 'expire_after_ms')::integer, t.expire_after_ms) / 1000.0))
                         order by e.n),
               array_agg(t.name is not null order by e.n)
          into v_types, v_payloads, v_keys, v_queues, v_priorities, v_run_ats, v_max_attempts, v_timeouts,
               v_expiries, v_registered
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          cross join lateral (
              select coalesce((e.elem ->> 'run_at')::timestamptz,
                              now() + make_interval(secs => (e.elem ->> 'delay_ms')::bigint / 1000.0), now()) as run_at
          ) w
          -- Unset queue, priority and max_attempts: the task type's, then the defaults.
          left join task_type_settings t on t.name = e.elem ->> 'type';
    exception when data_exception then
        raise exception using errcode = 'QV400',
            message = 'a job has a priority, run_at, delay_ms, max_attempts, timeout_ms, expires_at or expire_after_ms '
                      'of the wrong type',
            column = 'jobs';
    end;
    if exists (select 1 from jsonb_array_elements(p_jobs) as e(elem)
                where (e.elem ? 'run_at' and jsonb_typeof(e.elem -> 'run_at') <> 'null'
                       and e.elem ? 'delay_ms' and jsonb_typeof(e.elem -> 'delay_ms') <> 'null')
                   or (e.elem ->> 'delay_ms')::numeric < 0) then
        raise exception using errcode = 'QV400', message = 'a job gives both run_at and delay_ms, or a negative delay_ms',
            column = 'jobs';
    end if;
    select e.n into v_bad from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where jsonb_typeof(e.elem -> 'expires_at') = 'string' and jsonb_typeof(e.elem -> 'expire_after_ms') = 'number'
     order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s gives both expires_at and expire_after_ms', v_bad.n), column = 'jobs';
    end if;
    if v_types is null then
        return;  -- an empty array: nothing to do
    end if;

    -- Each element's limits are enqueue_job's (max_attempts 1 to 1000; run_at, or now + delay_ms, from
    -- the epoch to 366 days ahead), which are the HTTP API's (app/models/requests.py).
    select b.n, case
             when b.type is null or b.type !~ '\S' or length(b.type) > 100
                 then 'type must be a non-empty text of at most 100 characters'
             when b.payload is null or jsonb_typeof(b.payload) <> 'object'
                 then 'payload must be a JSON object'
             when b.key is null or length(b.key) not between 1 and 255 or b.key ~ '[^!-~]'
                 then 'idempotency_key must be 1 to 255 visible ASCII characters (! to ~, no spaces)'
             when b.queue !~ '\S' or length(b.queue) > 100
                 then 'queue must be a non-empty text of at most 100 characters'
             when b.max_attempts < 1 or b.max_attempts > 1000
                 then 'max_attempts must be between 1 and 1000'
             when b.timeout_ms < 1
                 then 'timeout_ms must be at least 1 (or null for the task type''s)'
             when b.expire_after_ms < 1
                 then 'expire_after_ms must be at least 1 (or null for the task type''s)'
             when b.run_at < timestamptz '1970-01-01 00:00:00+00' or b.run_at > now() + interval '366 days'
                 then 'run_at (or now + delay_ms) must be between 1970-01-01T00:00:00Z and a year (366 days) from now'
             when not isfinite(b.expires_at) or b.expires_at <= greatest(now(), b.run_at)
                 then 'expires_at must be later than now and than run_at'
             else format('payload is larger than the limit of %s bytes', v_settings.max_payload_bytes)
           end as problem,
           b.payload is not null and jsonb_typeof(b.payload) = 'object'
             and octet_length(b.payload::text) > v_settings.max_payload_bytes as too_large
      into v_bad
      from unnest(v_types, v_payloads, v_keys, v_queues, v_max_attempts, v_run_ats, v_timeouts, v_expiries,
                  array(select (e.elem ->> 'expire_after_ms')::integer
                          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n) order by e.n))
           with ordinality as b(type, payload, key, queue, max_attempts, run_at, timeout_ms, expires_at, expire_after_ms, n)
     where b.type is null or b.type !~ '\S' or length(b.type) > 100
        or b.payload is null or jsonb_typeof(b.payload) <> 'object'
        or b.key is null or length(b.key) not between 1 and 255 or b.key ~ '[^!-~]'
        or b.queue !~ '\S' or length(b.queue) > 100
        or b.max_attempts < 1 or b.max_attempts > 1000
        or b.timeout_ms < 1
        or b.expire_after_ms < 1
        or not isfinite(b.expires_at) or b.expires_at <= greatest(now(), b.run_at)
        or b.run_at < timestamptz '1970-01-01 00:00:00+00' or b.run_at > now() + interval '366 days'
        or octet_length(b.payload::text) > v_settings.max_payload_bytes
     order by b.n limit 1;
    if found then
        raise exception using errcode = case when v_bad.too_large and v_bad.problem like 'payload is larger%'
                                             then 'QV413' else 'QV400' end,
            message = format('job %s: %s', v_bad.n, v_bad.problem),
            column = 'jobs';
    end if;
    -- Unique for a window (enqueue_job's p_unique_for): the key with the start of its run_at's window.
    select e.n into v_bad from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where (e.elem ->> 'unique_for_ms')::numeric not between 1 and 31622400000 order by e.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: unique_for_ms must be between 1 and 31622400000 (366 days)', v_bad.n),
            column = 'jobs';
    end if;
    -- Keys in the stored form of another kind of key (as in enqueue_job): a plain one that ends as a windowed
    -- key does, a windowed one that starts as a schedule's slot does.
    select e.n, e.elem ->> 'idempotency_key' as key, e.elem ->> 'unique_for_ms' is null as plain into v_bad
      from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
     where case when e.elem ->> 'unique_for_ms' is null
                then e.elem ->> 'idempotency_key' !~ '^schedule:' and e.elem ->> 'idempotency_key'
                     ~ '@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'
                else e.elem ->> 'idempotency_key' ~ '^schedule:' end
     order by e.n limit 1;
    if found then
        raise exception using errcode = 'QI422',
            message = case when v_bad.plain
                           then format('job %s: idempotency key %L ends in @ and a window start, the stored form of a '
                                       'unique_for_ms key: without unique_for_ms a key may not end like that',
                                       v_bad.n, v_bad.key)
                           else format('job %s: idempotency key %L starts with schedule:, the form of a schedule''s '
                                       'slots: with unique_for_ms a key may not start like that', v_bad.n, v_bad.key)
                      end,
            hint = 'use another key';
    end if;
    select array_agg(case when e.elem ->> 'unique_for_ms' is null then b.key
                          else b.key || '@' || to_char(to_timestamp(
                              (floor(extract(epoch from b.run_at) * 1000 / floor((e.elem ->> 'unique_for_ms')::numeric))
                               * floor((e.elem ->> 'unique_for_ms')::numeric)) / 1000.0) at time zone 'UTC',
                              'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') end
                     order by b.n)
      into v_keys
      from unnest(v_keys, v_run_ats) with ordinality as b(key, run_at, n)
      join jsonb_array_elements(p_jobs) with ordinality as e(elem, n) on e.n = b.n;
    select b.n into v_bad from unnest(v_keys) with ordinality as b(key, n) where length(b.key) > 255 order by b.n limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('job %s: idempotency_key with unique_for_ms must be at most 230 characters '
                             '(the window start is added)', v_bad.n),
            column = 'jobs';
    end if;
    select k.key into v_bad from unnest(v_keys) as k(key) group by k.key having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('idempotency key %L appears twice in one batch', v_bad.key),
            column = 'jobs';
    end if;

    -- Every element is well formed: is each type one somebody registered?
    if not v_settings.accept_unregistered_types then
        select b.n, b.type into v_bad from unnest(v_types, v_registered) with ordinality as b(type, registered, n)
         where not b.registered order by b.n limit 1;
        if found then
            raise exception using errcode = 'QT422',
                message = format('job %s: task type %L is not registered: register it with `pgqw tasks register '
                                 '--tasks <module>` or `pgqw migrate --tasks <module>` (a worker that runs it '
                                 'registers it at start too)', v_bad.n, v_bad.type),
                detail = (select coalesce('registered: ' || string_agg(t.name, ', ' order by t.name),
                                          'no type is registered')
                            from (select r.name from task_types r order by r.name limit 20) t),
                hint = 'to accept jobs of types not registered yet, a DBA sets '
                       'queue_settings.accept_unregistered_types = true';
        end if;
    end if;
    -- Dependencies, keys, workflows and batches: read only when some element gives one.
    v_orchestrated := p_batch_id is not null or exists (
        select 1 from jsonb_array_elements(p_jobs) as e(elem)
         where e.elem ?| array['depends_on', 'run_anyway', 'serial_key', 'concurrency_key', 'workflow_id']);
    if v_orchestrated then
        select e.n, case when length(e.elem ->> 'serial_key') not between 1 and 200
                         then 'serial_key must be 1 to 200 characters'
                         when length(e.elem ->> 'concurrency_key') not between 1 and 200
                         then 'concurrency_key must be 1 to 200 characters'
                         else 'workflow_id must be a UUID' end as problem into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
         where length(e.elem ->> 'serial_key') not between 1 and 200
            or length(e.elem ->> 'concurrency_key') not between 1 and 200
            or e.elem ->> 'workflow_id' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
         order by e.n limit 1;
        if found then
            raise exception using errcode = 'QV400', message = format('job %s: %s', v_bad.n, v_bad.problem),
                column = 'jobs';
        end if;
        -- run_anyway as an array: one boolean per depends_on item.
        select e.n, case when exists (select 1 from jsonb_array_elements(e.elem -> 'run_anyway') as f(flag)
                                       where jsonb_typeof(f.flag) <> 'boolean')
                         then 'run_anyway, as an array, must hold only booleans'
                         else format('run_anyway, as an array, must hold one boolean per depends_on item (%s), '
                                     'got %s', coalesce(jsonb_array_length(
                                         case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                              then e.elem -> 'depends_on' end), 0),
                                     jsonb_array_length(e.elem -> 'run_anyway')) end as problem into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
         where jsonb_typeof(e.elem -> 'run_anyway') = 'array'
           and (jsonb_array_length(e.elem -> 'run_anyway')
                  <> coalesce(jsonb_array_length(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                      then e.elem -> 'depends_on' end), 0)
                or exists (select 1 from jsonb_array_elements(e.elem -> 'run_anyway') as f(flag)
                            where jsonb_typeof(f.flag) <> 'boolean'))
         order by e.n limit 1;
        if found then
            raise exception using errcode = 'QV400', message = format('job %s: %s', v_bad.n, v_bad.problem),
                column = 'jobs';
        end if;
        -- Each item of a depends_on: a job id, or the number of an earlier element of this call.
        select e.n, r.item into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          cross join lateral jsonb_array_elements(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                       then e.elem -> 'depends_on' else '[]' end) as r(item)
         where case jsonb_typeof(r.item)
                   when 'string' then r.item #>> '{}' !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                   when 'number' then (r.item #>> '{}')::numeric <> floor((r.item #>> '{}')::numeric)
                                      or (r.item #>> '{}')::numeric not between 1 and e.n - 1
                   else true end
         order by e.n limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s: depends_on item %s is neither a job id nor the number of an earlier element '
                                 'of this call (a job depends only on jobs enqueued before it, so no cycle can be made)',
                                 v_bad.n, v_bad.item),
                column = 'jobs';
        end if;
        select e.n, count(distinct r.item) as many into v_bad
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n)
          cross join lateral jsonb_array_elements(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                       then e.elem -> 'depends_on' else '[]' end) as r(item)
         group by e.n having count(distinct r.item) > 1000 order by e.n limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s: a job may depend on at most 1000 jobs, got %s', v_bad.n, v_bad.many),
                column = 'jobs';
        end if;
        -- The parents that exist already, locked until this commits, as enqueue_job's are.
        v_parents := array(
            select distinct (r.item #>> '{}')::uuid
              from jsonb_array_elements(p_jobs) as e(elem)
              cross join lateral jsonb_array_elements(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                           then e.elem -> 'depends_on' else '[]' end) as r(item)
             where jsonb_typeof(r.item) = 'string');
        perform 1 from jobs p where p.id = any (v_parents) order by p.id for no key update;
        select m as id into v_bad from unnest(v_parents) as m
         where not exists (select 1 from jobs p where p.id = m) limit 1;
        if found then
            raise exception using errcode = 'QW422',
                message = format('job %s, a dependency, does not exist', v_bad.id), column = 'jobs';
        end if;
        v_ids := array(select gen_random_uuid() from generate_series(1, cardinality(v_types)));
        select array_agg(e.elem ->> 'serial_key' order by e.n),
               array_agg(e.elem ->> 'concurrency_key' order by e.n),
               array_agg((e.elem ->> 'workflow_id')::uuid order by e.n),
               array_agg(coalesce(jsonb_array_length(case when jsonb_typeof(e.elem -> 'depends_on') = 'array'
                                                          then e.elem -> 'depends_on' end), 0) > 0 order by e.n),
               array_agg(case when jsonb_typeof(e.elem -> 'run_anyway') = 'boolean'
                              then (e.elem ->> 'run_anyway')::boolean else false end order by e.n)
          into v_serial_keys, v_concurrency_keys, v_workflows, v_blocked, v_run_anyway
          from jsonb_array_elements(p_jobs) with ordinality as e(elem, n);
        -- In element order, so that an element's workflow is known before a later one takes it: the first
        -- parent's workflow, else that parent's id.
        v_serial_seqs := array_fill(null::bigint, array[cardinality(v_types)]);
        for i in 1 .. cardinality(v_types) loop
            if v_serial_keys[i] is not null then
                v_serial_seqs[i] := nextval('job_serial_seq');
            end if;
            if v_workflows[i] is null and v_blocked[i] then
                v_workflows[i] := (
                    select case jsonb_typeof(r.item)
                               -- An earlier element: its workflow, else the job its key names already (one
                               -- made before with that key), else the id it is about to get.
                               when 'number' then coalesce(
                                   v_workflows[(r.item #>> '{}')::integer],
                                   (select coalesce(p.workflow_id, p.id) from jobs p
                                     where p.idempotency_key = v_keys[(r.item #>> '{}')::integer]),
                                   v_ids[(r.item #>> '{}')::integer])
                               else (select coalesce(p.workflow_id, p.id) from jobs p where p.id = (r.item #>> '{}')::uuid)
                           end
                      from jsonb_array_elements(p_jobs -> (i - 1) -> 'depends_on') with ordinality as r(item, k)
                     order by r.k limit 1);
            end if;
            -- An earlier element it depends on joins its workflow (a job with dependents is always in one).
            if v_blocked[i] and v_workflows[i] is not null then
                for v_ref in select (r.item #>> '{}')::integer as k
                               from jsonb_array_elements(p_jobs -> (i - 1) -> 'depends_on') as r(item)
                              where jsonb_typeof(r.item) = 'number'
                loop
                    v_workflows[v_ref.k] := coalesce(v_workflows[v_ref.k], v_workflows[i]);
                end loop;
            end if;
        end loop;
    end if;

    -- The inserted rows are kept (v_new), so the usual case, every key new, needs no second
    -- look at the table: only keys that already existed are read back by key.
    with inserted as (
        -- Without dependencies, keys or a batch (v_orchestrated false) the arrays of those are null, which
        -- unnest reads as nulls: the id and status take their defaults.
        insert into jobs as j (type, payload, max_attempts, idempotency_key, queue, priority, run_at, timeout_ms,
                               expires_at, id, status, workflow_id, batch_id, serial_key, serial_seq, concurrency_key)
        select b.type, b.payload, b.max_attempts, b.key, b.queue, b.priority, b.run_at, b.timeout_ms, b.expires_at,
               coalesce(b.id, gen_random_uuid()), case when b.blocked then 'blocked' else 'pending' end,
               b.workflow_id, p_batch_id, b.serial_key, b.serial_seq, b.concurrency_key
          from unnest(v_types, v_payloads, v_keys, v_queues, v_priorities, v_run_ats, v_max_attempts, v_timeouts,
                      v_expiries, v_ids, v_blocked, v_workflows, v_serial_keys, v_serial_seqs, v_concurrency_keys)
               as b(type, payload, key, queue, priority, run_at, max_attempts, timeout_ms, expires_at, id, blocked,
                    workflow_id, serial_key, serial_seq, concurrency_key)
        on conflict on constraint jobs_idempotency_key_key do nothing
        returning j
    )
    select coalesce(array_agg(i.j), '{}') into v_new from inserted i;

    if cardinality(v_new) < cardinality(v_keys) then
        -- A new statement, a new snapshot: the keys that already existed are read as committed now.
        -- As in enqueue_job, a queue or priority the element leaves unset is not compared.
        select b.n, b.key, j.id into v_bad
          from unnest(v_types, v_payloads, v_keys, v_queues, v_priorities)
               with ordinality as b(type, payload, key, queue, priority, n)
          join jsonb_array_elements(p_jobs) with ordinality as e(elem, n) on e.n = b.n
          join jobs j on j.idempotency_key = b.key
          left join unnest(v_new) as c on c.idempotency_key = b.key
         where c.idempotency_key is null
           and (j.type <> b.type or j.payload <> b.payload
                or (e.elem ->> 'queue' is not null and j.queue <> b.queue)
                or (e.elem ->> 'priority' is not null and j.priority <> b.priority))
         order by b.n limit 1;
        if found then
            raise exception using errcode = 'QI409',
                message = format('job %s: idempotency key %L was already used for a different job', v_bad.n, v_bad.key),
                detail = format('existing job %s', v_bad.id),
                hint = 'use a new idempotency key for a different request';
        end if;
    end if;

    if v_orchestrated and true = any (v_blocked) then
        -- Each new blocked job's parents, by id: an earlier element's is the job its key names (made now, or
        -- the one made before with that key).
        -- A parent named twice is waited for as strictly as either mention asks (run anyway only if both do).
        insert into job_dependencies (job_id, parent_id, run_anyway)
        select c.id, case jsonb_typeof(r.item)
                         when 'number' then (select j.id from jobs j where j.idempotency_key = v_keys[(r.item #>> '{}')::integer])
                         else (r.item #>> '{}')::uuid end,
               -- The element's one flag, or the item's own of an array of them.
               bool_and(coalesce((p_jobs -> (b.n::integer - 1) -> 'run_anyway' -> (r.k::integer - 1))::boolean,
                                 v_run_anyway[b.n]))
          from unnest(v_keys) with ordinality as b(key, n)
          join unnest(v_new) as c on c.idempotency_key = b.key
          cross join lateral jsonb_array_elements(case when v_blocked[b.n] then p_jobs -> (b.n::integer - 1) -> 'depends_on'
                                                       else '[]' end) with ordinality as r(item, k)
         group by 1, 2
        on conflict on constraint job_dependencies_pkey do nothing;
        -- The parents made before this call under an element's key were not locked above: they are now (a
        -- parent's end must wait for these dependencies, or be seen by judge_blocked below); and a parent in
        -- no workflow (one made before, or a job named by id) joins its first dependent's.
        perform 1 from jobs p
         where p.id in (select d.parent_id from job_dependencies d join unnest(v_new) as c on c.id = d.job_id)
           and not p.id = any (v_parents)
         order by p.id for no key update;
        update jobs p set workflow_id = w.workflow_id
          from (select distinct on (d.parent_id) d.parent_id, c.workflow_id
                  from job_dependencies d join unnest(v_new) as c on c.id = d.job_id
                 order by d.parent_id, c.id) w
         where p.id = w.parent_id and p.workflow_id is null;
        -- Judged now, as a parent's end would; a job cancelled so (a parent already cancelled) cancels its own.
        v_cancelled := judge_blocked(array(select c.id from unnest(v_new) as c where c.status = 'blocked'));
        perform settle_jobs(v_cancelled);
    end if;

    for v_queue in
        select distinct c.queue from unnest(v_new) as c where c.run_at <= now() and c.status = 'pending'
    loop
        continue when not has_waiters(v_queue);  -- nobody waits: a busy worker claims again before it does
        perform pg_notify('pgqw_jobs', v_queue);
    end loop;
    -- Jobs for later: the queue's earliest, and whether more of it come due after that one (a worker then
    -- asks next_run_at when that time comes). Delivered at commit, measured now (as enqueue_job does).
    for v_later in
        select c.queue, min(c.run_at) as first_at, max(c.run_at) > min(c.run_at) as more
          from unnest(v_new) as c where c.run_at > now() and c.status = 'pending' group by c.queue
    loop
        continue when not has_waiters(v_later.queue);  -- a worker asks next_run_at when it begins to wait
        v_due_ms := ceil(extract(epoch from v_later.first_at - clock_timestamp()) * 1000);
        if v_due_ms <= 0 then
            perform pg_notify('pgqw_jobs', v_later.queue);
        end if;
        if v_due_ms > 0 or v_later.more then
            perform pg_notify('pgqw_jobs_at', greatest(v_due_ms, 1) || case when v_later.more then '+' else '' end
                                              || ' ' || v_later.queue);
        end if;
    end loop;

    -- A blocked job may have changed since its insert (judge_blocked): then every row is read back.
    if cardinality(v_new) = cardinality(v_keys) and not (v_orchestrated and true = any (v_blocked)) then
        return query
        select c, true
          from unnest(v_keys) with ordinality as b(key, n)
          join unnest(v_new) as c on c.idempotency_key = b.key
         order by b.n;
    else
        return query
        select j, c.idempotency_key is not null
          from unnest(v_keys) with ordinality as b(key, n)
          join jobs j on j.idempotency_key = b.key
          left join unnest(v_new) as c on c.idempotency_key = b.key
         order by b.n;
    end if;
end;
$_$;

--
-- Name: enqueue_schedule_slots(text, timestamp with time zone[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.enqueue_schedule_slots(p_name text, p_slots timestamp with time zone[]) RETURNS TABLE(slot timestamp with time zone, job_id uuid, created boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
#variable_conflict use_variable
declare
    v_schedule schedules;
    v_due timestamptz[];
    v_pick timestamptz[];
    v_slot timestamptz;
    v_first timestamptz;
    v_last timestamptz;
    v_key text;
    v_job_id uuid;
    v_created boolean;
begin
    if p_name is null then
        raise exception using errcode = 'QV400', message = 'the schedule name is null',
            column = 'name';
    end if;
    if p_slots is null or array_position(p_slots, null) is not null or cardinality(p_slots) > 100 then
        raise exception using errcode = 'QV400', message = 'slots must be an array of at most 100 times, without nulls',
            column = 'slots';
    end if;
    select min(x), max(x) into v_first, v_last from unnest(p_slots) x;
    if v_last > now() or v_first < timestamptz '1970-01-01 00:00:00+00' then
        raise exception using errcode = 'QV400',
            message = 'a slot must be between 1970-01-01T00:00:00Z and now (the server''s clock)',
            detail = format('got %s to %s; now is %s', v_first, v_last, now()),
            column = 'slots';
    end if;
    select * into v_schedule from schedules s where s.name = p_name for update;
    if not found then
        raise exception using errcode = 'QR404', message = format('no schedule is named %L', left(p_name, 100));
    end if;
    if v_schedule.paused then
        return;
    end if;
    -- Only the cron's own slots: a caller cannot make a job at a time of its choosing (nor, with catch_up
    -- 'latest', make an off-slot time take the place of the real slot).
    select x into v_slot from unnest(p_slots) x where not cron_matches(v_schedule.cron, x) limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('%s is not a slot of schedule %s (cron %s)', v_slot, v_schedule.name, v_schedule.cron),
            column = 'slots';
    end if;

    v_due := array(select distinct x from unnest(p_slots) x
                    where x > greatest(v_schedule.last_slot, v_schedule.slots_after) order by x);
    if cardinality(v_due) = 0 then
        return;
    end if;
    v_pick := case v_schedule.catch_up
        when 'all' then v_due
        when 'latest' then array[v_due[cardinality(v_due)]]
        else case when v_due[cardinality(v_due)] >= now() - interval '1 minute'
                  then array[v_due[cardinality(v_due)]] else '{}'::timestamptz[] end
    end;

    foreach v_slot in array v_pick loop
        v_key := 'schedule:' || v_schedule.name || '@'
                 || to_char(v_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
        begin
            select (e.job).id, e.created into v_job_id, v_created
              from enqueue_job(v_schedule.task_type, v_schedule.payload, v_key, v_schedule.queue,
                               v_schedule.priority, v_slot) e;
        exception when sqlstate 'QI409' then
            -- The slot's key holds a job made before the schedule's payload or queue changed (last_slot
            -- was moved back by hand): that slot is done.
            select j.id, false into v_job_id, v_created from jobs j where j.idempotency_key = v_key;
        end;
        slot := v_slot;
        job_id := v_job_id;
        created := v_created;
        return next;
    end loop;

    update schedules s
       set last_slot = coalesce(greatest(s.last_slot, (select max(x) from unnest(v_pick) x)), s.last_slot),
           slots_after = greatest(s.slots_after, v_due[cardinality(v_due)])
     where s.name = v_schedule.name;
end;
$$;

--
-- Name: find_lease_attempt(uuid, uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.find_lease_attempt(p_job_id uuid, p_lease_token uuid, OUT attempt integer, OUT worker_id text, OUT outcome text) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    select a.attempt, a.worker_id, a.outcome into attempt, worker_id, outcome
      from job_attempts a where a.job_id = p_job_id and a.lease_token_hash = sha256(uuid_send(p_lease_token));
    if not found then
        perform raise_job_not_held(p_job_id, null);
    end if;
end;
$$;

--
-- Name: finished_types(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.finished_types() RETURNS text[]
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    with recursive found(name) as (
        (select j.type::text from jobs j where j.finished_at is not null order by j.type limit 1)
        union all
        select (select j.type::text from jobs j where j.finished_at is not null and j.type > f.name
                 order by j.type limit 1)
          from found f where f.name is not null
    )
    select array_agg(f.name order by f.name) from found f where f.name is not null;
$$;

--
-- Name: get_job_result(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.get_job_result(p_job_id uuid) RETURNS TABLE(status text, content_type text, value jsonb, data bytea)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select j.status::text, r.content_type::text, r.value, r.data
      from jobs j
      left join job_results r on r.job_id = j.id
     where j.id = p_job_id;
$$;

--
-- Name: has_waiters(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.has_waiters(p_queue text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    -- plpgsql, not sql: a sql function that cannot be inlined is planned again at every call.
    return current_setting('transaction_isolation') <> 'read committed'
        or exists (select 1 from queue_waiters w
                    where w.queue in (p_queue, '*') and w.until > statement_timestamp());
end;
$$;

--
-- Name: heartbeat(uuid[], uuid[], integer, jsonb[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.heartbeat(p_job_ids uuid[], p_lease_tokens uuid[], p_lease_ms integer DEFAULT NULL::integer, p_progress jsonb[] DEFAULT NULL::jsonb[]) RETURNS TABLE(job_id uuid, lease_expires_at timestamp with time zone, cancel_requested boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
begin
    if p_job_ids is null or p_lease_tokens is null then
        raise exception using errcode = 'QV400', message = 'job ids and lease tokens must not be null (empty arrays are fine)',
            column = case when p_job_ids is null then 'job_ids' else 'lease_tokens' end;
    end if;
    if cardinality(p_job_ids) <> cardinality(p_lease_tokens) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s lease tokens', cardinality(p_job_ids), cardinality(p_lease_tokens)),
            column = 'lease_tokens';
    end if;
    if p_progress is not null and cardinality(p_progress) <> cardinality(p_job_ids) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s progress values', cardinality(p_job_ids), cardinality(p_progress)),
            column = 'progress';
    end if;
    -- As the column's domain (jobs_progress_size) says, refused before anything is written.
    if p_progress is not null and exists (select 1 from unnest(p_progress) v where octet_length(v::text) > 8192) then
        raise exception using errcode = 'QV400', message = 'a progress value must be at most 8192 bytes as JSON text',
            column = 'progress';
    end if;
    -- At most a day: a lease is renewed by heartbeats, and a session must not park a job for years.
    if p_lease_ms is not null and (p_lease_ms < 1 or p_lease_ms > 86400000) then
        raise exception using errcode = 'QV400', message = format('lease must be between 1 ms and one day (86400000 ms), got %s', p_lease_ms),
            column = 'lease_ms';
    end if;

    return query
    -- Capped at the deadline; once it has passed (a timeout, or a cancel that moved it to its own time) at
    -- the lease it holds, so the sweep ends the attempt when that runs out. No deadline: no cap (least
    -- skips a null).
    update jobs j
       set lease_expires_at = least(now() + make_interval(
               secs => coalesce(p_lease_ms, (select t.lease_ms from task_type_settings t where t.name = j.type),
                                (select s.lease_ms from queue_settings s)) / 1000.0),
               case when j.deadline_at is not null then greatest(j.deadline_at, j.lease_expires_at) end),
           progress = coalesce(g.progress, j.progress)
      -- unnest pads a null p_progress with nulls: no progress given, none changed.
      from unnest(p_job_ids, p_lease_tokens, p_progress) as g(job_id, token, progress)
      join job_attempts a on a.job_id = g.job_id and a.lease_token_hash = sha256(uuid_send(g.token))
     where j.id = g.job_id and j.attempts = a.attempt and a.outcome is null and j.locked_by is not null
    returning j.id, j.lease_expires_at,
              exists (select 1 from job_cancel_requests r where r.job_id = j.id);
end;
$$;

--
-- Name: judge_blocked(uuid[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.judge_blocked(p_children uuid[]) RETURNS uuid[]
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_children uuid[];
    v_cancelled uuid[];
    v_released record;
begin
    v_children := array(select c.id from jobs c where c.id = any (p_children) and c.status = 'blocked'
                         order by c.id for update);
    if cardinality(v_children) = 0 then
        return '{}'::uuid[];
    end if;
    -- A parent that will never succeed, for a dependency that needs its success.
    with gone as (
        select distinct on (d.job_id) d.job_id, d.parent_id, p.status
          from job_dependencies d join jobs p on p.id = d.parent_id
         where d.job_id = any (v_children) and not d.run_anyway and p.status in ('cancelled', 'expired')
         order by d.job_id, d.parent_id
    ), ended as (
        update jobs j
           set status = 'cancelled', finished_at = now(),
               last_error = format('parent %s was %s', g.parent_id, g.status)
          from gone g
         where j.id = g.job_id and j.status = 'blocked'
        returning j.id
    )
    select coalesce(array_agg(e.id), '{}') into v_cancelled from ended e;
    for v_released in
        with ready as (
            update jobs j
               set status = 'pending', run_at = greatest(j.run_at, now())
             where j.id = any (v_children) and j.status = 'blocked' and not j.id = any (v_cancelled)
               and not exists (select 1 from job_dependencies d join jobs p on p.id = d.parent_id
                                where d.job_id = j.id
                                  and not (p.status = 'succeeded' or (d.run_anyway and p.finished_at is not null)))
            returning j.queue, j.run_at
        )
        select r.queue, min(r.run_at) as run_at from ready r group by r.queue
    loop
        perform notify_due(v_released.queue, v_released.run_at);
    end loop;
    for i in 1 .. cardinality(v_cancelled) loop
        perform notify_watchers(v_cancelled[i]);  -- watch_job
    end loop;
    return v_cancelled;
end;
$$;

--
-- Name: list_queues(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.list_queues() RETURNS TABLE(name text, paused boolean, max_running integer, jobs_per_second numeric, depth integer, running integer, oldest_ready_age_seconds double precision, key_max_running integer)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    with recursive found(name) as (
        (select j.queue from jobs j order by j.queue limit 1)
        union all
        select (select j.queue from jobs j where j.queue > f.name order by j.queue limit 1)
          from found f
         where f.name is not null
    ), known(name) as (
        select f.name from found f where f.name is not null
        union
        select q.name from queues q
    ), ready as (
        select k.name, count(j.*) as depth, min(j.run_at) as oldest
          from known k
          left join jobs j on j.queue = k.name and j.status in ('pending', 'failed')
               and j.run_at <= now() and j.attempts < j.max_attempts
         group by k.name
    )
    select r.name::text, coalesce(q.paused, false), q.max_running, q.jobs_per_second,
           r.depth::integer,
           (select count(*) from jobs j where j.queue = r.name and j.status = 'processing')::integer,
           coalesce(extract(epoch from now() - r.oldest), 0)::double precision, q.key_max_running
      from ready r
      left join queues q on q.name = r.name
     order by 1;
$$;

--
-- Name: list_schedules(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.list_schedules() RETURNS SETOF pgqw.schedules
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select * from schedules order by name;
$$;

--
-- Name: list_task_types(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.list_task_types(p_name text DEFAULT NULL::text) RETURNS TABLE(name text, payload_schema jsonb, description text, queue text, priority integer, max_attempts integer, backoff_base_ms integer, backoff_max_delay_ms integer, backoff_max_jitter_ms integer, lease_ms integer, timeout_ms integer, expire_after_ms integer, max_snoozes integer, retain_succeeded interval, retain_failed interval)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select s.name::text, s.payload_schema, t.description, s.queue::text, s.priority, s.max_attempts,
           s.backoff_base_ms, s.backoff_max_delay_ms, s.backoff_max_jitter_ms, s.lease_ms, s.timeout_ms,
           s.expire_after_ms, s.max_snoozes, s.retain_succeeded, s.retain_failed
      from task_type_settings s
      join task_types t on t.name = s.name
     where p_name is null or s.name = p_name
     order by s.name;
$$;

--
-- Name: list_worker_status(integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.list_worker_status(p_limit integer DEFAULT 200) RETURNS TABLE(id text, hostname text, pid integer, queues text[], task_types text[], concurrency integer, started_at timestamp with time zone, last_seen_at timestamp with time zone, expires_at timestamp with time zone, stopped_at timestamp with time zone, alive boolean)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select w.id::text, w.hostname, w.pid, w.queues, w.task_types, w.concurrency, w.started_at,
           w.last_seen_at, w.expires_at, w.stopped_at, (w.expires_at > now() and w.stopped_at is null) as alive
      from workers w
     order by alive desc, w.last_seen_at desc, w.id
     limit p_limit;
$$;

--
-- Name: mark_cancelled(uuid, uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.mark_cancelled(p_job_id uuid, p_lease_token uuid) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_job jobs;
    v_held record;
    v_attempt integer;
    v_outcome text;
    v_requested_at timestamptz;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;
    if v_requested_at is null then
        raise exception using errcode = 'QS409',
            message = format('job %s was not asked to cancel; report its success or failure instead', p_job_id);
    end if;

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = 'cancelled', finished_at = greatest(now(), j.started_at), locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = 'cancelled', finished_at = greatest(now(), a.started_at),
               error = format('cancelled on request (asked at %s)', v_requested_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        perform notify_watchers(p_job_id);  -- watch_job
        -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
        if v_job.workflow_id is not null or v_job.batch_id is not null then
            perform settle_jobs(array[p_job_id]);
        end if;
        return query select v_job, false;
        return;
    end if;
    select a.outcome into v_outcome from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome = 'cancelled' then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;

--
-- Name: mark_failed(uuid, uuid, text, boolean, integer, integer, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.mark_failed(p_job_id uuid, p_lease_token uuid, p_error text, p_retryable boolean DEFAULT true, p_base_ms integer DEFAULT NULL::integer, p_max_jitter_ms integer DEFAULT NULL::integer, p_max_delay_ms integer DEFAULT NULL::integer) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_job jobs;
    v_error text;
    v_type task_type_settings;
    v_held record;
    v_attempt integer;
    v_outcome text;
    v_recorded_error text;
    v_cancel boolean;
    v_spared integer := 0;
begin
    if p_job_id is null or p_lease_token is null or p_retryable is null then
        raise exception using errcode = 'QV400',
            message = 'job id, lease token and retryable must not be null',
            column = case when p_job_id is null then 'job_id' when p_lease_token is null then 'lease_token'
                          else 'retryable' end;
    end if;
    if p_error is null or p_error !~ '\S' then
        raise exception using errcode = 'QV400', message = 'error must be a non-empty text', column = 'error';
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative',
            column = case when p_base_ms < 0 then 'base_ms' when p_max_jitter_ms < 0 then 'max_jitter_ms'
                          else 'max_delay_ms' end;
    end if;
    v_error := left(p_error, 10000);
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    v_cancel := exists (select 1 from job_cancel_requests r where r.job_id = p_job_id);
    -- The job's task type's backoff where an argument is null (a type no worker registered: none).
    select t.* into v_type from jobs k join task_type_settings t on t.name = k.type where k.id = p_job_id;
    -- The backoff counts the tries that failed: an attempt snoozed (snooze_job) or handed back (release_job)
    -- spent no try, and makes the next wait no longer (time_out_attempt counts the same). The first attempt
    -- has none before it.
    if v_attempt > 1 then
        v_spared := (select count(*) from job_attempts a
                      where a.job_id = p_job_id and a.attempt < v_attempt
                        and (a.outcome = 'snoozed' or a.abandon_reason = 'handed_back'));
    end if;

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when p_retryable and j.attempts < j.max_attempts then 'failed' else 'dead' end,
           run_at = case when not v_cancel and p_retryable and j.attempts < j.max_attempts
                         then now() + backoff_delay(j.attempts - v_spared, coalesce(p_base_ms, v_type.backoff_base_ms),
                                                    coalesce(p_max_jitter_ms, v_type.backoff_max_jitter_ms),
                                                    coalesce(p_max_delay_ms, v_type.backoff_max_delay_ms))
                         else j.run_at end,
           finished_at = case when not v_cancel and p_retryable and j.attempts < j.max_attempts
                              then null else greatest(now(), j.started_at) end,
           last_error = v_error,
           locked_by = null,
           lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        if v_job.status in ('dead', 'cancelled') then
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
        elsif v_job.status = 'failed' then
            perform notify_due(v_job.queue, v_job.run_at);  -- a worker wakes when it comes due
        end if;
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled' else 'failed' end, error = v_error, finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        return query select v_job, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says
    -- it failed with this error. The job may have moved on since (a retry claimed it): it is returned as
    -- it is now.
    select a.outcome, a.error into v_outcome, v_recorded_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('failed', 'cancelled') and v_recorded_error = v_error then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;

--
-- Name: mark_jobs_succeeded(uuid[], uuid[], jsonb); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.mark_jobs_succeeded(p_job_ids uuid[], p_lease_tokens uuid[], p_results jsonb DEFAULT NULL::jsonb) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
begin
    if p_job_ids is null or p_lease_tokens is null then
        raise exception using errcode = 'QV400', message = 'job ids and lease tokens must not be null',
            column = case when p_job_ids is null then 'job_ids' else 'lease_tokens' end;
    end if;
    if cardinality(p_job_ids) <> cardinality(p_lease_tokens) then
        raise exception using errcode = 'QV400',
            message = format('got %s job ids but %s lease tokens', cardinality(p_job_ids), cardinality(p_lease_tokens)),
            column = 'lease_tokens';
    end if;
    if p_results is not null and (jsonb_typeof(p_results) <> 'array'
                                  or jsonb_array_length(p_results) > cardinality(p_job_ids)) then
        raise exception using errcode = 'QV400',
            message = 'results must be a JSON array with at most one element per job id',
            column = 'results';
    end if;
    -- Hold the jobs first (in id order), as cancel_job does: the statement below then sees every cancel
    -- request committed before, and none can come in until this transaction ends.
    perform 1 from jobs k where k.id = any(p_job_ids) order by k.id for update;
    -- After the lock: a watch_job committed before it is seen here, one after it waits for this commit.
    if exists (select 1 from job_waiters w where w.job_id = any(p_job_ids)) then
        perform pg_notify('pgqw_finished', '*');
    end if;

    return query
    with pairs as (
        -- Each (job, token) pair given, with its token's hash and its result.
        select t.job_id, t.n, sha256(uuid_send(t.token)) as token_hash, p_results -> (t.n::integer - 1) as result
          from unnest(p_job_ids, p_lease_tokens) with ordinality as t(job_id, token, n)
    ), given as (
        -- The attempt each pair names: one primary-key range per job, matched by the hash. One row per
        -- attempt, not per job: a job listed with a swept attempt's token before its current one still
        -- succeeds. A pair listed twice counts once.
        select distinct on (p.job_id, a.attempt) p.job_id, p.token_hash, a.attempt, a.outcome
          from pairs p
          join job_attempts a on a.job_id = p.job_id and a.lease_token_hash = p.token_hash
         order by p.job_id, a.attempt, p.n
    ), results as (
        -- A pair listed twice: its first result given (JSON null or a missing element is none).
        select distinct on (p.job_id, p.token_hash) p.job_id, p.token_hash, p.result
          from pairs p
         where coalesce(jsonb_typeof(p.result), 'null') <> 'null'
         order by p.job_id, p.token_hash, p.n
    ), done as (
        -- locked_by is not null is status = 'processing' (constraint jobs_locked_only_when_processing);
        -- naming the status would let the planner scan every processing job instead of the primary key.
        update jobs j
           set status = 'succeeded', finished_at = greatest(now(), j.started_at),
               locked_by = null, lease_expires_at = null
          from given g
         where j.id = g.job_id and j.attempts = g.attempt and g.outcome is null and j.locked_by is not null
           and not exists (select 1 from job_cancel_requests r where r.job_id = g.job_id)
        -- The row whole (a new column of jobs is in the answer), and what the statements below need.
        returning j as job, j.id, j.attempts
    ), recorded as (
        update job_attempts a
           set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
          from done
         where a.job_id = done.id and a.attempt = done.attempts
    ), stored as (
        insert into job_results (job_id, content_type, value)
        select done.id, 'application/json', r.result
          from done
          join given g on g.job_id = done.id and g.attempt = done.attempts
          join results r on r.job_id = g.job_id and r.token_hash = g.token_hash
    )
    select done.job, false
      from done
    union all
    -- Succeeded by an earlier try of this call (its reply was lost). The statement's snapshot is taken
    -- before `recorded` runs, so the attempts recorded just now still show no outcome here.
    select j, true from given g join jobs j on j.id = g.job_id where g.outcome = 'succeeded';
    -- Their dependents and batches (a job recorded before, or left alone, changes nothing there).
    perform settle_jobs(p_job_ids);
end;
$$;

--
-- Name: mark_succeeded(uuid, uuid, text, jsonb, bytea); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.mark_succeeded(p_job_id uuid, p_lease_token uuid, p_result_type text DEFAULT NULL::text, p_result_value jsonb DEFAULT NULL::jsonb, p_result_data bytea DEFAULT NULL::bytea) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $_$
#variable_conflict use_column
declare
    v_job jobs;
    v_held record;
    v_attempt integer;
    v_outcome text;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    if (p_result_value is not null or p_result_data is not null or p_result_type is not null)
       and (p_result_type is null or p_result_type !~ '^[!-~]+/[!-~]+$' or length(p_result_type) > 200
            or (p_result_value is null) = (p_result_data is null)
            or (p_result_value is not null and p_result_type <> 'application/json')) then
        raise exception using errcode = 'QV400',
            message = 'a result is a JSON value (content type application/json) or bytes with a content type '
                      'such as application/pdf, not both',
            column = case when p_result_type is null or p_result_type !~ '^[!-~]+/[!-~]+$'
                               or length(p_result_type) > 200 then 'result_type'
                          when p_result_value is not null then 'result_value' else 'result_data' end;
    end if;

    -- The attempt this token was issued for (the job's few attempts, through the primary key), or QN404/QL409.
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    if v_outcome is null then
        -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
        -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
        -- entry of jobs_status_created_idx instead of taking the primary key.
        update jobs j
           set status = 'succeeded', finished_at = greatest(now(), j.started_at),
               locked_by = null, lease_expires_at = null
         where j.id = p_job_id and j.attempts = v_attempt and j.locked_by is not null
        returning j.* into v_job;
        if found then
            -- Checked after the update holds the row: cancel_job locks it too, so a request committed
            -- before is seen here, and one made after finds the job succeeded.
            if exists (select 1 from job_cancel_requests r where r.job_id = p_job_id) then
                raise exception using errcode = 'QK409',
                    message = format('job %s was cancelled while attempt %s ran; this result is ignored',
                                     p_job_id, v_attempt),
                    hint = 'end the attempt with mark_cancelled',
                    -- Where the refusal comes from (exc.diag.table_name), as callers read it before QK409.
                    table = 'job_cancel_requests';
            end if;
            update job_attempts a
               set outcome = 'succeeded', finished_at = greatest(now(), a.started_at)
             where a.job_id = p_job_id and a.attempt = v_attempt;
            if p_result_type is not null then
                insert into job_results (job_id, content_type, value, data)
                values (p_job_id, p_result_type, p_result_value, p_result_data);
            end if;
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
            return query select v_job, false;
            return;
        end if;
        -- Ended meanwhile (a sweep, or an earlier try of this very call, committed first): look again.
        select a.outcome into v_outcome from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    end if;
    -- An earlier try of this call committed but its reply was lost: the attempt's row says it succeeded.
    if v_outcome = 'succeeded' then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$_$;

--
-- Name: mark_timed_out(uuid, uuid, integer, integer, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.mark_timed_out(p_job_id uuid, p_lease_token uuid, p_base_ms integer DEFAULT NULL::integer, p_max_jitter_ms integer DEFAULT NULL::integer, p_max_delay_ms integer DEFAULT NULL::integer) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_held record;
    v_attempt integer;
    v_deadline timestamptz;
    v_held_now boolean;
    v_outcome text;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative',
            column = case when p_base_ms < 0 then 'base_ms' when p_max_jitter_ms < 0 then 'max_jitter_ms'
                          else 'max_delay_ms' end;
    end if;
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    -- The job held, as the sweep and cancel_job hold it: a cancel request is read after this.
    select j.locked_by is not null and j.attempts = v_attempt and v_held.outcome is null into v_held_now
      from jobs j where j.id = p_job_id for update;

    if v_held_now then
        select a.deadline_at into v_deadline from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
        if v_deadline is null or v_deadline > now() then
            raise exception using errcode = 'QS409',
                message = case when v_deadline is null
                               then format('job %s attempt %s has no deadline: it cannot time out', p_job_id, v_attempt)
                               else format('job %s attempt %s has not timed out: its deadline is %s', p_job_id,
                                           v_attempt, v_deadline) end,
                detail = case when v_deadline is null then 'neither the job nor its task type has a timeout'
                              else format('%s ms left', ceil(extract(epoch from v_deadline - now()) * 1000)) end,
                hint = 'report its result, or call again once the deadline has passed';
        end if;
        if exists (select 1 from job_cancel_requests r where r.job_id = p_job_id) then
            return query select * from mark_cancelled(p_job_id, p_lease_token);
            return;
        end if;
        return query select time_out_attempt(p_job_id, v_attempt, p_base_ms, p_max_jitter_ms, p_max_delay_ms), false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says it
    -- timed out (or ended cancelled, for a job asked to cancel). The job is returned as it is now.
    select a.outcome into v_outcome from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('timed_out', 'cancelled') then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;

--
-- Name: next_run_at(text[], text[], integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.next_run_at(p_queues text[] DEFAULT NULL::text[], p_task_types text[] DEFAULT NULL::text[], p_limit integer DEFAULT 1) RETURNS TABLE(run_at timestamp with time zone, due_in_ms bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
begin
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
    if p_queues is not null and cardinality(p_queues) = 0 then
        raise exception using errcode = 'QV400', message = 'queues, when given, must name at least one queue',
            column = 'queues';
    end if;
    if p_task_types is not null and cardinality(p_task_types) = 0 then
        raise exception using errcode = 'QV400', message = 'task types, when given, must name at least one type',
            column = 'task_types';
    end if;

    -- Plan (docs/worker.md): jobs_ready_idx is ordered by priority first, so the earliest run_at is found
    -- priority by priority: a skip scan of the distinct priorities (one index descent each), then for each
    -- one the index range after now() in run_at order, up to p_limit matching rows. It reads a few index
    -- entries per priority level, not the waiting set, and needs no index of its own (one more index on
    -- jobs would cost every enqueue). Rows of other queues or types, or of paused queues, are stepped over.
    return query
    with recursive levels(priority) as (
        (select r.priority from jobs r where r.status in ('pending', 'failed')
          order by r.priority desc limit 1)
        union all
        select (select r.priority from jobs r
                 where r.status in ('pending', 'failed') and r.priority < l.priority
                 order by r.priority desc limit 1)
          from levels l
         where l.priority is not null
    ), times as (
        select t.run_at
          from levels l
          cross join lateral (
              select distinct r.run_at
                from jobs r
               where r.status in ('pending', 'failed')
                 and r.priority = l.priority
                 and r.run_at > now()
                 and r.attempts < r.max_attempts
                 and (p_queues is null or r.queue = any (p_queues))
                 and (p_task_types is null or r.type = any (p_task_types))
                 and not exists (select 1 from queues q where q.name = r.queue and q.paused)
               order by r.run_at
               limit p_limit) t
         where l.priority is not null
    )
    select d.run_at,
           greatest(0, ceil(extract(epoch from d.run_at - clock_timestamp()) * 1000))::bigint
      from (select distinct t.run_at from times t order by t.run_at limit p_limit) d
     order by d.run_at;
end;
$$;

--
-- Name: notify_due(text, timestamp with time zone); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.notify_due(p_queue text, p_run_at timestamp with time zone) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_due_ms bigint;
begin
    if not has_waiters(p_queue) then
        return;  -- nobody waits for the queue: a busy worker claims (or asks next_run_at) before it waits
    end if;
    v_due_ms := ceil(extract(epoch from p_run_at - clock_timestamp()) * 1000);
    if v_due_ms > 0 then
        perform pg_notify('pgqw_jobs_at', v_due_ms || ' ' || p_queue);
    else
        perform pg_notify('pgqw_jobs', p_queue);
    end if;
end;
$$;

--
-- Name: notify_watchers(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.notify_watchers(p_job_id uuid) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if exists (select 1 from job_waiters w where w.job_id = p_job_id) then
        perform pg_notify('pgqw_finished', p_job_id::text);
    end if;
end;
$$;

--
-- Name: parent_results(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.parent_results(p_job_id uuid) RETURNS TABLE(parent_id uuid, type text, status text, content_type text, result jsonb, data bytea)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null', column = 'job_id';
    end if;
    if not exists (select 1 from jobs j where j.id = p_job_id) then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    return query
    select p.id, p.type::text, p.status::text, r.content_type::text, r.value, r.data
      from job_dependencies d
      join jobs p on p.id = d.parent_id
      left join job_results r on r.job_id = p.id
     where d.job_id = p_job_id
     order by p.id;
end;
$$;

--
-- Name: queues; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.queues (
    name text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    max_running integer,
    jobs_per_second numeric,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    rate_tokens numeric,
    rate_refilled_at timestamp with time zone,
    key_max_running integer,
    CONSTRAINT queues_jobs_per_second_positive CHECK ((jobs_per_second > (0)::numeric)),
    CONSTRAINT queues_jobs_per_second_range CHECK (((jobs_per_second <= (1000000)::numeric) AND (jobs_per_second = round(jobs_per_second, 6)))),
    CONSTRAINT queues_key_max_running_range CHECK ((key_max_running >= 1)),
    CONSTRAINT queues_max_running_positive CHECK ((max_running >= 1)),
    CONSTRAINT queues_name_length CHECK (((length(name) >= 1) AND (length(name) <= 100))),
    CONSTRAINT queues_rate_bucket_complete CHECK (((rate_tokens IS NULL) = (rate_refilled_at IS NULL))),
    CONSTRAINT queues_rate_bucket_needs_rate CHECK (((jobs_per_second IS NOT NULL) OR ((rate_tokens IS NULL) AND (rate_refilled_at IS NULL)))),
    CONSTRAINT queues_rate_tokens_in_bucket CHECK (((rate_tokens >= (0)::numeric) AND (rate_tokens <= GREATEST((1)::numeric, jobs_per_second))))
);

--
-- Name: pause_queue(text, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.pause_queue(p_queue text, p_create boolean DEFAULT false) RETURNS SETOF pgqw.queues
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    return query
    insert into queues as q (name, paused, updated_at) values (p_queue, true, now())
    on conflict on constraint queues_pkey do update set paused = true, updated_at = excluded.updated_at
    returning q.*;
end;
$$;

--
-- Name: pause_schedule(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.pause_schedule(p_name text) RETURNS SETOF pgqw.schedules
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
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

--
-- Name: prune_expired_jobs(integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.prune_expired_jobs(p_batch integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_settings queue_settings;
    v_types text[];
    v_type text;
    v_status text;
    v_age interval;
    v_deleted integer := 0;
begin
    if p_batch is null or p_batch < 1 or p_batch > 100000 then
        raise exception using errcode = 'QV400',
            message = format('batch must be between 1 and 100000, got %s', coalesce(p_batch::text, 'null')),
            column = 'batch';
    end if;
    select * into v_settings from queue_settings;
    -- Each type read by its own age, so a type kept longer costs nothing to the others.
    v_types := finished_types();
    if v_types is null then
        return 0;
    end if;

    foreach v_status in array array['succeeded', 'dead', 'cancelled', 'expired'] loop
        foreach v_type in array v_types loop
            select case when v_status = 'succeeded' then coalesce(t.retain_succeeded, v_settings.prune_succeeded_after)
                        else coalesce(t.retain_failed, v_settings.prune_finished_after) end
              into v_age
              from (select 1) one left join task_type_settings t on t.name = v_type;
            v_deleted := v_deleted + prune_finished(v_type, v_status, now() - v_age, p_batch - v_deleted);
            if v_deleted >= p_batch then
                return v_deleted;
            end if;
        end loop;
    end loop;
    return v_deleted;
end;
$$;

--
-- Name: prune_finished(text, text, timestamp with time zone, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.prune_finished(p_type text, p_status text, p_before timestamp with time zone, p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
declare
    v_n integer;
begin
    -- Only finished rows are picked, and a claim only locks ready ones, so a claim never waits for a
    -- prune; skip locked also passes over rows a retry or another prune holds. Rows re-checked after the
    -- lock (read committed re-evaluates the where clause on a row changed meanwhile).
    with doomed as (
        select j.id from jobs j
         where j.type = p_type and j.status = p_status
           and j.finished_at is not null and j.finished_at < p_before
           -- A job whose dependents still wait (a dead parent keeps them blocked) is kept for a person.
           and not exists (select 1 from job_dependencies d join jobs c on c.id = d.job_id
                            where d.parent_id = j.id and c.finished_at is null)
         order by j.finished_at
         limit p_limit
           for update skip locked
    ), gone as (
        delete from jobs j using doomed d where j.id = d.id returning j.id
    ), unwatched as (
        -- Sessions that waited for these jobs (job_waiters has no foreign key to cascade).
        delete from job_waiters w using gone g where w.job_id = g.id
    )
    select count(*) into v_n from gone;
    return v_n;
end;
$$;

--
-- Name: prune_jobs(interval, text[], integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.prune_jobs(p_older_than interval, p_statuses text[] DEFAULT ARRAY['succeeded'::text, 'dead'::text, 'cancelled'::text, 'expired'::text], p_batch integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_bad text;
    v_deleted integer := 0;
    v_types text[];
    v_type text;
    v_status text;
begin
    if p_older_than is null or p_older_than < interval '0' then
        raise exception using errcode = 'QV400',
            message = format('older_than must be an interval of zero or more, got %s',
                             coalesce(p_older_than::text, 'null')),
            column = 'older_than';
    end if;
    if p_statuses is null or cardinality(p_statuses) = 0 then
        raise exception using errcode = 'QV400',
            message = 'statuses must name at least one final status (succeeded, dead, cancelled, expired)',
            column = 'statuses';
    end if;
    select s into v_bad from unnest(p_statuses) as s
     where s is null or s not in ('succeeded', 'dead', 'cancelled', 'expired') limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('status %s is not final: only succeeded, dead, cancelled and expired jobs may be pruned',
                             coalesce(quote_literal(v_bad), 'null')),
            hint = 'a job that may still run is never pruned',
            column = 'statuses';
    end if;
    if p_batch is null or p_batch < 1 or p_batch > 100000 then
        raise exception using errcode = 'QV400',
            message = format('batch must be between 1 and 100000, got %s', coalesce(p_batch::text, 'null')),
            column = 'batch';
    end if;
    -- No job is older than this: nothing to delete (and now() - the age would fall outside the
    -- timestamps PostgreSQL can hold).
    if p_older_than > interval '1000 years' then
        return 0;
    end if;

    -- Each status given, each type (one range of jobs_type_finished_idx each), oldest first within each.
    v_types := finished_types();
    if v_types is null then
        return 0;
    end if;
    foreach v_status in array p_statuses loop
        foreach v_type in array v_types loop
            v_deleted := v_deleted + prune_finished(v_type, v_status, now() - p_older_than, p_batch - v_deleted);
            if v_deleted >= p_batch then
                return v_deleted;
            end if;
        end loop;
    end loop;
    return v_deleted;
end;
$$;

--
-- Name: queue_stats(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.queue_stats() RETURNS TABLE(metric text, queue text, label text, value double precision)
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_exact_limit constant bigint := 10000;
    v_live constant text[] := array['blocked', 'pending', 'processing', 'failed'];
    v_statuses constant text[] := array['blocked', 'pending', 'processing', 'succeeded', 'failed', 'dead', 'cancelled', 'expired'];
    v_metric text[] := '{}'::text[];
    v_queue text[] := '{}'::text[];
    v_label text[] := '{}'::text[];
    v_value double precision[] := '{}'::double precision[];
    v_queues text[];
    v_q text;
    v_s text;
    v_n bigint;
    v_est double precision;
    v_jobs_estimated boolean := false;
    v_attempts_estimated boolean;
    v_attempts record;
    -- Every value of the attempt_outcome domain (its check constraint), each a series of the attempts metric.
    v_outcomes constant text[] := array['succeeded', 'failed', 'abandoned', 'cancelled', 'timed_out', 'snoozed'];
    v_outcome_n bigint[];
    v_o text;
    v_plan json;
begin
    -- Every queue with a job (a skip scan: each step is the next queue name in the index), a row in
    -- queues (paused or limited), and 'default'.
    with recursive found(name) as (
        (select j.queue from jobs j order by j.queue limit 1)
        union all
        select (select j.queue from jobs j where j.queue > f.name order by j.queue limit 1)
          from found f where f.name is not null
    )
    select array_agg(distinct k.name order by k.name) into v_queues
      from (select f.name from found f where f.name is not null
            union select q.name from queues q
            union select 'default') k;

    foreach v_q in array v_queues loop
        foreach v_s in array v_statuses loop
            if v_s = any (v_live) then
                select count(*) into v_n from jobs j where j.queue = v_q and j.status = v_s;
                v_est := v_n;
            else
                execute format('explain (format json) select 1 from jobs where queue = %L and status = %L', v_q, v_s)
                   into v_plan;
                v_est := (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
                if v_est <= v_exact_limit then
                    select count(*) into v_n
                      from (select 1 from jobs j where j.queue = v_q and j.status = v_s limit v_exact_limit + 1) x;
                    if v_n <= v_exact_limit then
                        v_est := v_n;
                    else
                        v_est := greatest(v_est, v_n);
                        v_jobs_estimated := true;
                    end if;
                else
                    v_jobs_estimated := true;
                end if;
            end if;
            v_metric := v_metric || 'jobs'::text; v_queue := v_queue || v_q; v_label := v_label || v_s;
            v_value := v_value || round(v_est);
        end loop;

        -- The oldest job ready now: the first run_at of each waiting status, one index probe each.
        v_metric := v_metric || 'oldest_ready_age_seconds'::text; v_queue := v_queue || v_q; v_label := v_label || null::text;
        v_value := v_value || coalesce(extract(epoch from now() - least(
            (select min(j.run_at) from jobs j where j.queue = v_q and j.status = 'pending' and j.run_at <= now()),
            (select min(j.run_at) from jobs j where j.queue = v_q and j.status = 'failed' and j.run_at <= now())
        ))::double precision, 0);

        v_metric := v_metric || 'queue_paused'::text; v_queue := v_queue || v_q; v_label := v_label || null::text;
        v_value := v_value || (case when exists (select 1 from queues p where p.name = v_q and p.paused)
                                    then 1 else 0 end)::double precision;
    end loop;

    -- Attempts. The running ones are those of processing jobs (jobs_lease_idx, then the key): exact.
    execute 'explain (format json) select 1 from job_attempts' into v_plan;
    v_est := (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
    v_attempts_estimated := v_est > v_exact_limit;
    if not v_attempts_estimated then
        -- A small history: read it (at most about v_exact_limit rows by the planner's count).
        select count(*) filter (where a.outcome is null) as running,
               count(*) filter (where a.outcome = 'succeeded') as succeeded,
               count(*) filter (where a.outcome = 'failed') as failed,
               count(*) filter (where a.outcome = 'abandoned') as abandoned,
               count(*) as claimed,
               count(*) filter (where a.abandon_reason = 'lease_expired') as swept,
               count(*) filter (where a.abandon_reason = 'handed_back') as handed_back
          into v_attempts
          from job_attempts a;
        select array_agg(coalesce(g.n, 0) order by o.i) into v_outcome_n
          from unnest(v_outcomes) with ordinality as o(name, i)
          left join (select a.outcome, count(*) as n from job_attempts a where a.outcome is not null
                      group by a.outcome) g on g.outcome = o.name;
    else
        select (select count(*) from jobs j join job_attempts a on a.job_id = j.id
                 where j.status = 'processing' and a.outcome is null) as running,
               0::bigint as succeeded, 0::bigint as failed, 0::bigint as abandoned, round(v_est)::bigint as claimed,
               0::bigint as swept, 0::bigint as handed_back
          into v_attempts;
        execute 'explain (format json) select 1 from job_attempts where outcome = ''succeeded''' into v_plan;
        v_attempts.succeeded := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where outcome = ''failed''' into v_plan;
        v_attempts.failed := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where outcome = ''abandoned''' into v_plan;
        v_attempts.abandoned := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where abandon_reason = ''lease_expired''' into v_plan;
        v_attempts.swept := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        execute 'explain (format json) select 1 from job_attempts where abandon_reason = ''handed_back''' into v_plan;
        v_attempts.handed_back := round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision);
        v_outcome_n := '{}'::bigint[];
        foreach v_o in array v_outcomes loop
            execute format('explain (format json) select 1 from job_attempts where outcome = %L', v_o) into v_plan;
            v_outcome_n := v_outcome_n || round((v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision)::bigint;
        end loop;
    end if;

    return query
    select * from unnest(v_metric, v_queue, v_label, v_value)
    union all
    select 'attempts', null, 'running', v_attempts.running::double precision
    union all
    select 'attempts', null, o.outcome, o.n::double precision
      from unnest(v_outcomes, v_outcome_n) as o(outcome, n)
    union all
    select 'worker_events', null, e.event, e.n::double precision
      from (values ('claimed', v_attempts.claimed), ('succeeded', v_attempts.succeeded),
                   ('failed', v_attempts.failed), ('swept', v_attempts.swept),
                   ('handed_back', v_attempts.handed_back)) as e(event, n)
    union all
    select 'stats_estimated', null, t.name, (case when t.estimated then 1 else 0 end)::double precision
      from (values ('jobs', v_jobs_estimated), ('job_attempts', v_attempts_estimated)) as t(name, estimated)
    union all
    -- Ready jobs no live worker can take: of a type no live worker registered, or in a queue none takes.
    -- Counted per (queue, type) first: the live workers are checked once per group, not per job.
    select 'waiting_without_worker', r.queue, r.type, r.n::double precision
      from (select j.queue, j.type, count(*) as n
              from jobs j
             where j.status in ('pending', 'failed') and j.attempts < j.max_attempts and j.run_at <= now()
             group by j.queue, j.type) r
     where not exists (select 1 from workers w
                        where w.expires_at > now() and r.type = any (w.task_types)
                          and (w.queues is null or r.queue = any (w.queues)))
    union all
    select 'workers_alive', null, null, (select count(*) from workers w where w.expires_at > now())::double precision
    order by 1, 2 nulls first, 3;
end;
$$;

--
-- Name: queue_throughput(timestamp with time zone, timestamp with time zone, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.queue_throughput(p_since timestamp with time zone, p_until timestamp with time zone, p_buckets integer) RETURNS TABLE(queue text, bucket integer, succeeded integer, failed integer)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select j.queue::text,
           least(floor(extract(epoch from j.finished_at - p_since) / extract(epoch from p_until - p_since)
                       * p_buckets)::integer, p_buckets - 1),
           (count(*) filter (where j.status = 'succeeded'))::integer,
           (count(*) filter (where j.status = 'dead'))::integer
      from jobs j
     where j.type = any (finished_types())
       and j.status in ('succeeded', 'dead')
       and j.finished_at >= p_since and j.finished_at < p_until
     group by 1, 2
     order by 1, 2;
$$;

--
-- Name: raise_job_not_held(uuid, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.raise_job_not_held(p_job_id uuid, p_attempt integer) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_job jobs;
begin
    select * into v_job from jobs where id = p_job_id;
    if not found then
        raise exception using errcode = 'QN404',
            message = format('job %s does not exist', p_job_id);
    end if;
    raise exception using errcode = 'QL409',
        message = case when p_attempt is null
                       then format('this lease token holds no attempt of job %s; this result is ignored', p_job_id)
                       else format('job %s attempt %s is no longer held by its lease; this result is ignored',
                                   p_job_id, p_attempt) end,
        detail = format('the job is %s at attempt %s/%s, locked by %s',
                        v_job.status, v_job.attempts, v_job.max_attempts,
                        coalesce(v_job.locked_by, 'nobody')),
        hint = 'its lease expired and sweep_stuck handed it on, it was handed back or already finished, '
               'or the token is not the one its claim returned';
end;
$$;

--
-- Name: raise_unknown_queue(text, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.raise_unknown_queue(p_queue text, p_create boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_create or p_queue = 'default'
       or exists (select 1 from queues q where q.name = p_queue)
       or exists (select 1 from jobs j where j.queue = p_queue)
       or exists (select 1 from workers w where p_queue = any (w.queues))
       or exists (select 1 from task_type_settings t where t.queue = p_queue)
       or exists (select 1 from schedules s where s.queue = p_queue) then
        return;
    end if;
    raise exception using errcode = 'QU404',
        message = format('queue %L is not known: it has no job, setting, worker, task type or schedule', p_queue),
        hint = 'check its name; to set it up before its first job, ask to create it (p_create => true, '
               'pgqw pause/resume/limit/rate --create, or "create": true over HTTP)';
end;
$$;

--
-- Name: register_schedules(text[], jsonb); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.register_schedules(p_task_types text[], p_schedules jsonb) RETURNS SETOF pgqw.schedules
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $_$
declare
    v_bad record;
    v_problem text;
begin
    if p_task_types is null or array_position(p_task_types, null) is not null then
        raise exception using errcode = 'QV400', message = 'task types must be an array of names, without nulls',
            column = 'task_types';
    end if;
    if p_schedules is null or jsonb_typeof(p_schedules) <> 'array' then
        raise exception using errcode = 'QV400', message = 'schedules must be a JSON array of objects',
            column = 'schedules';
    end if;
    select e.ord, e.value into v_bad
      from jsonb_array_elements(p_schedules) with ordinality as e(value, ord)
     where jsonb_typeof(e.value) <> 'object'
        or jsonb_typeof(e.value -> 'name') is distinct from 'string'
        or (e.value ->> 'name') !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$'
        or jsonb_typeof(e.value -> 'task_type') is distinct from 'string'
        or jsonb_typeof(e.value -> 'cron') is distinct from 'string'
        or coalesce(jsonb_typeof(e.value -> 'payload'), 'object') <> 'object'
        or coalesce(jsonb_typeof(e.value -> 'queue'), 'null') not in ('null', 'string')
        or (e.value ->> 'queue') !~ '\S' or length(e.value ->> 'queue') > 100
        or coalesce(jsonb_typeof(e.value -> 'priority'), 'null') not in ('null', 'number')
        or coalesce(e.value ->> 'catch_up', 'latest') not in ('latest', 'all', 'none')
     order by e.ord
     limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('schedule %s is not an object with a name (1 to 100 letters, digits, _ . : -), a '
                             'task_type, a cron, and optionally a payload (object), queue, priority and '
                             'catch_up (latest, all or none)', v_bad.ord),
            detail = left(v_bad.value::text, 200),
            column = 'schedules';
    end if;
    select e.value ->> 'name' as name into v_bad
      from jsonb_array_elements(p_schedules) e group by 1 having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('schedule %L is listed twice', v_bad.name),
            column = 'schedules';
    end if;
    select e.value ->> 'name' as name, e.value ->> 'task_type' as task_type into v_bad
      from jsonb_array_elements(p_schedules) e
     where not (e.value ->> 'task_type') = any(p_task_types) limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('schedule %L is of task type %L, which is not one of the registering worker''s',
                             v_bad.name, left(v_bad.task_type, 100)),
            column = 'schedules';
    end if;
    for v_bad in select e.value ->> 'name' as name, e.value ->> 'cron' as cron
                   from jsonb_array_elements(p_schedules) e loop
        v_problem := check_schedule_cron(v_bad.cron);
        if v_problem is not null then
            raise exception using errcode = 'QC400',
                message = format('schedule %L: the cron expression does not parse: %s', v_bad.name, v_problem);
        end if;
    end loop;
    select e.value ->> 'task_type' as task_type into v_bad
      from jsonb_array_elements(p_schedules) e
     where not exists (select 1 from task_types t where t.name = e.value ->> 'task_type') limit 1;
    if found then
        raise exception using errcode = 'QT422',
            message = format('no task type %L is registered', left(v_bad.task_type, 100)),
            hint = 'register the task types (register_task_types) before their schedules';
    end if;

    -- One registration at a time: workers starting together write the same rows in one order.
    perform pg_advisory_xact_lock(hashtext('pgqw.register_schedules'));

    delete from schedules s
     where s.source = 'code' and s.task_type = any(p_task_types)
       and not exists (select 1 from jsonb_array_elements(p_schedules) e where e.value ->> 'name' = s.name);

    insert into schedules as s (name, task_type, cron, payload, queue, priority, catch_up, source)
    select e.value ->> 'name', e.value ->> 'task_type',
           regexp_replace(regexp_replace(e.value ->> 'cron', '^\s+|\s+$', '', 'g'), '\s+', ' ', 'g'),
           coalesce(e.value -> 'payload', '{}'::jsonb), e.value ->> 'queue', (e.value ->> 'priority')::integer,
           coalesce(e.value ->> 'catch_up', 'latest'), 'code'
      from jsonb_array_elements(p_schedules) e
     order by e.value ->> 'name'
    on conflict on constraint schedules_pkey do update
       set task_type = excluded.task_type, cron = excluded.cron, payload = excluded.payload,
           queue = excluded.queue, priority = excluded.priority, catch_up = excluded.catch_up,
           slots_after = case when s.cron = excluded.cron then s.slots_after else greatest(s.slots_after, now()) end,
           updated_at = case when (s.task_type, s.cron, s.payload, s.queue, s.priority, s.catch_up)
                                  is not distinct from (excluded.task_type, excluded.cron, excluded.payload,
                                                        excluded.queue, excluded.priority, excluded.catch_up)
                             then s.updated_at else now() end
     where s.source = 'code';

    return query
    select s.* from schedules s
     where s.name in (select e.value ->> 'name' from jsonb_array_elements(p_schedules) e)
     order by s.name;
exception
    when numeric_value_out_of_range or invalid_text_representation then
        raise exception using errcode = 'QV400',
            message = format('a schedule''s priority is not a whole number in range: %s', sqlerrm),
            column = 'schedules';
end;
$_$;

--
-- Name: task_types; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.task_types (
    name text NOT NULL,
    payload_schema jsonb DEFAULT '{}'::jsonb NOT NULL,
    description text,
    code_queue text,
    code_priority integer,
    code_max_attempts integer,
    code_backoff_base_ms integer,
    code_backoff_max_delay_ms integer,
    code_backoff_max_jitter_ms integer,
    code_lease_ms integer,
    queue text,
    priority integer,
    max_attempts integer,
    backoff_base_ms integer,
    backoff_max_delay_ms integer,
    backoff_max_jitter_ms integer,
    lease_ms integer,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    code_timeout_ms integer,
    timeout_ms integer,
    max_snoozes integer,
    code_expire_after_ms integer,
    expire_after_ms integer,
    code_retain_succeeded interval,
    retain_succeeded interval,
    code_retain_failed interval,
    retain_failed interval,
    code_max_snoozes integer,
    CONSTRAINT task_types_backoff_range CHECK (((backoff_base_ms >= 0) AND (backoff_max_delay_ms >= 0) AND (backoff_max_jitter_ms >= 0) AND (code_backoff_base_ms >= 0) AND (code_backoff_max_delay_ms >= 0) AND (code_backoff_max_jitter_ms >= 0))),
    CONSTRAINT task_types_code_max_snoozes_range CHECK (((code_max_snoozes >= 0) AND (code_max_snoozes <= 1000))),
    CONSTRAINT task_types_expire_after_range CHECK (((expire_after_ms >= 1) AND (code_expire_after_ms >= 1))),
    CONSTRAINT task_types_lease_range CHECK (((lease_ms >= 1) AND (code_lease_ms >= 1))),
    CONSTRAINT task_types_max_attempts_range CHECK ((((max_attempts >= 1) AND (max_attempts <= 1000)) AND ((code_max_attempts >= 1) AND (code_max_attempts <= 1000)))),
    CONSTRAINT task_types_max_snoozes_range CHECK (((max_snoozes >= 0) AND (max_snoozes <= 1000))),
    CONSTRAINT task_types_name_length CHECK ((((length(name) >= 1) AND (length(name) <= 100)) AND (name ~ '\S'::text))),
    CONSTRAINT task_types_queue_length CHECK ((((length(queue) >= 1) AND (length(queue) <= 100)) AND (queue ~ '\S'::text) AND ((length(code_queue) >= 1) AND (length(code_queue) <= 100)) AND (code_queue ~ '\S'::text))),
    CONSTRAINT task_types_retain_range CHECK ((((retain_succeeded >= '00:00:00'::interval) AND (retain_succeeded <= '100 years'::interval)) AND ((code_retain_succeeded >= '00:00:00'::interval) AND (code_retain_succeeded <= '100 years'::interval)) AND ((retain_failed >= '00:00:00'::interval) AND (retain_failed <= '100 years'::interval)) AND ((code_retain_failed >= '00:00:00'::interval) AND (code_retain_failed <= '100 years'::interval)))),
    CONSTRAINT task_types_schema_is_object CHECK ((jsonb_typeof(payload_schema) = 'object'::text)),
    CONSTRAINT task_types_timeout_range CHECK (((timeout_ms >= 1) AND (code_timeout_ms >= 1)))
);

--
-- Name: register_task_types(jsonb); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.register_task_types(p_types jsonb) RETURNS SETOF pgqw.task_types
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $_$
declare
    v_bad record;
begin
    if p_types is null or jsonb_typeof(p_types) <> 'array' then
        raise exception using errcode = 'QV400', message = 'task types must be a JSON array of objects',
            column = 'types';
    end if;
    select e.ord, e.value into v_bad
      from jsonb_array_elements(p_types) with ordinality as e(value, ord)
     where jsonb_typeof(e.value) <> 'object'
        or jsonb_typeof(e.value -> 'name') is distinct from 'string'
        or (e.value ->> 'name') !~ '\S' or length(e.value ->> 'name') > 100
        or jsonb_typeof(e.value -> 'payload_schema') is distinct from 'object'
        or coalesce(jsonb_typeof(e.value -> 'description'), 'null') not in ('null', 'string')
        or coalesce(jsonb_typeof(e.value -> 'queue'), 'null') not in ('null', 'string')
        or exists (select 1 from jsonb_each(e.value) f
                    where f.key in ('priority', 'max_attempts', 'backoff_base_ms', 'backoff_max_delay_ms',
                                    'backoff_max_jitter_ms', 'lease_ms', 'timeout_ms', 'expire_after_ms',
                                    'max_snoozes', 'retain_succeeded_ms', 'retain_failed_ms')
                      and jsonb_typeof(f.value) not in ('null', 'number'))
     order by e.ord
     limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('task type %s is not an object with a name (text, at most 100 characters), a '
                             'payload_schema (object) and whole-number settings', v_bad.ord),
            detail = left(v_bad.value::text, 200),
            column = 'types';
    end if;
    -- The rules of pgqw.payload_schema that need no JSON Schema library (its 1 to 3), for the callers that
    -- skip the Python check (a worker login can call this function with anything).
    select b.name, b.problem into v_bad from (
        select e.ord, e.value ->> 'name' as name, case
                 when octet_length(s.schema::text) > 131072
                     then format('is %s bytes, more than the limit of 131072', octet_length(s.schema::text))
                 when jsonb_path_exists(s.schema, 'strict $.**{33 to last}')
                     then 'nests more than 32 levels'
                 when s.schema ? '$schema' and s.schema -> '$schema' not in
                          ('"https://json-schema.org/draft/2020-12/schema"', '"https://json-schema.org/draft/2020-12/schema#"')
                     then format('names the $schema %s: payload schemas are read as Draft 2020-12 '
                                 '(https://json-schema.org/draft/2020-12/schema)', left(s.schema ->> '$schema', 100))
                 when s.outside is not null
                     then format('has a $ref or $dynamicRef that points outside it, %s: the API fetches nothing, so '
                                 'every reference starts with # (#/$defs/Name)', left(s.outside::text, 100))
               end as problem
          from jsonb_array_elements(p_types) with ordinality as e(value, ord)
          cross join lateral (
              select e.value -> 'payload_schema' as schema,
                     coalesce(jsonb_path_query_first(e.value -> 'payload_schema',
                                  'lax $.**."$ref" ? (@.type() == "string" && !(@ starts with "#"))'),
                              jsonb_path_query_first(e.value -> 'payload_schema',
                                  'lax $.**."$dynamicRef" ? (@.type() == "string" && !(@ starts with "#"))')) as outside
          ) s
        ) b
     where b.problem is not null
     order by b.ord
     limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('task type %L: its payload_schema %s', v_bad.name, v_bad.problem),
            column = 'types';
    end if;
    select e.value ->> 'name' as name into v_bad
      from jsonb_array_elements(p_types) e group by 1 having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('task type %L is listed twice', v_bad.name),
            column = 'types';
    end if;

    return query
    insert into task_types as t (name, payload_schema, description, code_queue, code_priority, code_max_attempts,
                                 code_backoff_base_ms, code_backoff_max_delay_ms, code_backoff_max_jitter_ms,
                                 code_lease_ms, code_timeout_ms, code_expire_after_ms, code_max_snoozes,
                                 code_retain_succeeded, code_retain_failed, registered_at)
    select e.value ->> 'name', e.value -> 'payload_schema', e.value ->> 'description', e.value ->> 'queue',
           (e.value ->> 'priority')::integer, (e.value ->> 'max_attempts')::integer,
           (e.value ->> 'backoff_base_ms')::integer, (e.value ->> 'backoff_max_delay_ms')::integer,
           (e.value ->> 'backoff_max_jitter_ms')::integer, (e.value ->> 'lease_ms')::integer,
           (e.value ->> 'timeout_ms')::integer, (e.value ->> 'expire_after_ms')::integer,
           (e.value ->> 'max_snoozes')::integer,
           make_interval(secs => (e.value ->> 'retain_succeeded_ms')::bigint / 1000.0),
           make_interval(secs => (e.value ->> 'retain_failed_ms')::bigint / 1000.0), now()
      from jsonb_array_elements(p_types) e
     -- In name order, so two registrations of the same types (workers of two releases starting
     -- together, their types listed in another order) wait for each other instead of deadlocking.
     order by e.value ->> 'name'
    on conflict on constraint task_types_pkey do update
       set payload_schema = excluded.payload_schema, description = excluded.description,
           code_queue = excluded.code_queue, code_priority = excluded.code_priority,
           code_max_attempts = excluded.code_max_attempts, code_backoff_base_ms = excluded.code_backoff_base_ms,
           code_backoff_max_delay_ms = excluded.code_backoff_max_delay_ms,
           code_backoff_max_jitter_ms = excluded.code_backoff_max_jitter_ms,
           code_lease_ms = excluded.code_lease_ms, code_timeout_ms = excluded.code_timeout_ms,
           code_expire_after_ms = excluded.code_expire_after_ms, code_max_snoozes = excluded.code_max_snoozes,
           code_retain_succeeded = excluded.code_retain_succeeded, code_retain_failed = excluded.code_retain_failed,
           registered_at = excluded.registered_at
    returning t.*;
exception
    when numeric_value_out_of_range or invalid_text_representation or check_violation or datetime_field_overflow
         or interval_field_overflow then
        raise exception using errcode = 'QV400',
            message = format('a task type setting is out of range: %s', sqlerrm),
            column = 'types';
end;
$_$;

--
-- Name: workers; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.workers (
    id text NOT NULL,
    hostname text,
    pid integer,
    queues text[],
    task_types text[] DEFAULT '{}'::text[] NOT NULL,
    concurrency integer,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    stopped_at timestamp with time zone,
    CONSTRAINT workers_expires_after_seen CHECK ((expires_at >= last_seen_at)),
    CONSTRAINT workers_id_length CHECK (((length(id) >= 1) AND (length(id) <= 200)))
);

--
-- Name: register_worker(text, text[], text[], integer, text, integer, integer, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.register_worker(p_worker_id text, p_task_types text[], p_queues text[] DEFAULT NULL::text[], p_concurrency integer DEFAULT NULL::integer, p_hostname text DEFAULT NULL::text, p_pid integer DEFAULT NULL::integer, p_ttl_ms integer DEFAULT 30000, p_waits_for_jobs boolean DEFAULT false) RETURNS SETOF pgqw.workers
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters',
            column = 'worker_id';
    end if;
    if p_task_types is null or array_position(p_task_types, null) is not null then
        raise exception using errcode = 'QV400', message = 'task types must be an array of names without nulls',
            column = 'task_types';
    end if;
    if p_ttl_ms is null or p_ttl_ms < 1 or p_ttl_ms > 86400000 then
        raise exception using errcode = 'QV400',
            message = format('ttl must be between 1 ms and one day, got %s', coalesce(p_ttl_ms::text, 'null')),
            column = 'ttl_ms';
    end if;
    if p_concurrency is not null and p_concurrency < 1 then
        raise exception using errcode = 'QV400', message = 'concurrency must be 1 or more',
            column = 'concurrency';
    end if;
    if not coalesce(p_waits_for_jobs, false) then
        insert into queue_waiters as q (queue, worker_id, until)
        values ('*', p_worker_id, now() + make_interval(secs => p_ttl_ms / 1000.0))
        on conflict (queue, worker_id) do update set until = excluded.until;
    end if;
    return query
    insert into workers as w (id, hostname, pid, queues, task_types, concurrency, started_at, last_seen_at,
                              expires_at, stopped_at)
    values (p_worker_id, p_hostname, p_pid, p_queues, p_task_types, p_concurrency, now(), now(),
            now() + make_interval(secs => p_ttl_ms / 1000.0), null)
    on conflict on constraint workers_pkey do update
       set hostname = coalesce(excluded.hostname, w.hostname), pid = coalesce(excluded.pid, w.pid),
           queues = excluded.queues, task_types = excluded.task_types,
           concurrency = coalesce(excluded.concurrency, w.concurrency),
           started_at = case when w.stopped_at is not null then now() else w.started_at end,
           last_seen_at = now(), expires_at = excluded.expires_at, stopped_at = null
    returning w.*;
end;
$$;

--
-- Name: release_job(uuid, uuid, text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.release_job(p_job_id uuid, p_lease_token uuid, p_reason text DEFAULT 'worker shutting down'::text) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_job jobs;
    v_reason text;
    v_held record;
    v_attempt integer;
    v_worker text;
    v_outcome text;
    v_abandon text;
    v_cancel boolean;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_worker := v_held.worker_id;
    v_outcome := v_held.outcome;
    v_reason := format('handed back by worker %s: %s', v_worker,
                       coalesce(nullif(btrim(p_reason), ''), 'no reason given'));

    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    v_cancel := exists (select 1 from job_cancel_requests r where r.job_id = p_job_id);

    -- locked_by is not null is status = 'processing' (constraints jobs_processing_is_locked and
    -- jobs_locked_only_when_processing); naming the status would let the planner walk every processing
    -- entry of jobs_status_created_idx instead of taking the primary key.
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when j.attempts < least(1000, j.max_attempts + 1) then 'pending' else 'dead' end,
           run_at = case when v_cancel then j.run_at else now() end,
           max_attempts = case when v_cancel then j.max_attempts else least(1000, j.max_attempts + 1) end,
           finished_at = case when v_cancel or j.attempts >= least(1000, j.max_attempts + 1)
                              then greatest(now(), j.started_at) end,
           last_error = case when not v_cancel and j.attempts >= least(1000, j.max_attempts + 1)
                             then left(v_reason || ' (on its last attempt: a job has at most 1000)', 10000)
                             else j.last_error end,
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled' else 'abandoned' end,
               abandon_reason = case when v_cancel then null else 'handed_back' end,
               error = left(v_reason, 10000), finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        if v_job.status in ('cancelled', 'dead') then
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
        else
            perform pg_notify('pgqw_jobs', v_job.queue);
        end if;
        return query select v_job, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says
    -- it was handed back. The job may have moved on since.
    select a.outcome, a.abandon_reason into v_outcome, v_abandon
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if (v_outcome = 'abandoned' and v_abandon = 'handed_back') or v_outcome = 'cancelled' then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;

--
-- Name: report_concurrency(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.report_concurrency(p_prefix text DEFAULT ''::text) RETURNS TABLE(worker_id text, peak_at_once integer, attempts_run integer)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    with mine as (
        select a.* from job_attempts a
         where a.worker_id like replace(replace(replace(coalesce(p_prefix, ''), '\', '\\'), '%', '\%'), '_', '\_') || '%'
    ), events as (
        -- rank orders events at one instant: ends of earlier attempts, then starts, then the ends
        -- of attempts that took no measurable time (so they still count while they ran).
        select m.worker_id, m.started_at as at, 1 as delta, 1 as rank from mine m
        union all
        select m.worker_id, coalesce(m.finished_at, greatest(now(), m.started_at)), -1,
               case when coalesce(m.finished_at, greatest(now(), m.started_at)) = m.started_at then 2 else 0 end
          from mine m
    ), running as (
        select e.worker_id,
               sum(e.delta) over (partition by e.worker_id order by e.at, e.rank
                                  rows between unbounded preceding and current row) as n
          from events e
    )
    select r.worker_id, max(r.n)::integer, (select count(*)::integer from mine m where m.worker_id = r.worker_id)
      from running r
     group by r.worker_id
     order by r.worker_id;
$$;

--
-- Name: report_double_runs(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.report_double_runs(p_prefix text DEFAULT ''::text) RETURNS TABLE(jobs_seen integer, attempts_seen integer, overlapping_jobs integer, succeeded_twice integer, succeeded_jobs integer, results integer)
    LANGUAGE sql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    with mine as (
        select a.* from job_attempts a
         where a.worker_id like replace(replace(replace(coalesce(p_prefix, ''), '\', '\\'), '%', '\%'), '_', '\_') || '%'
    ), job_ids as (
        select distinct m.job_id from mine m
    )
    select
        (select count(*)::integer from job_ids),
        (select count(*)::integer from mine),
        (select count(distinct a1.job_id)::integer
           from mine a1
           join job_attempts a2 on a2.job_id = a1.job_id and a2.attempt > a1.attempt
          where a2.started_at < coalesce(a1.finished_at, now())
            and a1.started_at < coalesce(a2.finished_at, now())),
        (select count(*)::integer from (
            select a.job_id from job_attempts a join job_ids using (job_id)
             where a.outcome = 'succeeded' group by a.job_id having count(*) > 1) twice),
        (select count(*)::integer from jobs j join job_ids i on i.job_id = j.id where j.status = 'succeeded'),
        (select count(*)::integer from job_results r join job_ids i on i.job_id = r.job_id);
$$;

--
-- Name: report_latest_jobs(integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.report_latest_jobs(p_limit integer DEFAULT 20) RETURNS TABLE(id uuid, type text, queue text, status text, attempts integer, max_attempts integer, locked_by text, created_at timestamp with time zone, run_at timestamp with time zone, finished_at timestamp with time zone, last_error text)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
    -- The newest of each status present (a skip scan of jobs_status_created_idx: each step is the next
    -- status in the index), then the newest of those: a range of that index per status, no other index.
    return query
    with recursive present(status) as (
        (select j.status::text from jobs j order by j.status limit 1)
        union all
        select (select j.status::text from jobs j where j.status > p.status order by j.status limit 1)
          from present p where p.status is not null
    )
    select j.id, j.type::text, j.queue::text, j.status::text, j.attempts, j.max_attempts::integer,
           j.locked_by::text, j.created_at, j.run_at, j.finished_at, j.last_error
      from present p
     cross join lateral (select * from jobs j where j.status = p.status
                          order by j.created_at desc, j.id desc limit p_limit) j
     where p.status is not null
     order by j.created_at desc, j.id desc
     limit p_limit;
end;
$$;

--
-- Name: report_timeline(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.report_timeline(p_job_id uuid) RETURNS TABLE(attempt integer, worker_id text, started_at timestamp with time zone, finished_at timestamp with time zone, wait_before_s numeric, duration_s numeric, outcome text, error text, deadline_at timestamp with time zone)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    if not exists (select 1 from jobs j where j.id = p_job_id) then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    return query
    select a.attempt::integer, a.worker_id, a.started_at, a.finished_at,
           round(extract(epoch from a.started_at - lag(a.finished_at) over w)::numeric, 3),
           round(extract(epoch from a.finished_at - a.started_at)::numeric, 3),
           coalesce(a.outcome::text, 'running'), a.error, a.deadline_at
      from job_attempts a
     where a.job_id = p_job_id
    window w as (order by a.attempt)
     order by a.attempt;
end;
$$;

--
-- Name: resume_queue(text, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.resume_queue(p_queue text, p_create boolean DEFAULT false) RETURNS SETOF pgqw.queues
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    return query
    insert into queues as q (name, paused, updated_at) values (p_queue, false, now())
    on conflict on constraint queues_pkey do update set paused = false, updated_at = excluded.updated_at
    returning q.*;
    perform pg_notify('pgqw_jobs', p_queue);
end;
$$;

--
-- Name: resume_schedule(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.resume_schedule(p_name text) RETURNS SETOF pgqw.schedules
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
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

--
-- Name: retry_dead(uuid, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.retry_dead(p_job_id uuid, p_extra_attempts integer DEFAULT NULL::integer) RETURNS SETOF pgqw.jobs
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_job jobs;
    v_status text;
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    if p_extra_attempts is not null and (p_extra_attempts < 1 or p_extra_attempts > 1000) then
        raise exception using errcode = 'QV400',
            message = format('extra attempts must be between 1 and 1000, got %s', p_extra_attempts),
            column = 'extra_attempts';
    end if;

    update jobs j
       set status = 'pending', run_at = now(), finished_at = null,
           max_attempts = least(1000, j.max_attempts + coalesce(
               p_extra_attempts, (select s.retry_extra_attempts from queue_settings s)))
     where j.id = p_job_id and j.status = 'dead' and j.attempts < 1000
    returning j.* into v_job;
    if not found then
        select j.status into v_status from jobs j where j.id = p_job_id;
        if not found then
            raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
        end if;
        if v_status = 'dead' then
            raise exception using errcode = 'QS409',
                message = format('job %s has had 1000 attempts, the most a job may have', p_job_id);
        end if;
        raise exception using errcode = 'QS409',
            message = format('job %s is %s; only dead jobs can be retried', p_job_id, v_status);
    end if;
    delete from job_cancel_requests r where r.job_id = p_job_id;

    perform pg_notify('pgqw_jobs', v_job.queue);
    return next v_job;
end;
$$;

--
-- Name: retry_dead_jobs(text, text, text, timestamp with time zone, timestamp with time zone, uuid, uuid, integer, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.retry_dead_jobs(p_type text DEFAULT NULL::text, p_queue text DEFAULT NULL::text, p_error text DEFAULT NULL::text, p_since timestamp with time zone DEFAULT NULL::timestamp with time zone, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_workflow_id uuid DEFAULT NULL::uuid, p_batch_id uuid DEFAULT NULL::uuid, p_limit integer DEFAULT 1000, p_extra_attempts integer DEFAULT NULL::integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_id uuid;
    v_count integer := 0;
begin
    perform check_bulk_filter(p_type, p_queue, p_error, p_since, p_until, p_limit);
    for v_id in
        select j.id from jobs j
         where j.status = 'dead' and j.attempts < 1000
           and (p_type is null or j.type = p_type)
           and (p_queue is null or j.queue = p_queue)
           and (p_error is null or strpos(lower(j.last_error), lower(p_error)) > 0)
           and (p_since is null or j.finished_at >= p_since)
           and (p_until is null or j.finished_at < p_until)
           and (p_workflow_id is null or j.workflow_id = p_workflow_id or j.id = p_workflow_id)
           and (p_batch_id is null or j.batch_id = p_batch_id)
         order by j.finished_at, j.id
         limit p_limit
           for update skip locked
    loop
        perform retry_dead(v_id, p_extra_attempts);
        v_count := v_count + 1;
    end loop;
    return v_count;
end;
$$;

--
-- Name: schedule_times(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.schedule_times() RETURNS TABLE(name text, task_type text, cron text, catch_up text, paused boolean, last_slot timestamp with time zone, slots_after timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
    select s.name, s.task_type, s.cron, s.catch_up, s.paused, s.last_slot, s.slots_after
      from schedules s order by s.name;
$$;

--
-- Name: serial_turn(text, bigint); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.serial_turn(p_serial_key text, p_serial_seq bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    return not exists (select 1 from jobs e
                        where e.serial_key = p_serial_key and e.finished_at is null
                          and (e.serial_seq < p_serial_seq or e.status = 'processing'));
end;
$$;

--
-- Name: set_queue_key_limit(text, integer, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.set_queue_key_limit(p_queue text, p_max_running integer, p_create boolean DEFAULT false) RETURNS SETOF pgqw.queues
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_max_running < 1 then
        raise exception using errcode = 'QV400',
            message = format('max running per key must be at least 1 (or null for no limit), got %s', p_max_running),
            column = 'max_running';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    -- Waiting jobs the old limit held back may start now: a listening worker that found nothing does not poll.
    perform pg_notify('pgqw_jobs', p_queue);
    return query
    insert into queues as q (name, key_max_running, updated_at) values (p_queue, p_max_running, now())
    on conflict on constraint queues_pkey do update set key_max_running = excluded.key_max_running,
                                                        updated_at = excluded.updated_at
    returning q.*;
end;
$$;

--
-- Name: set_queue_limit(text, integer, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.set_queue_limit(p_queue text, p_max_running integer, p_create boolean DEFAULT false) RETURNS SETOF pgqw.queues
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_max_running < 1 then
        raise exception using errcode = 'QV400',
            message = format('max running must be at least 1 (or null for no limit), got %s', p_max_running),
            column = 'max_running';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    -- Waiting jobs the old limit or rate held back may start now: a listening worker that found
    -- nothing does not poll, so it is woken.
    perform pg_notify('pgqw_jobs', p_queue);
    return query
    insert into queues as q (name, max_running, updated_at) values (p_queue, p_max_running, now())
    on conflict on constraint queues_pkey do update set max_running = excluded.max_running,
                                                        updated_at = excluded.updated_at
    returning q.*;
end;
$$;

--
-- Name: set_queue_rate(text, numeric, boolean); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.set_queue_rate(p_queue text, p_jobs_per_second numeric, p_create boolean DEFAULT false) RETURNS SETOF pgqw.queues
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_jobs_per_second = 'NaN' then
        raise exception using errcode = 'QV400',
            message = 'jobs per second must be a number (or null for no rate), got NaN',
            column = 'jobs_per_second';
    end if;
    if p_jobs_per_second <= 0 then
        raise exception using errcode = 'QV400',
            message = format('jobs per second must be above 0 (or null for no rate), got %s',
                             left(p_jobs_per_second::text, 40)),
            column = 'jobs_per_second';
    end if;
    if p_jobs_per_second > 1000000 then
        raise exception using errcode = 'QV400',
            message = format('jobs per second must be at most 1000000, got %s', left(p_jobs_per_second::text, 40)),
            column = 'jobs_per_second';
    end if;
    if p_jobs_per_second <> round(p_jobs_per_second, 6) then
        raise exception using errcode = 'QV400',
            message = format('jobs per second must have at most 6 decimal places, got %s',
                             left(p_jobs_per_second::text, 40)),
            column = 'jobs_per_second';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    -- The bucket: refilled at the old rate up to now (as claim_jobs_at would), then held to the new size.
    -- Waiting jobs the old limit or rate held back may start now: a listening worker that found
    -- nothing does not poll, so it is woken.
    perform pg_notify('pgqw_jobs', p_queue);
    return query
    insert into queues as q (name, jobs_per_second, rate_tokens, rate_refilled_at, updated_at)
    values (p_queue, p_jobs_per_second,
            case when p_jobs_per_second is not null then greatest(1, p_jobs_per_second) end,
            case when p_jobs_per_second is not null then now() end, now())
    on conflict on constraint queues_pkey do update set
        jobs_per_second = excluded.jobs_per_second,
        rate_tokens = case
            when excluded.jobs_per_second is null then null
            when q.jobs_per_second is null then excluded.rate_tokens
            else least(excluded.rate_tokens, greatest(1, q.jobs_per_second),
                       coalesce(q.rate_tokens, greatest(1, q.jobs_per_second))
                       + q.jobs_per_second * greatest(0, extract(epoch from now() - coalesce(q.rate_refilled_at, now()))))
        end,
        rate_refilled_at = case
            when excluded.jobs_per_second is null then null
            when q.jobs_per_second is null then excluded.rate_refilled_at
            else greatest(q.rate_refilled_at, excluded.rate_refilled_at)
        end,
        updated_at = excluded.updated_at
    returning q.*;
end;
$$;

--
-- Name: set_schedule(text, text, text, jsonb, text, integer, text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.set_schedule(p_name text, p_task_type text, p_cron text, p_payload jsonb DEFAULT '{}'::jsonb, p_queue text DEFAULT NULL::text, p_priority integer DEFAULT NULL::integer, p_catch_up text DEFAULT 'latest'::text) RETURNS SETOF pgqw.schedules
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $_$
declare
    v_problem text;
    v_cron text;
    v_max_bytes integer;
begin
    if p_name is null or p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$' then
        raise exception using errcode = 'QV400',
            message = 'a schedule name is 1 to 100 letters, digits, _ . : or -, starting with a letter or digit',
            detail = format('got %s', coalesce(quote_literal(left(p_name, 120)), 'null')),
            column = 'name';
    end if;
    if p_task_type is null then
        raise exception using errcode = 'QV400', message = 'the task type is null',
            column = 'task_type';
    end if;
    v_problem := check_schedule_cron(p_cron);
    if v_problem is not null then
        raise exception using errcode = 'QC400', message = 'the cron expression does not parse: ' || v_problem,
            hint = 'five fields: minute hour day-of-month month day-of-week, e.g. ''*/5 * * * *'', or @hourly, @daily';
    end if;
    v_cron := regexp_replace(regexp_replace(p_cron, '^\s+|\s+$', '', 'g'), '\s+', ' ', 'g');
    if p_payload is null or jsonb_typeof(p_payload) <> 'object' then
        raise exception using errcode = 'QV400',
            message = format('payload must be a JSON object, got %s', coalesce(jsonb_typeof(p_payload), 'null')),
            column = 'payload';
    end if;
    select s.max_payload_bytes into v_max_bytes from queue_settings s;
    if octet_length(p_payload::text) > v_max_bytes then
        raise exception using errcode = 'QV413',
            message = format('payload is %s bytes, more than the limit of %s', octet_length(p_payload::text), v_max_bytes);
    end if;
    if p_queue is not null and (p_queue !~ '\S' or length(p_queue) > 100) then
        raise exception using errcode = 'QV400', message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_catch_up is null or p_catch_up not in ('latest', 'all', 'none') then
        raise exception using errcode = 'QV400', message = 'catch_up must be latest, all or none',
            detail = format('got %s', coalesce(quote_literal(left(p_catch_up, 40)), 'null')),
            column = 'catch_up';
    end if;
    if not exists (select 1 from task_types t where t.name = p_task_type) then
        raise exception using errcode = 'QT422',
            message = format('no task type %L is registered', left(p_task_type, 100)),
            hint = 'a worker registers the task types of its code when it starts: start one first';
    end if;

    return query
    insert into schedules as s (name, task_type, cron, payload, queue, priority, catch_up, source)
    values (p_name, p_task_type, v_cron, p_payload, p_queue, p_priority, p_catch_up, 'sql')
    on conflict on constraint schedules_pkey do update
       set task_type = excluded.task_type, cron = excluded.cron, payload = excluded.payload,
           queue = excluded.queue, priority = excluded.priority, catch_up = excluded.catch_up,
           source = 'sql', updated_at = now(),
           slots_after = case when s.cron = excluded.cron then s.slots_after else greatest(s.slots_after, now()) end
    returning s.*;
end;
$_$;

--
-- Name: settle_jobs(uuid[]); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.settle_jobs(p_ids uuid[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_wave uuid[];                   -- the jobs whose dependents are settled next
    v_batches uuid[];                -- the batches of the jobs ended
    v_cancelled uuid[];
    v_batch record;
    v_counts jsonb;
    v_callback enqueued_job;
begin
    if p_ids is null or cardinality(p_ids) = 0 then
        return;
    end if;
    -- Only a job in a workflow can have dependents (enqueuing a dependent puts each parent in one), and only
    -- a job of a batch can end one.
    select coalesce(array_agg(j.id) filter (where j.workflow_id is not null), '{}'),
           coalesce(array_agg(distinct j.batch_id) filter (where j.batch_id is not null), '{}')
      into v_wave, v_batches
      from jobs j where j.id = any (p_ids);
    while cardinality(v_wave) > 0
          and exists (select 1 from job_dependencies d where d.parent_id = any (v_wave)) loop
        v_cancelled := judge_blocked(array(
            select distinct d.job_id from job_dependencies d where d.parent_id = any (v_wave)));
        if cardinality(v_cancelled) > 0 then
            v_batches := v_batches || array(select distinct j.batch_id from jobs j
                                             where j.id = any (v_cancelled) and j.batch_id is not null);
        end if;
        v_wave := v_cancelled;
    end loop;

    -- Each batch of a job ended, once every one of its jobs is final.
    for v_batch in
        select distinct b.id from unnest(v_batches) as b(id) order by 1
    loop
        perform 1 from batches b where b.id = v_batch.id and b.finished_at is null for update;
        continue when not found;
        -- A new statement after the lock: the ends committed by the batch's other jobs are seen.
        continue when exists (select 1 from jobs j where j.batch_id = v_batch.id and j.finished_at is null);
        select jsonb_build_object(
                   'id', v_batch.id, 'total', count(*),
                   'succeeded', count(*) filter (where j.status = 'succeeded'),
                   'dead', count(*) filter (where j.status = 'dead'),
                   'cancelled', count(*) filter (where j.status = 'cancelled'),
                   'expired', count(*) filter (where j.status = 'expired'))
          into v_counts
          from jobs j where j.batch_id = v_batch.id;
        v_callback := null;
        begin
        select e.* into v_callback
          from batches b,
               enqueue_job(p_type => b.callback ->> 'type',
                           p_payload => coalesce(b.callback -> 'payload', '{}'::jsonb) || jsonb_build_object('batch', v_counts),
                           p_idempotency_key => 'batch:' || b.id,
                           p_queue => b.callback ->> 'queue',
                           p_priority => (b.callback ->> 'priority')::integer,
                           p_max_attempts => (b.callback ->> 'max_attempts')::integer) e
         where b.id = v_batch.id and b.callback is not null;
        exception when others then
            -- The callback could not be enqueued (its type unregistered since, a payload grown too large):
            -- the last job's own end is not refused for it; the batch keeps the error for a person.
            update batches b set callback_error = format('%s: %s', sqlstate, sqlerrm) where b.id = v_batch.id;
        end;
        update batches b set finished_at = now(), callback_job_id = (v_callback.job).id where b.id = v_batch.id;
    end loop;
end;
$$;

--
-- Name: snooze_job(uuid, uuid, timestamp with time zone, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.snooze_job(p_job_id uuid, p_lease_token uuid, p_until timestamp with time zone DEFAULT NULL::timestamp with time zone, p_delay_ms integer DEFAULT NULL::integer) RETURNS SETOF pgqw.recorded_job
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_job jobs;
    v_held record;
    v_attempt integer;
    v_outcome text;
    v_error text;
    v_until timestamptz;
    v_cancel boolean;
    v_requested_at timestamptz;
    v_limit integer;
    v_snoozes integer;
begin
    if p_job_id is null or p_lease_token is null then
        raise exception using errcode = 'QV400', message = 'job id and lease token must not be null',
            column = case when p_job_id is null then 'job_id' else 'lease_token' end;
    end if;
    if (p_until is null) = (p_delay_ms is null) then
        raise exception using errcode = 'QV400',
            message = 'give exactly one of until (a time) and delay_ms (milliseconds from now)',
            column = case when p_until is null then 'until' else 'delay_ms' end;
    end if;
    if p_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = format('delay_ms must not be negative, got %s', p_delay_ms), column = 'delay_ms';
    end if;
    if not isfinite(p_until) or p_until >= '9999-01-01' then
        raise exception using errcode = 'QV400',
            message = format('until must be a finite time before the year 9999, got %s', p_until), column = 'until';
    end if;
    v_until := greatest(now(), coalesce(p_until, now() + make_interval(secs => p_delay_ms / 1000.0)));
    v_held := find_lease_attempt(p_job_id, p_lease_token);
    v_attempt := v_held.attempt;
    v_outcome := v_held.outcome;
    -- A cancel request is read with the job held: cancel_job holds it to make one.
    perform 1 from jobs k where k.id = p_job_id for update;
    select r.requested_at into v_requested_at from job_cancel_requests r where r.job_id = p_job_id;
    v_cancel := v_requested_at is not null;
    -- The job's limit, and its snoozes so far (through the primary key: one job's attempts).
    select coalesce(t.max_snoozes, s.max_snoozes) into v_limit
      from queue_settings s
      left join jobs k on k.id = p_job_id
      left join task_type_settings t on t.name = k.type;
    v_snoozes := (select count(*) from job_attempts a where a.job_id = p_job_id and a.outcome = 'snoozed');

    -- As it would end: snoozed, or cancelled, or failed (over the limit, or on the 1000th attempt).
    v_error := case
        when v_cancel then format('cancelled on request (asked at %s)', v_requested_at)
        when v_snoozes >= v_limit then format('snoozed more than %s time%s', v_limit, case when v_limit = 1 then '' else 's' end)
        else format('snoozed until %s', v_until) end;

    -- locked_by is not null is status = 'processing' (as in mark_failed).
    update jobs j
       set status = case when v_cancel then 'cancelled'
                         when v_snoozes >= v_limit or j.attempts >= least(1000, j.max_attempts + 1) then 'dead'
                         else 'pending' end,
           run_at = case when v_cancel or v_snoozes >= v_limit or j.attempts >= least(1000, j.max_attempts + 1)
                         then j.run_at else v_until end,
           max_attempts = case when v_cancel or v_snoozes >= v_limit then j.max_attempts
                               else least(1000, j.max_attempts + 1) end,
           finished_at = case when v_cancel or v_snoozes >= v_limit or j.attempts >= least(1000, j.max_attempts + 1)
                              then greatest(now(), j.started_at) end,
           last_error = case when v_cancel then j.last_error
                             when v_snoozes >= v_limit then v_error
                             when j.attempts >= least(1000, j.max_attempts + 1)
                                 then 'snoozed on its last attempt: a job has at most 1000'
                             else j.last_error end,
           locked_by = null, lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = v_attempt and v_outcome is null
    returning j.* into v_job;
    if found then
        update job_attempts a
           set outcome = case when v_cancel then 'cancelled'
                              when v_job.status = 'dead' then 'failed' else 'snoozed' end,
               error = case when v_job.status = 'dead' then v_job.last_error else v_error end,
               finished_at = greatest(now(), a.started_at)
         where a.job_id = p_job_id and a.attempt = v_attempt;
        if v_job.status in ('dead', 'cancelled') then
            perform notify_watchers(p_job_id);  -- watch_job
            -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
            if v_job.workflow_id is not null or v_job.batch_id is not null then
                perform settle_jobs(array[p_job_id]);
            end if;
        else
            perform notify_due(v_job.queue, v_job.run_at);  -- a worker wakes when it comes due
        end if;
        return query select v_job, false;
        return;
    end if;

    -- Not held now. An earlier try of this call committed but its reply was lost: the attempt's row says it
    -- ended as a snooze ends. The job may have moved on since: it is returned as it is now.
    select a.outcome, a.error into v_outcome, v_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = v_attempt;
    if v_outcome in ('snoozed', 'cancelled')
       or (v_outcome = 'failed' and (v_error like 'snoozed more than %' or v_error like 'snoozed on its last attempt%')) then
        return query select j, true from jobs j where j.id = p_job_id;
        return;
    end if;
    perform raise_job_not_held(p_job_id, v_attempt);
end;
$$;

--
-- Name: stop_worker(text); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.stop_worker(p_worker_id text) RETURNS SETOF pgqw.workers
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_worker_id is null then
        raise exception using errcode = 'QV400', message = 'worker id must not be null',
            column = 'worker_id';
    end if;
    delete from queue_waiters q where q.worker_id = p_worker_id;  -- it no longer waits for jobs (wait_for_jobs)
    return query
    update workers w set stopped_at = now(), last_seen_at = now(), expires_at = now()
     where w.id = p_worker_id
    returning w.*;
end;
$$;

--
-- Name: sweep_stuck(); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.sweep_stuck() RETURNS TABLE(job_id uuid, attempt integer, worker_id text, status text, lease_expired_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    -- The server's clock: only the owner may sweep as of another time (sweep_stuck_at).
    return query select * from sweep_stuck_at(now());
end;
$$;

--
-- Name: sweep_stuck_at(timestamp with time zone); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.sweep_stuck_at(p_now timestamp with time zone) RETURNS TABLE(job_id uuid, attempt integer, worker_id text, status text, lease_expired_at timestamp with time zone)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    SET jit TO 'off'
    AS $$
declare
    v_ids uuid[];
    v_timed_out uuid[];
    v_stuck record;
    v_job jobs;
    v_swept bigint := 0;
    v_expired bigint := 0;
    v_expired_ids uuid[];
begin
    if p_now is null then
        raise exception using errcode = 'QV400', message = 'now must not be null',
            column = 'now';
    end if;

    -- Jobs not started by their expiry: final, never claimed (claim_jobs_at skips them). jobs_expiry_idx holds
    -- only jobs that may expire, so this reads what it ends and no more.
    with due as (
        select j.id from jobs j
         where j.status = 'pending' and j.attempts = 0 and j.expires_at <= p_now
         order by j.expires_at
         limit 10000
           for update skip locked
    )
    , ended as (
        update jobs j
           set status = 'expired', finished_at = now(), last_error = format('expired at %s', j.expires_at)
          from due
         where j.id = due.id
        returning j.id
    )
    select array(select e.id from ended e) into v_expired_ids;
    v_expired := cardinality(v_expired_ids);
    perform settle_jobs(v_expired_ids);  -- their dependents (cancelled) and batches

    -- Listings of jobs that are final (their last attempt ended): nothing runs them again.
    delete from job_isolation i using jobs j
     where j.id = i.job_id and j.status in ('succeeded', 'dead', 'cancelled', 'expired');

    -- The expired leases are locked first (rows another session holds are skipped: it is ending them), and
    -- the cancel requests and listings read in the statements after: under read committed each statement
    -- sees what committed before it began, and cancel_job needs the row lock to make a request, so a request
    -- is either seen here or made after this commits (when it finds the job no longer processing).
    v_ids := array(
        select j.id
          from jobs j
         where j.status = 'processing' and j.lease_expires_at < p_now
         order by j.lease_expires_at
           for update skip locked);
    -- Timed out: held until its deadline (the lease reached it), and not asked to cancel (a request moved the
    -- deadline to its own time: the job ends cancelled below). The rest stopped responding before theirs.
    v_timed_out := array(
        select j.id
          from jobs j
         where j.id = any (v_ids) and j.lease_expires_at >= j.deadline_at
           and not exists (select 1 from job_cancel_requests r where r.job_id = j.id));
    if cardinality(v_timed_out) > 0 then
        v_ids := array(select x from unnest(v_ids) as x where not x = any (v_timed_out));
    end if;

    return query
    with asked as (
        select j.id, j.attempts, j.locked_by, j.lease_expires_at, j.deadline_at,
               (select r.requested_at from job_cancel_requests r where r.job_id = j.id) as cancel_requested_at,
               exists (select 1 from job_isolation i where i.job_id = j.id) as alone
          from jobs j
         where j.id = any (v_ids)
    ), stuck as (
        select asked.*, asked.cancel_requested_at is not null as cancel,
               -- Stopped by its cancel: the request moved the deadline, and the lease, extended no more,
               -- ran to it (its handler did not stop by itself). A lease that ran out before is a worker
               -- that stopped responding, asked or not.
               coalesce(asked.cancel_requested_at is not null and asked.lease_expires_at >= asked.deadline_at,
                        false) as stopped_by_cancel
          from asked
    ), judged as (
        select stuck.*,
               -- Given back: the attempt is not spent (as release_job gives a handed-back one back).
               (not stuck.cancel and not stuck.alone and j.max_attempts < 1000) as given_back,
               case when not stuck.cancel and not stuck.alone and j.max_attempts < 1000
                    then j.max_attempts + 1 else j.max_attempts end as max_attempts
          from stuck join jobs j on j.id = stuck.id
    ), swept as (
        update jobs j
           set status = case when judged.cancel then 'cancelled'
                             when j.attempts < judged.max_attempts then 'pending' else 'dead' end,
               max_attempts = judged.max_attempts,
               run_at = case when not judged.cancel and j.attempts < judged.max_attempts then now() else j.run_at end,
               finished_at = case when not judged.cancel and j.attempts < judged.max_attempts
                                  then null else greatest(now(), j.started_at) end,
               last_error = case when judged.stopped_by_cancel
                                 then format('cancelled on request (asked at %s): its lease on attempt %s ran out at %s',
                                             judged.cancel_requested_at, judged.attempts, judged.lease_expires_at)
                                 else format('worker %s stopped responding: its lease on attempt %s expired at %s%s',
                                             judged.locked_by, judged.attempts, judged.lease_expires_at,
                                             case when judged.given_back
                                                  then ' (the attempt is given back: the job runs alone next)'
                                                  when judged.alone then ' while it ran alone' else '' end) end,
               locked_by = null,
               lease_expires_at = null
          from judged
         where j.id = judged.id
        returning j.id, j.status
    ), abandoned as (
        update job_attempts a
           set outcome = case when judged.stopped_by_cancel then 'cancelled' else 'abandoned' end,
               abandon_reason = case when judged.stopped_by_cancel then null else 'lease_expired' end,
               finished_at = greatest(now(), a.started_at),
               error = case when judged.stopped_by_cancel
                            then format('cancelled on request (asked at %s): its lease ran out at %s',
                                        judged.cancel_requested_at, judged.lease_expires_at)
                            else format('worker %s stopped responding (lease expired at %s)',
                                        judged.locked_by, judged.lease_expires_at) end
          from judged
         where a.job_id = judged.id and a.attempt = judged.attempts
    ), listed as (
        insert into job_isolation (job_id)
        select judged.id from judged where judged.given_back
        on conflict on constraint job_isolation_pkey do nothing
    )
    select judged.id, judged.attempts, judged.locked_by::text, swept.status::text, judged.lease_expires_at
      from judged join swept on swept.id = judged.id
     order by judged.lease_expires_at, judged.id;
    get diagnostics v_swept = row_count;
    -- The swept jobs that ended (dead, cancelled): their dependents and batches.
    if v_swept > 0 then
        perform settle_jobs(array(select j.id from jobs j
                                   where j.id = any (v_ids) and j.status in ('dead', 'cancelled')));
    end if;

    for v_stuck in
        select j.id, j.attempts, j.locked_by, j.lease_expires_at
          from jobs j where j.id = any (v_timed_out) order by j.lease_expires_at, j.id
    loop
        v_job := time_out_attempt(v_stuck.id, v_stuck.attempts);
        return query select v_stuck.id, v_stuck.attempts::integer, v_stuck.locked_by::text, v_job.status::text,
                            v_stuck.lease_expires_at;
        v_swept := v_swept + 1;
    end loop;

    if v_expired > 0 and exists (select 1 from job_waiters) then  -- watch_job: some watched jobs may have expired
        perform pg_notify('pgqw_finished', '*');
    end if;
    if v_swept > 0 then
        -- Wake workers of every queue ('*'): some swept jobs are ready again; and whoever waits for a
        -- job to end: some may be dead now.
        perform pg_notify('pgqw_jobs', '*');
        if exists (select 1 from job_waiters) then  -- watch_job
            perform pg_notify('pgqw_finished', '*');
        end if;
    elsif exists (select 1 from jobs r
                   where r.status in ('pending', 'failed')
                     and r.run_at <= p_now - interval '1 second'
                     and r.attempts < r.max_attempts
                     and not exists (select 1 from queues q
                                      where q.name = r.queue
                                        and (q.paused or q.jobs_per_second is not null
                                             or q.max_running <= (select count(*) from jobs p
                                                                   where p.queue = q.name and p.status = 'processing')))) then
        -- The safety net for listening workers, which stop polling once a claim found nothing: a job ready
        -- for a second or more that no claim took wakes them: the claim that locked it rolled back, a row
        -- was written by hand, or a limited queue (max_running) got a slot back when one of its jobs ended
        -- (the completions do not look at queues: the worker that ran it claims again at once, and this
        -- catches a job of a type it does not run). Paused queues wait for resume_queue, rated ones for
        -- the next token a claim announced, and a limited queue at its limit for a slot.
        perform pg_notify('pgqw_jobs', '*');
    end if;
end;
$$;

--
-- Name: time_out_attempt(uuid, integer, integer, integer, integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.time_out_attempt(p_job_id uuid, p_attempt integer, p_base_ms integer DEFAULT NULL::integer, p_max_jitter_ms integer DEFAULT NULL::integer, p_max_delay_ms integer DEFAULT NULL::integer) RETURNS pgqw.jobs
    LANGUAGE plpgsql
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
#variable_conflict use_column
declare
    v_job jobs;
    v_type task_type_settings;
    v_error text;
    v_spared integer := 0;
begin
    select format('timed out after %s ms (its deadline was %s)',
                  round(extract(epoch from a.deadline_at - a.started_at) * 1000)::bigint, a.deadline_at)
      into v_error
      from job_attempts a where a.job_id = p_job_id and a.attempt = p_attempt;
    -- The job's task type's backoff where an argument is null (a type no worker registered: none).
    select t.* into v_type from jobs k join task_type_settings t on t.name = k.type where k.id = p_job_id;
    -- The attempts before this one that spent no try (snoozed, handed back), as mark_failed counts them.
    if p_attempt > 1 then
        v_spared := (select count(*) from job_attempts a
                      where a.job_id = p_job_id and a.attempt < p_attempt
                        and (a.outcome = 'snoozed' or a.abandon_reason = 'handed_back'));
    end if;

    update jobs j
       set status = case when j.attempts < j.max_attempts then 'failed' else 'dead' end,
           run_at = case when j.attempts < j.max_attempts
                         then now() + backoff_delay(j.attempts - v_spared, coalesce(p_base_ms, v_type.backoff_base_ms),
                                                    coalesce(p_max_jitter_ms, v_type.backoff_max_jitter_ms),
                                                    coalesce(p_max_delay_ms, v_type.backoff_max_delay_ms))
                         else j.run_at end,
           finished_at = case when j.attempts < j.max_attempts then null else greatest(now(), j.started_at) end,
           last_error = v_error,
           locked_by = null,
           lease_expires_at = null
     where j.id = p_job_id and j.locked_by is not null and j.attempts = p_attempt
    returning j.* into v_job;
    if not found then
        perform raise_job_not_held(p_job_id, p_attempt);  -- its callers checked: not reached
    end if;
    update job_attempts a
       set outcome = 'timed_out', error = v_error, finished_at = greatest(now(), a.started_at)
     where a.job_id = p_job_id and a.attempt = p_attempt;

    if v_job.status = 'dead' then
        perform notify_watchers(p_job_id);  -- watch_job
        -- Its dependents and batch: only a job in a workflow (every parent is) or a batch has them.
        if v_job.workflow_id is not null or v_job.batch_id is not null then
            perform settle_jobs(array[p_job_id]);
        end if;
    else
        perform notify_due(v_job.queue, v_job.run_at);  -- a worker wakes when it comes due
    end if;
    return v_job;
end;
$$;

--
-- Name: unwatch_job(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.unwatch_job(p_job_id uuid) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    delete from job_waiters w where w.job_id = p_job_id and w.backend_pid = pg_backend_pid();
    return found;
end;
$$;

--
-- Name: wait_for_jobs(text, text[], integer); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.wait_for_jobs(p_worker_id text, p_queues text[] DEFAULT NULL::text[], p_for_ms integer DEFAULT 60000) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
declare
    v_until timestamptz;
    v_queues text[];
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters',
            column = 'worker_id';
    end if;
    if p_queues is not null and (cardinality(p_queues) = 0 or cardinality(p_queues) > 1000
                                 or array_position(p_queues, null) is not null
                                 or exists (select 1 from unnest(p_queues) q where q !~ '\S' or length(q) > 200)) then
        raise exception using errcode = 'QV400',
            message = 'queues, when given, must be 1 to 1000 non-blank names of at most 200 characters, without nulls',
            column = 'queues';
    end if;
    if p_for_ms is null or p_for_ms < 1000 or p_for_ms > 3600000 then
        raise exception using errcode = 'QV400',
            message = format('for_ms must be between 1000 and 3600000, got %s', coalesce(p_for_ms::text, 'null')),
            column = 'for_ms';
    end if;
    v_until := now() + make_interval(secs => p_for_ms / 1000.0);
    v_queues := case when p_queues is null then array['*'] else array(select distinct q from unnest(p_queues) q) end;
    delete from queue_waiters w
     where (w.worker_id = p_worker_id and not w.queue = any (v_queues))
        or w.until < now() - interval '1 minute';
    insert into queue_waiters as w (queue, worker_id, until)
    select q, p_worker_id, v_until from unnest(v_queues) q
    on conflict (queue, worker_id) do update set until = excluded.until;
    return v_until;
end;
$$;

--
-- Name: waits_settled(xid8); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.waits_settled(p_xid xid8) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_xid is null then
        raise exception using errcode = 'QV400', message = 'the transaction id is null', column = 'xid';
    end if;
    return pg_snapshot_xmin(pg_current_snapshot()) > p_xid;
end;
$$;

--
-- Name: watch_job(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.watch_job(p_job_id uuid) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
    AS $$
declare
    v_status text;
begin
    if p_job_id is null then
        raise exception using errcode = 'QV400', message = 'job id must not be null',
            column = 'job_id';
    end if;
    select j.status into v_status from jobs j where j.id = p_job_id;
    if not found then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    if v_status = 'processing' then
        -- A completion under way holds the row: wait for it, then read the row as it left it.
        select j.status into v_status from jobs j where j.id = p_job_id for share;
    end if;
    insert into job_waiters as w (job_id, backend_pid) values (p_job_id, pg_backend_pid())
    on conflict (job_id, backend_pid) do nothing;
    return v_status;
end;
$$;

--
-- Name: workflow_jobs(uuid); Type: FUNCTION; Schema: pgqw; Owner: -
--

CREATE FUNCTION pgqw.workflow_jobs(p_workflow_id uuid) RETURNS SETOF pgqw.workflow_job
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pgqw', 'pg_temp'
    AS $$
begin
    if p_workflow_id is null then
        raise exception using errcode = 'QV400', message = 'workflow id must not be null', column = 'workflow_id';
    end if;
    return query
    with recursive members as (
        select j.id from jobs j where j.workflow_id = p_workflow_id or j.id = p_workflow_id
    ), depth(id, n) as (
        -- How far each job is from the workflow's roots (the longest chain of parents within it).
        select m.id, 0 from members m
         where not exists (select 1 from job_dependencies d join members p on p.id = d.parent_id where d.job_id = m.id)
        union  -- (job, distance) pairs, not paths: a graph of many paths stays small
        select d.job_id, depth.n + 1
          from depth join job_dependencies d on d.parent_id = depth.id join members m on m.id = d.job_id
         where depth.n < 1000
    )
    select j, coalesce(array(select d.parent_id from job_dependencies d where d.job_id = j.id order by d.parent_id),
                       '{}'),
           coalesce((select bool_and(d.run_anyway) from job_dependencies d where d.job_id = j.id), false),
           coalesce(array(select d.parent_id from job_dependencies d where d.job_id = j.id and d.run_anyway
                           order by d.parent_id), '{}')
      from jobs j join (select depth.id, max(depth.n) as n from depth group by depth.id) o on o.id = j.id
     order by o.n, j.created_at, j.id;
    if not found then
        raise exception using errcode = 'QN404', message = format('workflow %s has no job', p_workflow_id);
    end if;
end;
$$;

--
-- Name: batches; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.batches (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    idempotency_key text,
    callback jsonb,
    callback_job_id uuid,
    callback_error text,
    total integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT batches_callback_is_object CHECK ((jsonb_typeof(callback) = 'object'::text)),
    CONSTRAINT batches_idempotency_key_charset CHECK ((((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255)) AND (idempotency_key !~ '[^!-~]'::text))),
    CONSTRAINT batches_total_range CHECK (((total >= 1) AND (total <= 10000)))
);

--
-- Name: job_attempts; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.job_attempts (
    job_id uuid NOT NULL,
    attempt pgqw.attempt_number NOT NULL,
    worker_id text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    outcome pgqw.attempt_outcome,
    error text,
    abandon_reason text,
    lease_token_hash bytea,
    deadline_at timestamp with time zone,
    CONSTRAINT job_attempts_row_rules CHECK (pgqw.check_attempt_row((outcome)::text, error, abandon_reason, started_at, finished_at))
)
WITH (fillfactor='80', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.05');

--
-- Name: job_cancel_requests; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.job_cancel_requests (
    job_id uuid NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: job_dependencies; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.job_dependencies (
    job_id uuid NOT NULL,
    parent_id uuid NOT NULL,
    run_anyway boolean DEFAULT false NOT NULL,
    CONSTRAINT job_dependencies_not_self CHECK ((job_id <> parent_id))
);

--
-- Name: job_isolation; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.job_isolation (
    job_id uuid NOT NULL,
    listed_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: job_results; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.job_results (
    job_id uuid NOT NULL,
    content_type text NOT NULL,
    value jsonb,
    data bytea,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_results_content_type_form CHECK (((content_type ~ '^[!-~]+/[!-~]+$'::text) AND (length(content_type) <= 200))),
    CONSTRAINT job_results_json_is_json CHECK (((value IS NULL) OR (content_type = 'application/json'::text))),
    CONSTRAINT job_results_one_kind CHECK (((value IS NULL) <> (data IS NULL)))
);

--
-- Name: job_serial_seq; Type: SEQUENCE; Schema: pgqw; Owner: -
--

CREATE SEQUENCE pgqw.job_serial_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: job_waiters; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.job_waiters (
    job_id uuid NOT NULL,
    backend_pid integer NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: migrations; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: queue_settings; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.queue_settings (
    id boolean DEFAULT true NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    backoff_base_ms integer DEFAULT 2000 NOT NULL,
    backoff_max_jitter_ms integer DEFAULT 1000 NOT NULL,
    backoff_max_delay_ms integer DEFAULT 3600000 NOT NULL,
    lease_ms integer DEFAULT 60000 NOT NULL,
    retry_extra_attempts integer DEFAULT 5 NOT NULL,
    max_payload_bytes integer DEFAULT 65536 NOT NULL,
    accept_unregistered_types boolean DEFAULT false NOT NULL,
    prune_succeeded_after interval DEFAULT '7 days'::interval NOT NULL,
    prune_finished_after interval DEFAULT '30 days'::interval NOT NULL,
    max_snoozes integer DEFAULT 100 NOT NULL,
    CONSTRAINT queue_settings_backoff_base_range CHECK ((backoff_base_ms >= 0)),
    CONSTRAINT queue_settings_backoff_jitter_range CHECK ((backoff_max_jitter_ms >= 0)),
    CONSTRAINT queue_settings_backoff_max_delay_range CHECK ((backoff_max_delay_ms >= 0)),
    CONSTRAINT queue_settings_lease_range CHECK ((lease_ms >= 1)),
    CONSTRAINT queue_settings_max_attempts_range CHECK (((max_attempts >= 1) AND (max_attempts <= 1000))),
    CONSTRAINT queue_settings_max_payload_range CHECK (((max_payload_bytes >= 2) AND (max_payload_bytes <= 104857600))),
    CONSTRAINT queue_settings_max_snoozes_range CHECK (((max_snoozes >= 0) AND (max_snoozes <= 1000))),
    CONSTRAINT queue_settings_prune_finished_range CHECK (((prune_finished_after >= '00:00:00'::interval) AND (prune_finished_after <= '100 years'::interval))),
    CONSTRAINT queue_settings_prune_succeeded_range CHECK (((prune_succeeded_after >= '00:00:00'::interval) AND (prune_succeeded_after <= '100 years'::interval))),
    CONSTRAINT queue_settings_retry_extra_range CHECK (((retry_extra_attempts >= 1) AND (retry_extra_attempts <= 1000))),
    CONSTRAINT queue_settings_single_row CHECK (id)
);

--
-- Name: queue_waiters; Type: TABLE; Schema: pgqw; Owner: -
--

CREATE TABLE pgqw.queue_waiters (
    queue text NOT NULL,
    worker_id text NOT NULL,
    until timestamp with time zone NOT NULL
);

--
-- Name: task_type_settings; Type: VIEW; Schema: pgqw; Owner: -
--

CREATE VIEW pgqw.task_type_settings AS
 SELECT t.name,
    COALESCE(t.queue, t.code_queue, 'default'::text) AS queue,
    COALESCE(t.priority, t.code_priority, 0) AS priority,
    COALESCE(t.max_attempts, t.code_max_attempts, s.max_attempts) AS max_attempts,
    COALESCE(t.backoff_base_ms, t.code_backoff_base_ms, s.backoff_base_ms) AS backoff_base_ms,
    COALESCE(t.backoff_max_delay_ms, t.code_backoff_max_delay_ms, s.backoff_max_delay_ms) AS backoff_max_delay_ms,
    COALESCE(t.backoff_max_jitter_ms, t.code_backoff_max_jitter_ms, s.backoff_max_jitter_ms) AS backoff_max_jitter_ms,
    COALESCE(t.lease_ms,
        CASE
            WHEN (t.code_lease_ms IS NOT NULL) THEN LEAST(86400000, GREATEST(1000, t.code_lease_ms))
            ELSE NULL::integer
        END, s.lease_ms) AS lease_ms,
    t.payload_schema,
    COALESCE(t.timeout_ms, t.code_timeout_ms) AS timeout_ms,
    COALESCE(t.expire_after_ms, t.code_expire_after_ms) AS expire_after_ms,
    COALESCE(t.retain_succeeded, t.code_retain_succeeded, s.prune_succeeded_after) AS retain_succeeded,
    COALESCE(t.retain_failed, t.code_retain_failed, s.prune_finished_after) AS retain_failed,
    COALESCE(t.max_snoozes, t.code_max_snoozes, s.max_snoozes) AS max_snoozes
   FROM (pgqw.task_types t
     CROSS JOIN pgqw.queue_settings s);

--
-- Name: batches batches_idempotency_key_key; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.batches
    ADD CONSTRAINT batches_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: batches batches_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.batches
    ADD CONSTRAINT batches_pkey PRIMARY KEY (id);

--
-- Name: job_attempts job_attempts_job_id_attempt_key; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_attempts
    ADD CONSTRAINT job_attempts_job_id_attempt_key PRIMARY KEY (job_id, attempt);

--
-- Name: job_attempts job_attempts_lease_token_hash_sha256; Type: CHECK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE pgqw.job_attempts
    ADD CONSTRAINT job_attempts_lease_token_hash_sha256 CHECK (
CASE
    WHEN (lease_token_hash IS NULL) THEN (outcome IS NOT NULL)
    ELSE (octet_length(lease_token_hash) = 32)
END) NOT VALID;

--
-- Name: job_cancel_requests job_cancel_requests_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_cancel_requests
    ADD CONSTRAINT job_cancel_requests_pkey PRIMARY KEY (job_id);

--
-- Name: job_dependencies job_dependencies_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_dependencies
    ADD CONSTRAINT job_dependencies_pkey PRIMARY KEY (job_id, parent_id);

--
-- Name: job_isolation job_isolation_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_isolation
    ADD CONSTRAINT job_isolation_pkey PRIMARY KEY (job_id);

--
-- Name: job_results job_results_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_results
    ADD CONSTRAINT job_results_pkey PRIMARY KEY (job_id);

--
-- Name: job_waiters job_waiters_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_waiters
    ADD CONSTRAINT job_waiters_pkey PRIMARY KEY (job_id, backend_pid);

--
-- Name: jobs jobs_idempotency_key_key; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.jobs
    ADD CONSTRAINT jobs_idempotency_key_key UNIQUE (idempotency_key);

--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

--
-- Name: migrations migrations_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.migrations
    ADD CONSTRAINT migrations_pkey PRIMARY KEY (version);

--
-- Name: queue_settings queue_settings_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.queue_settings
    ADD CONSTRAINT queue_settings_pkey PRIMARY KEY (id);

--
-- Name: queue_waiters queue_waiters_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.queue_waiters
    ADD CONSTRAINT queue_waiters_pkey PRIMARY KEY (queue, worker_id);

--
-- Name: queues queues_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.queues
    ADD CONSTRAINT queues_pkey PRIMARY KEY (name);

--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

--
-- Name: task_types task_types_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.task_types
    ADD CONSTRAINT task_types_pkey PRIMARY KEY (name);

--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);

--
-- Name: batches_open_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX batches_open_idx ON pgqw.batches USING btree (id) WHERE (finished_at IS NULL);

--
-- Name: job_dependencies_parent_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX job_dependencies_parent_idx ON pgqw.job_dependencies USING btree (parent_id);

--
-- Name: jobs_batch_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_batch_idx ON pgqw.jobs USING btree (batch_id, status) WHERE (batch_id IS NOT NULL);

--
-- Name: jobs_expiry_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_expiry_idx ON pgqw.jobs USING btree (expires_at) WHERE (((status)::text = 'pending'::text) AND (attempts = 0) AND (expires_at IS NOT NULL));

--
-- Name: jobs_lease_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_lease_idx ON pgqw.jobs USING btree (lease_expires_at) WHERE ((status)::text = 'processing'::text);

--
-- Name: jobs_queue_status_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_queue_status_idx ON pgqw.jobs USING btree (queue, status, run_at);

--
-- Name: jobs_ready_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_ready_idx ON pgqw.jobs USING btree (priority DESC, run_at, id) WHERE ((status)::text = ANY (ARRAY['pending'::text, 'failed'::text]));

--
-- Name: jobs_serial_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_serial_idx ON pgqw.jobs USING btree (serial_key, serial_seq) WHERE ((serial_key IS NOT NULL) AND (finished_at IS NULL));

--
-- Name: jobs_serial_running_key; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE UNIQUE INDEX jobs_serial_running_key ON pgqw.jobs USING btree (serial_key) WHERE (((status)::text = 'processing'::text) AND (serial_key IS NOT NULL));

--
-- Name: jobs_status_created_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_status_created_idx ON pgqw.jobs USING btree (status, created_at DESC, id DESC);

--
-- Name: jobs_type_finished_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_type_finished_idx ON pgqw.jobs USING btree (type, status, finished_at) WHERE (finished_at IS NOT NULL);

--
-- Name: jobs_workflow_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX jobs_workflow_idx ON pgqw.jobs USING btree (workflow_id) WHERE (workflow_id IS NOT NULL);

--
-- Name: queue_waiters_worker_idx; Type: INDEX; Schema: pgqw; Owner: -
--

CREATE INDEX queue_waiters_worker_idx ON pgqw.queue_waiters USING btree (worker_id);

--
-- Name: jobs_queue_status_stats; Type: STATISTICS; Schema: pgqw; Owner: -
--

CREATE STATISTICS pgqw.jobs_queue_status_stats (mcv) ON status, queue FROM pgqw.jobs;

--
-- Name: job_attempts job_attempts_job_id_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_attempts
    ADD CONSTRAINT job_attempts_job_id_fkey FOREIGN KEY (job_id) REFERENCES pgqw.jobs(id) ON DELETE CASCADE;

--
-- Name: job_cancel_requests job_cancel_requests_job_id_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_cancel_requests
    ADD CONSTRAINT job_cancel_requests_job_id_fkey FOREIGN KEY (job_id) REFERENCES pgqw.jobs(id) ON DELETE CASCADE;

--
-- Name: job_dependencies job_dependencies_job_id_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_dependencies
    ADD CONSTRAINT job_dependencies_job_id_fkey FOREIGN KEY (job_id) REFERENCES pgqw.jobs(id) ON DELETE CASCADE;

--
-- Name: job_dependencies job_dependencies_parent_id_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_dependencies
    ADD CONSTRAINT job_dependencies_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES pgqw.jobs(id) ON DELETE CASCADE;

--
-- Name: job_isolation job_isolation_job_id_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_isolation
    ADD CONSTRAINT job_isolation_job_id_fkey FOREIGN KEY (job_id) REFERENCES pgqw.jobs(id) ON DELETE CASCADE;

--
-- Name: job_results job_results_job_id_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.job_results
    ADD CONSTRAINT job_results_job_id_fkey FOREIGN KEY (job_id) REFERENCES pgqw.jobs(id) ON DELETE CASCADE;

--
-- Name: schedules schedules_task_type_fkey; Type: FK CONSTRAINT; Schema: pgqw; Owner: -
--

ALTER TABLE ONLY pgqw.schedules
    ADD CONSTRAINT schedules_task_type_fkey FOREIGN KEY (task_type) REFERENCES pgqw.task_types(name);

--
-- PostgreSQL database dump complete
--
