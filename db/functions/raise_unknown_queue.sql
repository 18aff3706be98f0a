-- raise_unknown_queue: no state change; returns when the queue is known or p_create is true, else raises
-- QU404. A queue is known when it has a row in queues (a setting), a job, a worker that takes from it by name,
-- a task type or a schedule whose queue it is, or is `default` (where a job without a queue goes). Called by
-- pause_queue, resume_queue, set_queue_limit and set_queue_rate, so a typo never makes a queue. Security
-- invoker, for the owner's functions only: no role may execute it.
create or replace function raise_unknown_queue(
    p_queue   text,
    p_create  boolean
) returns void
language plpgsql
set search_path from current
as $$
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
