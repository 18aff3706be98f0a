-- schedule_times: every schedule's timing, by name: what a worker's scheduler reads each round to find the
-- due slots (no payload, queue or priority: those stay with enqueue_schedule_slots). Changes nothing, raises
-- nothing.
create or replace function schedule_times()
returns table (name text, task_type text, cron text, catch_up text, paused boolean, last_slot timestamptz,
               slots_after timestamptz)
language sql
stable
security definer
set search_path from current
as $$
    select s.name, s.task_type, s.cron, s.catch_up, s.paused, s.last_slot, s.slots_after
      from schedules s order by s.name;
$$;
