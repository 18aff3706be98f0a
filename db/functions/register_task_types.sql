-- register_task_types: what a worker's code defines, upserted into task_types: each type's payload
-- schema, description and code_* defaults are (re)written; a DBA's columns are never touched, so an
-- update made from psql outlives every release. Returns the rows of the registered types.
-- p_types: a JSON array of {"name", "payload_schema", and optionally "description", "queue",
-- "priority", "max_attempts", "backoff_base_ms", "backoff_max_delay_ms", "backoff_max_jitter_ms",
-- "lease_ms", "timeout_ms", "expire_after_ms", "max_snoozes", "retain_succeeded_ms", "retain_failed_ms"} (the last two
-- stored as intervals, code_retain_succeeded and code_retain_failed). A payload_schema is at most 131072 bytes (as text) nested at most 32 levels, of Draft 2020-12 if it
-- names a $schema, with every $ref and $dynamicRef into itself (starting with #): the API fetches nothing
-- (pgqw.payload_schema checks the rest). Raises QV400 (not an array, a bad element, value or schema, a name twice).
create or replace function register_task_types(
    p_types  jsonb
) returns setof task_types
language plpgsql
security definer
set search_path from current
as $$
declare
    v_bad record;
begin
    if p_types is null or jsonb_typeof(p_types) <> 'array' then
        raise exception using errcode = 'QV400', message = 'task types must be a JSON array of objects',
            column = 'types';
    end if;
    select e.ord, e.value into v_bad
      from jsonb_array_elements(p_types) with ordinality as e(value, ord)
     where jsonb_typeof(e.value) <> 'object'
        or jsonb_typeof(e.value -> 'name') is distinct from 'string'
        or (e.value ->> 'name') !~ '\S' or length(e.value ->> 'name') > 100
        or jsonb_typeof(e.value -> 'payload_schema') is distinct from 'object'
        or coalesce(jsonb_typeof(e.value -> 'description'), 'null') not in ('null', 'string')
        or coalesce(jsonb_typeof(e.value -> 'queue'), 'null') not in ('null', 'string')
        or exists (select 1 from jsonb_each(e.value) f
                    where f.key in ('priority', 'max_attempts', 'backoff_base_ms', 'backoff_max_delay_ms',
                                    'backoff_max_jitter_ms', 'lease_ms', 'timeout_ms', 'expire_after_ms',
                                    'max_snoozes', 'retain_succeeded_ms', 'retain_failed_ms')
                      and jsonb_typeof(f.value) not in ('null', 'number'))
     order by e.ord
     limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('task type %s is not an object with a name (text, at most 100 characters), a '
                             'payload_schema (object) and whole-number settings', v_bad.ord),
            detail = left(v_bad.value::text, 200),
            column = 'types';
    end if;
    -- The rules of pgqw.payload_schema that need no JSON Schema library (its 1 to 3), for the callers that
    -- skip the Python check (a worker login can call this function with anything).
    select b.name, b.problem into v_bad from (
        select e.ord, e.value ->> 'name' as name, case
                 when octet_length(s.schema::text) > 131072
                     then format('is %s bytes, more than the limit of 131072', octet_length(s.schema::text))
                 when jsonb_path_exists(s.schema, 'strict $.**{33 to last}')
                     then 'nests more than 32 levels'
                 when s.schema ? '$schema' and s.schema -> '$schema' not in
                          ('"https://json-schema.org/draft/2020-12/schema"', '"https://json-schema.org/draft/2020-12/schema#"')
                     then format('names the $schema %s: payload schemas are read as Draft 2020-12 '
                                 '(https://json-schema.org/draft/2020-12/schema)', left(s.schema ->> '$schema', 100))
                 when s.outside is not null
                     then format('has a $ref or $dynamicRef that points outside it, %s: the API fetches nothing, so '
                                 'every reference starts with # (#/$defs/Name)', left(s.outside::text, 100))
               end as problem
          from jsonb_array_elements(p_types) with ordinality as e(value, ord)
          cross join lateral (
              select e.value -> 'payload_schema' as schema,
                     coalesce(jsonb_path_query_first(e.value -> 'payload_schema',
                                  'lax $.**."$ref" ? (@.type() == "string" && !(@ starts with "#"))'),
                              jsonb_path_query_first(e.value -> 'payload_schema',
                                  'lax $.**."$dynamicRef" ? (@.type() == "string" && !(@ starts with "#"))')) as outside
          ) s
        ) b
     where b.problem is not null
     order by b.ord
     limit 1;
    if found then
        raise exception using errcode = 'QV400',
            message = format('task type %L: its payload_schema %s', v_bad.name, v_bad.problem),
            column = 'types';
    end if;
    select e.value ->> 'name' as name into v_bad
      from jsonb_array_elements(p_types) e group by 1 having count(*) > 1 limit 1;
    if found then
        raise exception using errcode = 'QV400', message = format('task type %L is listed twice', v_bad.name),
            column = 'types';
    end if;

    return query
    insert into task_types as t (name, payload_schema, description, code_queue, code_priority, code_max_attempts,
                                 code_backoff_base_ms, code_backoff_max_delay_ms, code_backoff_max_jitter_ms,
                                 code_lease_ms, code_timeout_ms, code_expire_after_ms, code_max_snoozes,
                                 code_retain_succeeded, code_retain_failed, registered_at)
    select e.value ->> 'name', e.value -> 'payload_schema', e.value ->> 'description', e.value ->> 'queue',
           (e.value ->> 'priority')::integer, (e.value ->> 'max_attempts')::integer,
           (e.value ->> 'backoff_base_ms')::integer, (e.value ->> 'backoff_max_delay_ms')::integer,
           (e.value ->> 'backoff_max_jitter_ms')::integer, (e.value ->> 'lease_ms')::integer,
           (e.value ->> 'timeout_ms')::integer, (e.value ->> 'expire_after_ms')::integer,
           (e.value ->> 'max_snoozes')::integer,
           make_interval(secs => (e.value ->> 'retain_succeeded_ms')::bigint / 1000.0),
           make_interval(secs => (e.value ->> 'retain_failed_ms')::bigint / 1000.0), now()
      from jsonb_array_elements(p_types) e
     -- In name order, so two registrations of the same types (workers of two releases starting
     -- together, their types listed in another order) wait for each other instead of deadlocking.
     order by e.value ->> 'name'
    on conflict on constraint task_types_pkey do update
       set payload_schema = excluded.payload_schema, description = excluded.description,
           code_queue = excluded.code_queue, code_priority = excluded.code_priority,
           code_max_attempts = excluded.code_max_attempts, code_backoff_base_ms = excluded.code_backoff_base_ms,
           code_backoff_max_delay_ms = excluded.code_backoff_max_delay_ms,
           code_backoff_max_jitter_ms = excluded.code_backoff_max_jitter_ms,
           code_lease_ms = excluded.code_lease_ms, code_timeout_ms = excluded.code_timeout_ms,
           code_expire_after_ms = excluded.code_expire_after_ms, code_max_snoozes = excluded.code_max_snoozes,
           code_retain_succeeded = excluded.code_retain_succeeded, code_retain_failed = excluded.code_retain_failed,
           registered_at = excluded.registered_at
    returning t.*;
exception
    when numeric_value_out_of_range or invalid_text_representation or check_violation or datetime_field_overflow
         or interval_field_overflow then
        raise exception using errcode = 'QV400',
            message = format('a task type setting is out of range: %s', sqlerrm),
            column = 'types';
end;
$$;
