-- waits_settled: no state change. True once every transaction with an id below p_xid has ended. p_xid is the
-- id of a transaction the worker ran just after its wait_for_jobs committed (pg_current_xact_id(), committed
-- at once): a producer that enqueued without seeing that worker's rows (so without notifying) had its id
-- before that commit, so below p_xid, and once it has ended its jobs are committed or gone, and the worker's
-- next claim sees them. (A snapshot taken after the commit would not do: it lists only the transactions
-- below the latest one completed, and a producer may have a later id.) Transactions that begin later see
-- the rows. Raises QV400 (a null id).
create or replace function waits_settled(
    p_xid  xid8
) returns boolean
language plpgsql
stable
set search_path from current
as $$
begin
    if p_xid is null then
        raise exception using errcode = 'QV400', message = 'the transaction id is null', column = 'xid';
    end if;
    return pg_snapshot_xmin(pg_current_snapshot()) > p_xid;
end;
$$;
