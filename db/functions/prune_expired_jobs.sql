-- prune_expired_jobs: prune_jobs by the database's retention (queue_settings.prune_succeeded_after for
-- succeeded jobs, prune_finished_after for dead and cancelled ones): deletes up to p_batch of them in all,
-- the succeeded first. What a worker calls; it cannot delete a job its retention keeps.
-- Returns how many it deleted: call again, committing in between, until 0. Raises QV400 (bad batch).
create or replace function prune_expired_jobs(
    p_batch  integer default 1000
) returns integer
language plpgsql
security definer
set search_path from current
as $$
declare
    v_settings queue_settings;
    v_deleted integer;
begin
    if p_batch is null or p_batch < 1 or p_batch > 100000 then
        raise exception using errcode = 'QV400',
            message = format('batch must be between 1 and 100000, got %s', coalesce(p_batch::text, 'null'));
    end if;
    select * into v_settings from queue_settings;
    v_deleted := prune_jobs(v_settings.prune_succeeded_after, array['succeeded'], p_batch);
    if v_deleted < p_batch then
        v_deleted := v_deleted + prune_jobs(v_settings.prune_finished_after, array['dead', 'cancelled'],
                                            p_batch - v_deleted);
    end if;
    return v_deleted;
end;
$$;
