-- backoff_delay: the wait before the next try after attempt p_attempt failed, least(base * 2^(attempt - 1)
-- + jitter * max_jitter, max_delay), jitter random() in [0, 1) unless given, null arguments from queue_settings.
-- No state change. Returns an interval. Raises QV400 (an argument out of range).
create or replace function backoff_delay(
    p_attempt        integer,
    p_base_ms        integer default null,
    p_max_jitter_ms  integer default null,
    p_max_delay_ms   integer default null,
    p_jitter         double precision default random()
) returns interval
language plpgsql volatile
set search_path from current
as $$
declare
    v_settings queue_settings;
    v_ms double precision;
begin
    if p_attempt is null or p_attempt < 1 then
        raise exception using errcode = 'QV400',
            message = format('attempt must be 1 or more, got %s', coalesce(p_attempt::text, 'null')),
            column = 'attempt';
    end if;
    if p_base_ms < 0 or p_max_jitter_ms < 0 or p_max_delay_ms < 0 then
        raise exception using errcode = 'QV400',
            message = 'backoff base, jitter and maximum delay must not be negative',
            column = case when p_base_ms < 0 then 'base_ms' when p_max_jitter_ms < 0 then 'max_jitter_ms'
                          else 'max_delay_ms' end;
    end if;
    if p_jitter is null or p_jitter < 0 or p_jitter > 1 then
        raise exception using errcode = 'QV400',
            message = format('jitter must be between 0 and 1, got %s', coalesce(p_jitter::text, 'null')),
            column = 'jitter';
    end if;
    select * into v_settings from queue_settings;
    v_ms := least(
        coalesce(p_base_ms, v_settings.backoff_base_ms) * power(2::double precision, least(p_attempt - 1, 60))
            + p_jitter * coalesce(p_max_jitter_ms, v_settings.backoff_max_jitter_ms),
        coalesce(p_max_delay_ms, v_settings.backoff_max_delay_ms));
    return make_interval(secs => round(v_ms)::double precision / 1000.0);
end;
$$;
