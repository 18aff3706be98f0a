-- finished_types: every task type with a finished job, in order (a skip scan of jobs_type_finished_idx: each
-- step is the next type in the index, one probe per type, whatever the history holds); null when none.
-- What the prunes walk (a range of the index per type and status) and the throughput chart reads. No state
-- change. Raises nothing of its own.
create or replace function finished_types()
returns text[]
language sql stable
set search_path from current
as $$
    with recursive found(name) as (
        (select j.type::text from jobs j where j.finished_at is not null order by j.type limit 1)
        union all
        select (select j.type::text from jobs j where j.finished_at is not null and j.type > f.name
                 order by j.type limit 1)
          from found f where f.name is not null
    )
    select array_agg(f.name order by f.name) from found f where f.name is not null;
$$;
