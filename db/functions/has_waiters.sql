-- has_waiters: no state change. Whether a job of p_queue made ready (or due later) in this transaction must be
-- notified: a worker waits for that queue or for every one (queue_waiters, still valid), or this transaction
-- is not read committed (a snapshot older than this statement may not see a worker that began to wait; so it
-- notifies, as it always did). Read in a statement of its own, after the job's row was written: a worker that
-- began to wait after this read claims once more when this transaction has ended (waits_settled).
-- Raises nothing of its own. Internal: security invoker; no role may execute it.
create or replace function has_waiters(
    p_queue  text
) returns boolean
language plpgsql
stable
set search_path from current
as $$
begin
    -- plpgsql, not sql: a sql function that cannot be inlined is planned again at every call.
    return current_setting('transaction_isolation') <> 'read committed'
        or exists (select 1 from queue_waiters w
                    where w.queue in (p_queue, '*') and w.until > statement_timestamp());
end;
$$;
