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
as $$
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
