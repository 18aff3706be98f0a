-- prune_jobs: deletes up to p_batch finished jobs (final statuses only) whose finished_at is older than now() - p_older_than,
-- with their attempts and results (cascade) and who waited for them (job_waiters); rows another session
-- holds are skipped, never waited for. Status by status as given, type by type, the oldest first within each.
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
