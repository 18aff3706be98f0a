-- settings: server-side session settings of the login roles, so a session that stalls cannot hold locks
-- or a connection for long. Re-applied by every `pgqw migrate`, after the grants. Roles are server-wide,
-- so these hold in every database of the server (ALTER ROLE … SET; a session's own SET or its connection
-- options still win: the processes also send their own, pgqw/connect.py).
--   pgqw_worker: a transaction left idle for 5 s is ended by the server (the session with it), so a
--                worker that stops between its work and its commit (a paused VM, a partition) releases
--                its row locks, and sweep_stuck, which skips locked rows, recovers the job.
--   pgqw_api:    a statement running for 5 s is canceled (57014, a 503), and an idle transaction ended.
--   pgqw_admin:  nothing: reports and repairs by hand may take their time.
-- And in this database only (ALTER ROLE … IN DATABASE), for all three: a search_path that starts with the
-- queue's schema (then public), so `select * from claim_job('w1')` works as written from psql for each
-- role; the schema is current_schema(), first in the search_path migrate runs the files with. Other
-- databases of the server, and other roles, keep theirs: migrate never sets a database's own default.
-- A role that does not exist is skipped with a notice; a migrating role that may not alter the roles
-- (no CREATEROLE, or no ADMIN OPTION on them) gets a notice with the statement for a DBA to run.
do $$
declare
    v_role text;
    v_setting record;
begin
    foreach v_role in array array['pgqw_worker', 'pgqw_api'] loop
        if to_regrole(v_role) is null then
            raise notice 'role % does not exist: its settings are skipped', v_role;
            continue;
        end if;
        for v_setting in
            select s.name, s.value from (values
                ('pgqw_worker', 'idle_in_transaction_session_timeout', '5s'),
                ('pgqw_api', 'statement_timeout', '5s'),
                ('pgqw_api', 'idle_in_transaction_session_timeout', '5s')
            ) as s(role, name, value)
            where s.role = v_role
        loop
            -- Only a change is written: migrates of other databases of the server may run at once,
            -- and two ALTER ROLEs of one role collide (pgqw/migrate.py retries, and finds it done).
            continue when exists (
                select 1 from pg_db_role_setting d
                 where d.setrole = to_regrole(v_role) and d.setdatabase = 0
                   and d.setconfig @> array[v_setting.name || '=' || v_setting.value]);
            begin
                execute format('alter role %I set %s = %L', v_role, v_setting.name, v_setting.value);
            exception when insufficient_privilege then
                raise notice 'may not alter role %: have a DBA run: alter role % set % = %',
                    v_role, v_role, v_setting.name, quote_literal(v_setting.value);
            end;
        end loop;
    end loop;
end
$$;

do $$
declare
    v_role text;
    v_path constant text := format('%I, public', current_schema());
begin
    foreach v_role in array array['pgqw_api', 'pgqw_worker', 'pgqw_admin'] loop
        continue when to_regrole(v_role) is null;
        continue when exists (
            select 1 from pg_db_role_setting d
             where d.setrole = to_regrole(v_role)
               and d.setdatabase = (select b.oid from pg_database b where b.datname = current_database())
               and d.setconfig @> array['search_path=' || v_path]);
        begin
            execute format('alter role %I in database %I set search_path = %s', v_role, current_database(), v_path);
        exception when insufficient_privilege then
            raise notice 'may not alter role %: have a DBA run: alter role % in database % set search_path = %',
                v_role, v_role, quote_ident(current_database()), v_path;
        end;
    end loop;
end
$$;
