-- prune_expired_jobs: prune_jobs by the database's retention, per task type: a type's succeeded jobs older than its
-- retain_succeeded, and its dead, cancelled and expired ones older than its retain_failed (task_type_settings: a DBA's,
-- else the code's, else queue_settings' prune_succeeded_after and prune_finished_after, which a type nobody registered
-- takes). Deletes up to p_batch of them in all, the succeeded first. What a worker calls; it cannot delete a job its
-- retention keeps. Returns how many it deleted: call again, committing in between, until 0. Raises QV400 (bad batch).
create or replace function prune_expired_jobs(
    p_batch  integer default 1000
) returns integer
language plpgsql
security definer
set search_path from current
-- Each type's oldest finished jobs of one status through jobs_type_finished_idx, whatever the statistics say (a
-- plan made while the table was small must not read it whole), and no JIT for the cost of the disabled path.
set enable_seqscan = off
set jit = off
as $$
declare
    v_settings queue_settings;
    v_types text[];
    v_type text;
    v_status text;
    v_age interval;
    v_n integer;
    v_deleted integer := 0;
begin
    if p_batch is null or p_batch < 1 or p_batch > 100000 then
        raise exception using errcode = 'QV400',
            message = format('batch must be between 1 and 100000, got %s', coalesce(p_batch::text, 'null')),
            column = 'batch';
    end if;
    select * into v_settings from queue_settings;
    -- Every type with a finished job: a skip scan of jobs_type_finished_idx, one probe per type. Each type is
    -- then read by its own age, so a type kept longer costs nothing to the others.
    with recursive found(name) as (
        (select j.type::text from jobs j where j.finished_at is not null order by j.type limit 1)
        union all
        select (select j.type::text from jobs j where j.finished_at is not null and j.type > f.name
                 order by j.type limit 1)
          from found f where f.name is not null
    )
    select array_agg(f.name order by f.name) into v_types from found f where f.name is not null;
    if v_types is null then
        return 0;
    end if;

    foreach v_status in array array['succeeded', 'dead', 'cancelled', 'expired'] loop
        foreach v_type in array v_types loop
            select case when v_status = 'succeeded' then coalesce(t.retain_succeeded, v_settings.prune_succeeded_after)
                        else coalesce(t.retain_failed, v_settings.prune_finished_after) end
              into v_age
              from (select 1) one left join task_type_settings t on t.name = v_type;
            -- As prune_jobs: only finished rows, rows another session holds skipped, and who waited for them.
            with doomed as (
                select j.id from jobs j
                 where j.type = v_type and j.status = v_status
                   and j.finished_at is not null and j.finished_at < now() - v_age
                   -- A job whose dependents still wait (a dead parent keeps them blocked) is kept for a person.
                   and not exists (select 1 from job_dependencies d join jobs c on c.id = d.job_id
                                    where d.parent_id = j.id and c.finished_at is null)
                 order by j.finished_at
                 limit p_batch - v_deleted
                   for update skip locked
            ), gone as (
                delete from jobs j using doomed d where j.id = d.id returning j.id
            ), unwatched as (
                delete from job_waiters w using gone g where w.job_id = g.id
            )
            select count(*) into v_n from gone;
            v_deleted := v_deleted + v_n;
            if v_deleted >= p_batch then
                return v_deleted;
            end if;
        end loop;
    end loop;
    return v_deleted;
end;
$$;
