-- check_bulk_filter: the arguments retry_dead_jobs and cancel_jobs share, checked: raises QV400 naming the bad one
-- (a blank type, queue or error text, or one over its length; since not before until; a limit outside 1 to
-- 10000). Internal: security invoker; no role may execute it.
create or replace function check_bulk_filter(
    p_type   text,
    p_queue  text,
    p_error  text,
    p_since  timestamptz,
    p_until  timestamptz,
    p_limit  integer
) returns void
language plpgsql
immutable
set search_path from current
as $$
begin
    if p_type is not null and (p_type !~ '\S' or length(p_type) > 100) then
        raise exception using errcode = 'QV400', message = 'type must be a non-empty text of at most 100 characters',
            column = 'type';
    end if;
    if p_queue is not null and (p_queue !~ '\S' or length(p_queue) > 100) then
        raise exception using errcode = 'QV400', message = 'queue must be a non-empty text of at most 100 characters',
            column = 'queue';
    end if;
    if p_error is not null and (p_error = '' or length(p_error) > 1000) then
        raise exception using errcode = 'QV400', message = 'error text must be 1 to 1000 characters',
            column = 'error';
    end if;
    if p_since >= p_until then
        raise exception using errcode = 'QV400',
            message = format('since (%s) must be before until (%s)', p_since, p_until), column = 'since';
    end if;
    if p_limit is null or p_limit not between 1 and 10000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 10000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
end;
$$;
