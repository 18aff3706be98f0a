-- batch_status: a batch's progress: its jobs counted by status, its callback's job (once enqueued) and the
-- error that kept it from being enqueued (if any), when it was made and when every job first reached a final
-- state (finished_at; a dead job retried later is counted as it is now). Raises QV400 (null id), QN404 (no
-- such batch).
create or replace function batch_status(
    p_batch_id  uuid
) returns table (batch_id uuid, total integer, blocked integer, pending integer, processing integer, failed integer,
                 succeeded integer, dead integer, cancelled integer, expired integer, callback_job_id uuid,
                 callback_error text, created_at timestamptz, finished_at timestamptz)
language plpgsql
stable
security definer
set search_path from current
as $$
begin
    if p_batch_id is null then
        raise exception using errcode = 'QV400', message = 'batch id must not be null', column = 'batch_id';
    end if;
    if not exists (select 1 from batches b where b.id = p_batch_id) then
        raise exception using errcode = 'QN404', message = format('batch %s does not exist', p_batch_id);
    end if;
    return query
    select b.id, b.total,
           (count(*) filter (where j.status = 'blocked'))::integer,
           (count(*) filter (where j.status = 'pending'))::integer,
           (count(*) filter (where j.status = 'processing'))::integer,
           (count(*) filter (where j.status = 'failed'))::integer,
           (count(*) filter (where j.status = 'succeeded'))::integer,
           (count(*) filter (where j.status = 'dead'))::integer,
           (count(*) filter (where j.status = 'cancelled'))::integer,
           (count(*) filter (where j.status = 'expired'))::integer,
           b.callback_job_id, b.callback_error, b.created_at, b.finished_at
      from batches b left join jobs j on j.batch_id = b.id
     where b.id = p_batch_id
     group by b.id;
end;
$$;
