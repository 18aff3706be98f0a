-- save_flyer: stores a job's rendered flyer unless one is already stored. No status change.
-- flyers.job_id is the primary key, so however often or however concurrently a job's work runs,
-- one flyer exists; on conflict do nothing makes the later writers a no-op. Returns true when this
-- call stored it. Raises QV400 for a null argument or bytes that are not a PDF, QN404 for an unknown job.
-- Security definer: runs as the queue's owner, so a caller needs EXECUTE on it and no privilege on
-- the tables; search_path is pinned (public, pg_temp) so the caller's objects cannot stand in for
-- the queue's. EXECUTE: pgqw_worker and pgqw_admin (db/security/grants.sql).
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
