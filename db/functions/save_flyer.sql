-- save_flyer: stores a job's flyer unless one is stored (the primary key keeps one, however many runs).
-- No status change. Returns true when this call stored it.
-- Raises QV400 (a null argument, bytes that are not a PDF), QN404 (no such job).
create or replace function save_flyer(
    p_job_id  uuid,
    p_pdf     bytea
) returns boolean
language plpgsql
security definer
set search_path = public, pg_temp
as $$
declare
    v_saved integer;
begin
    if p_job_id is null or p_pdf is null then
        raise exception using errcode = 'QV400', message = 'job id and pdf must not be null';
    end if;
    if substring(p_pdf from 1 for 5) <> '%PDF-'::bytea then
        raise exception using errcode = 'QV400', message = 'pdf must start with %PDF-';
    end if;
    if not exists (select 1 from jobs j where j.id = p_job_id) then
        raise exception using errcode = 'QN404', message = format('job %s does not exist', p_job_id);
    end if;
    insert into flyers (job_id, pdf) values (p_job_id, p_pdf)
    on conflict on constraint flyers_pkey do nothing;
    get diagnostics v_saved = row_count;
    return v_saved = 1;
end;
$$;
