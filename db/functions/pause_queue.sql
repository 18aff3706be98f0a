-- pause_queue: claims skip the queue from now on (running jobs finish; enqueues still land in it).
-- Idempotent: pausing a paused queue changes nothing but updated_at. Returns the queue's row.
-- A queue that is not known yet is refused (QU404) unless p_create.
-- Raises QU404, QV400 (null, blank or over-long name).
create or replace function pause_queue(
    p_queue   text,
    p_create  boolean default false
) returns setof queues
language plpgsql
security definer
set search_path from current
as $$
begin
    if p_queue is null or p_queue !~ '\S' or length(p_queue) > 100 then
        raise exception using errcode = 'QV400',
            message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    perform raise_unknown_queue(p_queue, p_create);
    return query
    insert into queues as q (name, paused, updated_at) values (p_queue, true, now())
    on conflict on constraint queues_pkey do update set paused = true, updated_at = excluded.updated_at
    returning q.*;
end;
$$;
