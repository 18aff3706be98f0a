-- list_task_types: every registered task type (or only p_name's) by name, with its effective settings
-- (task_type_settings: a DBA's value, else the code's, else queue_settings'; timeout_ms and expire_after_ms
-- null: none) and its description. No state change. Raises nothing of its own.
create or replace function list_task_types(p_name text default null)
returns table (name text, payload_schema jsonb, description text, queue text, priority integer,
               max_attempts integer, backoff_base_ms integer, backoff_max_delay_ms integer,
               backoff_max_jitter_ms integer, lease_ms integer, timeout_ms integer, expire_after_ms integer,
               max_snoozes integer, retain_succeeded interval, retain_failed interval)
language sql stable
set search_path from current
as $$
    select s.name::text, s.payload_schema, t.description, s.queue::text, s.priority, s.max_attempts,
           s.backoff_base_ms, s.backoff_max_delay_ms, s.backoff_max_jitter_ms, s.lease_ms, s.timeout_ms,
           s.expire_after_ms, s.max_snoozes, s.retain_succeeded, s.retain_failed
      from task_type_settings s
      join task_types t on t.name = s.name
     where p_name is null or s.name = p_name
     order by s.name;
$$;
