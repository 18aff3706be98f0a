-- enqueue_batch: enqueues the jobs of p_jobs (as enqueue_jobs: the same elements and rules) as one batch, and
-- p_callback ({type, payload, queue, priority, max_attempts}: all but type optional), the job to enqueue once
-- every job of the batch has reached a final state: exactly once (settle_jobs, under the batch's row lock),
-- its payload the given one with "batch": {id, total, succeeded, dead, cancelled, expired}, its idempotency
-- key 'batch:<batch id>'. Without p_callback the batch only counts (batch_status). p_idempotency_key: the same
-- key again returns the batch made with it (created false), whatever p_jobs holds (in the order of its
-- keys, where they name the batch's jobs). Returns one row per
-- element, in order: the batch's id, the job and whether it was made now. Raises QV400 (an empty array, over
-- 10000 jobs, a bad callback or key), QI409 (an element's key already names a job outside this batch), QT422
-- (the callback's type is not registered), and what enqueue_jobs raises.
create or replace function enqueue_batch(
    p_jobs             jsonb,
    p_callback         jsonb default null,
    p_idempotency_key  text default null
) returns setof enqueued_batch_job
language plpgsql
security definer
set search_path from current
as $$
declare
    v_batch batches;
    v_job enqueued_job;
begin
    if p_jobs is null or jsonb_typeof(p_jobs) <> 'array' or jsonb_array_length(p_jobs) not between 1 and 10000 then
        raise exception using errcode = 'QV400', message = 'a batch is a JSON array of 1 to 10000 job objects',
            column = 'jobs';
    end if;
    if p_idempotency_key is not null and (length(p_idempotency_key) not between 1 and 255
                                          or p_idempotency_key ~ '[^!-~]') then
        raise exception using errcode = 'QV400',
            message = 'idempotency key must be 1 to 255 visible ASCII characters (! to ~, no spaces)',
            column = 'idempotency_key';
    end if;
    if p_callback is not null then
        if jsonb_typeof(p_callback) <> 'object' or jsonb_typeof(p_callback -> 'type') is distinct from 'string'
           or coalesce(jsonb_typeof(p_callback -> 'payload'), 'object') not in ('object', 'null')
           or coalesce(jsonb_typeof(p_callback -> 'queue'), 'string') not in ('string', 'null')
           or coalesce(jsonb_typeof(p_callback -> 'priority'), 'number') not in ('number', 'null')
           or coalesce(jsonb_typeof(p_callback -> 'max_attempts'), 'number') not in ('number', 'null')
           or exists (select 1 from jsonb_object_keys(p_callback) as k
                       where k not in ('type', 'payload', 'queue', 'priority', 'max_attempts')) then
            raise exception using errcode = 'QV400',
                message = 'callback must be a JSON object {type, payload, queue, priority, max_attempts} with a '
                          'type, a payload object if any, a queue text and numbers',
                column = 'callback';
        end if;
        if not exists (select 1 from task_type_settings t where t.name = p_callback ->> 'type')
           and not (select s.accept_unregistered_types from queue_settings s) then
            raise exception using errcode = 'QT422',
                message = format('task type %L of the callback is not registered', p_callback ->> 'type'),
                hint = 'register it with `pgqw tasks register --tasks <module>`';
        end if;
    end if;

    if p_idempotency_key is not null then
        insert into batches as b (idempotency_key, callback, total)
        values (p_idempotency_key, p_callback, jsonb_array_length(p_jobs))
        on conflict (idempotency_key) do nothing
        returning b.* into v_batch;
        if not found then
            select b.* into v_batch from batches b where b.idempotency_key = p_idempotency_key;
            -- In the order of p_jobs's keys where they name the batch's jobs (the same call again: its order).
            return query select v_batch.id, j, false from jobs j where j.batch_id = v_batch.id
                          order by array_position(array(select e ->> 'idempotency_key'
                                                          from jsonb_array_elements(p_jobs) as e),
                                                  j.idempotency_key::text), j.created_at, j.id;
            return;
        end if;
    else
        insert into batches as b (callback, total) values (p_callback, jsonb_array_length(p_jobs))
        returning b.* into v_batch;
    end if;

    for v_job in select * from enqueue_jobs_into(p_jobs, v_batch.id) loop
        if not v_job.created then
            raise exception using errcode = 'QI409',
                message = format('idempotency key %L already names job %s, which is not of this batch',
                                 (v_job.job).idempotency_key, (v_job.job).id),
                hint = 'a batch is made of new jobs: use new keys, or the batch''s own idempotency key to repeat it';
        end if;
        return next (v_batch.id, v_job.job, true)::enqueued_batch_job;
    end loop;
end;
$$;
