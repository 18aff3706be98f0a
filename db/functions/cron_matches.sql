-- cron_matches: whether p_at is a slot of the cron expression p_cron (one check_schedule_cron accepts), on
-- the UTC clock as the scheduler reads it (croniter): a whole minute whose minute, hour, month and day match;
-- with both day fields restricted, either day field matching is enough (day-of-month or day-of-week), else
-- the restricted one decides. Changes nothing, raises nothing (null for an expression it cannot read).
create or replace function cron_matches(
    p_cron  text,
    p_at    timestamptz
) returns boolean
language plpgsql
immutable
set search_path from current
as $$
declare
    v_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct',
                                      'nov', 'dec'];
    v_days constant text[] := array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    v_low constant integer[] := array[0, 0, 1, 1, 0];
    v_high constant integer[] := array[59, 23, 31, 12, 7];
    v_cron text;
    v_fields text[];
    v_at timestamp;
    v_now integer[];
    v_item text;
    v_m text[];
    v_from integer;
    v_to integer;
    v_hit boolean[] := array[false, false, false, false, false];
begin
    if p_cron is null or p_at is null or check_schedule_cron(p_cron) is not null then
        return null;
    end if;
    v_cron := lower(regexp_replace(p_cron, '^\s+|\s+$', '', 'g'));
    v_cron := case v_cron when '@hourly' then '0 * * * *' when '@daily' then '0 0 * * *'
                          when '@midnight' then '0 0 * * *' when '@weekly' then '0 0 * * 0'
                          when '@monthly' then '0 0 1 * *' when '@yearly' then '0 0 1 1 *'
                          when '@annually' then '0 0 1 1 *' else v_cron end;
    v_fields := regexp_split_to_array(v_cron, '\s+');
    v_at := p_at at time zone 'UTC';
    if date_trunc('minute', v_at) <> v_at then
        return false;
    end if;
    v_now := array[extract(minute from v_at), extract(hour from v_at), extract(day from v_at),
                   extract(month from v_at), extract(dow from v_at)]::integer[];
    for i in 1 .. 5 loop
        foreach v_item in array string_to_array(v_fields[i], ',') loop
            v_m := regexp_match(v_item, '^(?:(\*)|([0-9]{1,2}|[a-z]{3})(?:-([0-9]{1,2}|[a-z]{3}))?)(?:/([0-9]{1,2}))?$');
            for j in 2 .. 3 loop
                if v_m[j] ~ '^[a-z]' then
                    v_m[j] := case i when 4 then array_position(v_months, v_m[j])::text
                                     else (array_position(v_days, v_m[j]) - 1)::text end;
                end if;
            end loop;
            if v_m[1] = '*' then
                v_from := v_low[i];
                v_to := v_high[i];
            else
                v_from := v_m[2]::integer;
                v_to := coalesce(v_m[3]::integer, case when v_m[4] is null then v_from else v_high[i] end);
            end if;
            if exists (select 1 from generate_series(v_from, v_to, coalesce(v_m[4]::integer, 1)) v
                        where v = v_now[i] or (i = 5 and v % 7 = v_now[i])) then
                v_hit[i] := true;
            end if;
        end loop;
    end loop;
    if not (v_hit[1] and v_hit[2] and v_hit[4]) then
        return false;
    end if;
    if v_fields[3] <> '*' and v_fields[5] <> '*' then
        return v_hit[3] or v_hit[5];
    end if;
    return v_hit[3] and v_hit[5];
end;
$$;
