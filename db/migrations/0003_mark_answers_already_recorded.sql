-- 0003_mark_answers_already_recorded: mark_succeeded, mark_failed, mark_jobs_succeeded and release_job
-- return the job plus already_recorded, so a repeated call for the same job, worker and attempt (a
-- retry after a lost reply) is answered instead of refused. A return type cannot change with create
-- or replace: the old functions are dropped here, and db/functions makes the new ones in the same migrate.
drop function if exists mark_succeeded(uuid, text, integer);
drop function if exists mark_failed(uuid, text, integer, text, boolean, integer, integer, integer);
drop function if exists mark_jobs_succeeded(text, uuid[], integer[]);
drop function if exists release_job(uuid, text, integer, text);
