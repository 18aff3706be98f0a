-- set_queue_rate: at most p_jobs_per_second of the queue's jobs started per second, across all workers
-- (claim_jobs_at enforces it with a bucket of greatest(1, rate) tokens); null removes the rate. A new rate
-- starts with a full bucket; a changed one keeps what its bucket held, up to the new size. Notifies pgqw_jobs
-- with the queue. Returns the queue's row.
-- A queue that is not known yet is refused (QU404) unless p_create.
-- Raises QU404, QV400 (null, blank or over-long name; a rate that is NaN,
-- not above 0, above 1000000 or with more than 6 decimal places).
create or replace function set_queue_rate(
    p_queue            text,
    p_jobs_per_second  numeric,
    p_create           boolean default false
) returns setof queues
language plpgsql
security definer
set search_path from current
as $$
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
