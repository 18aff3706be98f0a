-- retry_dead_jobs: retry_dead for up to p_limit dead jobs that match every filter given (type, queue, p_error a
-- case-insensitive part of last_error, finished_at in [p_since, p_until), workflow, batch); rows another
-- session holds are skipped, so a claim or a worker's end never waits for it. Returns how many it retried:
-- fewer than p_limit means no more matched (a caller repeats it until then, each call its own transaction).
-- Raises QV400 (check_bulk_filter).
create or replace function retry_dead_jobs(
    p_type            text default null,
    p_queue           text default null,
    p_error           text default null,
    p_since           timestamptz default null,
    p_until           timestamptz default null,
    p_workflow_id     uuid default null,
    p_batch_id        uuid default null,
    p_limit           integer default 1000,
    p_extra_attempts  integer default null
) returns integer
language plpgsql
security definer
set search_path from current
as $$
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
