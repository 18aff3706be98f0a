-- cancel_jobs: cancel_job for up to p_limit jobs still to run or running that match every filter given (type,
-- queue, p_error a case-insensitive part of last_error, created_at in [p_since, p_until), workflow, batch, and
-- p_statuses: of blocked, pending, failed and processing, null for all four); a waiting job ends cancelled, a
-- running one is asked to stop (each counted). Rows another session holds are skipped, so a claim or a worker's
-- end never waits for it; a running job already asked is not counted again. Returns how many of the matched
-- jobs it cancelled or asked (a dependent the filter did not match, cancelled with its parent, is not counted): fewer than p_limit means no more matched (a caller repeats it until then, each call its own
-- transaction). Raises QV400 (check_bulk_filter; a status not among those four).
create or replace function cancel_jobs(
    p_type         text default null,
    p_queue        text default null,
    p_error        text default null,
    p_since        timestamptz default null,
    p_until        timestamptz default null,
    p_workflow_id  uuid default null,
    p_batch_id     uuid default null,
    p_statuses     text[] default null,
    p_limit        integer default 1000
) returns integer
language plpgsql
security definer
set search_path from current
as $$
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
