-- list_schedules: every schedule, by name (what a worker's scheduler reads each round; psql may read the
-- schedules table itself). Changes nothing, raises nothing.
create or replace function list_schedules() returns setof schedules
language sql
stable
security definer
set search_path from current
as $$
    select * from schedules order by name;
$$;
