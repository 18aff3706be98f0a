-- prune_jobs: deletes up to p_batch finished jobs (final statuses only) whose finished_at is older than now() - p_older_than,
-- with their attempts and results (cascade) and who waited for them (job_waiters); rows another session
-- holds are skipped, never waited for.
-- Returns how many it deleted: call again, committing in between, until 0. Raises QV400 (bad argument).
create or replace function prune_jobs(
    p_older_than  interval,
    p_statuses    text[] default array['succeeded', 'dead', 'cancelled', 'expired'],
    p_batch       integer default 1000
) returns integer
language plpgsql
security definer
set search_path from current
as $$
declare
    v_bad text;
    v_deleted integer;
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

    -- Only finished rows are picked, and a claim only locks ready ones, so a claim never waits for a
    -- prune; skip locked also passes over rows a retry or another prune holds. Rows re-checked after the
    -- lock (read committed re-evaluates the where clause on a row changed meanwhile).
    with doomed as (
        select j.id from jobs j
         where j.status = any (p_statuses)
           and j.finished_at < now() - p_older_than
           -- A job whose dependents still wait (a dead parent keeps them blocked) is kept for a person.
           and not exists (select 1 from job_dependencies d join jobs c on c.id = d.job_id
                            where d.parent_id = j.id and c.finished_at is null)
         order by j.finished_at
         limit p_batch
           for update skip locked
    ), gone as (
        delete from jobs j using doomed d where j.id = d.id returning j.id
    ), unwatched as (
        -- Sessions that waited for these jobs (job_waiters has no foreign key to cascade).
        delete from job_waiters w using gone g where w.job_id = g.id
    )
    select count(*) into v_deleted from gone;
    return v_deleted;
end;
$$;
