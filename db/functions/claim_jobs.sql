-- claim_jobs: takes up to p_limit ready jobs for one worker in one statement (pending/failed → processing).
-- Ready means status pending or failed with run_at <= p_now (and a try left); highest priority first, then oldest run_at.
-- Rows are picked with for update skip locked, so concurrent claimers never take the same job and never wait.
-- Each claimed job gets attempts + 1, started_at, locked_by, a lease (p_lease_ms or queue_settings.lease_ms)
-- and a job_attempts row, all in the same statement. Returns the claimed rows, or no row.
-- Raises QV400 for a missing worker id or an out-of-range limit, lease or queue list.
create or replace function claim_jobs(
    p_worker_id  text,
    p_limit      integer,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_now        timestamptz default now()
) returns setof jobs
language plpgsql
as $$
begin
    if p_worker_id is null or btrim(p_worker_id) = '' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null'));
    end if;
    if p_lease_ms is not null and p_lease_ms < 1 then
        raise exception using errcode = 'QV400',
            message = format('lease must be at least 1 ms, got %s', p_lease_ms);
    end if;
    if p_queues is not null and cardinality(p_queues) = 0 then
        raise exception using errcode = 'QV400', message = 'queues, when given, must name at least one queue';
    end if;
    if p_now is null then
        raise exception using errcode = 'QV400', message = 'now must not be null';
    end if;

    return query
    with picked as (
        select j.id
          from jobs j
         where j.status in ('pending', 'failed')
           and j.run_at <= p_now
           and j.attempts < j.max_attempts
           and (p_queues is null or j.queue = any (p_queues))
         order by j.priority desc, j.run_at, j.id
         limit p_limit
           for update skip locked
    ), claimed as (
        update jobs j
           set status = 'processing',
               attempts = j.attempts + 1,
               started_at = p_now,
               locked_by = p_worker_id,
               lease_expires_at = p_now + make_interval(
                   secs => coalesce(p_lease_ms, (select s.lease_ms from queue_settings s)) / 1000.0)
          from picked
         where j.id = picked.id
           and j.status in ('pending', 'failed')
        returning j.*
    ), recorded as (
        insert into job_attempts (job_id, attempt, worker_id, started_at)
        select c.id, c.attempts, c.locked_by, c.started_at from claimed c
    )
    select c.* from claimed c order by c.priority desc, c.run_at, c.id;
end;
$$;
