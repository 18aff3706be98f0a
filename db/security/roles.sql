-- roles: the queue's three login roles, made when missing. Roles belong to the whole server (every
-- database on it shares them); what each may do is granted per database by grants.sql.
--   pgqw_api     the API: enqueues, retries dead jobs, reads jobs, attempts and results
--   pgqw_worker  workers: claim, heartbeat, mark (with results), hand back, sweep
--   pgqw_admin   operators and their tools: every function, every table read, queue_settings changed
-- Made with LOGIN and no password: a DBA sets one (alter role pgqw_api password '...'), or grants the
-- role to their own login role (grant pgqw_api to alice). Never a superuser, never CREATEROLE/CREATEDB.
-- `pgqw migrate` runs this file unless told not to (pgqw migrate --no-roles, PGQW_CREATE_ROLES=0), where
-- a managed database forbids CREATE ROLE; a DBA then makes the roles by hand, or some not at all.
-- Safe twice and safe at once: a role another session made meanwhile is not an error.
-- Needs CREATEROLE only for a role that is missing: raises 42501 (insufficient_privilege) otherwise.
do $$
declare
    v_role text;
begin
    foreach v_role in array array['pgqw_api', 'pgqw_worker', 'pgqw_admin'] loop
        continue when to_regrole(v_role) is not null;
        begin
            execute format('create role %I login', v_role);
            raise notice 'created role %', v_role;
        exception when duplicate_object or unique_violation then
            -- Another migrate (of this database or another one on the server) made it first.
            null;
        end;
    end loop;
end
$$;
