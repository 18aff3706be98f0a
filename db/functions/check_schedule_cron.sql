-- check_schedule_cron: what is wrong with a cron expression, or null when it is one the scheduler reads
-- the same way (croniter): five fields (minute hour day-of-month month day-of-week) of *, numbers, a-b
-- ranges, /steps and lists, month and day names (jan, mon), or @hourly @daily @midnight @weekly @monthly
-- @yearly @annually. Changes nothing, raises nothing; set_schedule and register_schedules raise QC400.
create or replace function check_schedule_cron(
    p_cron  text
) returns text
language plpgsql
immutable
set search_path from current
as $$
declare
    v_names constant text[] := array['minute', 'hour', 'day of month', 'month', 'day of week'];
    v_low constant integer[] := array[0, 0, 1, 1, 0];
    v_high constant integer[] := array[59, 23, 31, 12, 7];
    v_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct',
                                      'nov', 'dec'];
    v_days constant text[] := array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    v_month_days constant integer[] := array[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    v_cron text;
    v_fields text[];
    v_item text;
    v_m text[];
    v_from integer;
    v_to integer;
    v_step integer;
    v_values integer[];
    v_dom integer[];
    v_month integer[];
    v_dow integer[];
    v_where text;
begin
    if p_cron is null then
        return 'the cron expression is null';
    end if;
    v_cron := lower(regexp_replace(p_cron, '^\s+|\s+$', '', 'g'));
    if v_cron = '' then
        return 'the cron expression is empty';
    end if;
    if length(v_cron) > 200 then
        return 'the cron expression is longer than 200 characters';
    end if;
    if v_cron like '@%' then
        if v_cron in ('@hourly', '@daily', '@midnight', '@weekly', '@monthly', '@yearly', '@annually') then
            return null;
        end if;
        return format('%s is not a macro: use @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually',
                      left(v_cron, 40));
    end if;
    v_fields := regexp_split_to_array(v_cron, '\s+');
    if cardinality(v_fields) <> 5 then
        return format('a cron expression has 5 fields (minute hour day-of-month month day-of-week), this one has %s',
                      cardinality(v_fields));
    end if;
    for i in 1 .. 5 loop
        v_values := '{}';
        v_where := format('field %s (%s) %L', i, v_names[i], left(v_fields[i], 40));
        foreach v_item in array string_to_array(v_fields[i], ',') loop
            v_m := regexp_match(v_item, '^(?:(\*)|([0-9]{1,2}|[a-z]{3})(?:-([0-9]{1,2}|[a-z]{3}))?)(?:/([0-9]{1,2}))?$');
            if v_m is null then
                return format('%s: %L is not *, a number, a range a-b, or one of them with a /step', v_where,
                              left(v_item, 40));
            end if;
            -- Each bound: a number, or a name in the month and day-of-week fields.
            for j in 2 .. 3 loop
                if v_m[j] ~ '^[a-z]' then
                    if i = 4 and v_m[j] = any(v_months) then
                        v_m[j] := array_position(v_months, v_m[j])::text;
                    elsif i = 5 and v_m[j] = any(v_days) then
                        v_m[j] := (array_position(v_days, v_m[j]) - 1)::text;
                    else
                        return format('%s: %L is not a %s', v_where, v_m[j],
                                      case i when 4 then 'month (jan to dec, or 1 to 12)'
                                             when 5 then 'day (sun to sat, or 0 to 7)'
                                             else 'number' end);
                    end if;
                end if;
            end loop;
            if v_m[1] = '*' then
                v_from := v_low[i];
                v_to := v_high[i];
            else
                v_from := v_m[2]::integer;
                v_to := coalesce(v_m[3]::integer, case when v_m[4] is null then v_from else v_high[i] end);
                if v_from not between v_low[i] and v_high[i] or v_to not between v_low[i] and v_high[i] then
                    return format('%s: %s is out of range %s to %s', v_where,
                                  case when v_from not between v_low[i] and v_high[i] then v_from else v_to end,
                                  v_low[i], v_high[i]);
                end if;
                if v_m[3] is not null and v_to < v_from then
                    return format('%s: the range %s-%s runs backwards', v_where, v_from, v_to);
                end if;
                -- croniter reads a range of one value (5-5) as the whole field: refused, write the value.
                if v_m[3] is not null and v_to = v_from then
                    return format('%s: the range %s-%s has one value: write %s', v_where, v_from, v_to, v_from);
                end if;
            end if;
            -- a/step runs to the field's end; where the week ends (6 or 7) is read differently: refused.
            if i = 5 and v_m[1] is null and v_m[3] is null and v_m[4] is not null then
                return format('%s: %L: give the day-of-week step a range (a-b/step or */step)', v_where, v_item);
            end if;
            v_step := coalesce(v_m[4]::integer, 1);
            if v_step < 1 or v_step > v_high[i] - v_low[i] + 1 then
                return format('%s: the step %s is not between 1 and %s', v_where, v_step, v_high[i] - v_low[i] + 1);
            end if;
            v_values := v_values || array(select generate_series(v_from, v_to, v_step));
        end loop;
        if i = 3 then
            v_dom := v_values;
        elsif i = 4 then
            v_month := v_values;
        elsif i = 5 then
            v_dow := array(select distinct d % 7 from unnest(v_values) d);
        end if;
    end loop;
    -- With every day of the week allowed, the day-of-month field alone decides: it must fit a month given.
    if cardinality(v_dow) = 7 and not exists (
        select 1 from unnest(v_dom) d, unnest(v_month) m where d <= v_month_days[m]) then
        return format('day %s of month %s never comes', array_to_string(v_dom, ','), array_to_string(v_month, ','));
    end if;
    return null;
end;
$$;
