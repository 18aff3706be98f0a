-- claim_jobs_at: claim_jobs as if the time were p_now (the owner's test clock and repairs; no role may
-- execute it). pending/failed → processing for up to p_limit jobs ready at p_now, each with a new lease token.
-- Skips paused queues, takes from a queue with max_running at most what keeps it at or under that many
-- processing jobs, and from a queue with jobs_per_second at most the whole tokens of its bucket (refilled by
-- the rate × the time since its last refill as of p_now, up to greatest(1, rate)), spending one per job.
-- When a bucket holds back ready jobs, notifies pgqw_jobs_at with the ms until its next token and the queue.
-- A job listed in job_isolation (by a sweep: its worker stopped responding while it held others) runs alone:
-- a worker running one claims nothing else; while one is ready, a worker holding other jobs claims nothing (it
-- empties, then takes it) and one holding none takes it and nothing more. A job asked to cancel is not
-- started: it ends cancelled. An attempt with a timeout (the job's own, else its task type's) gets its deadline,
-- p_now + the timeout, in job_attempts.deadline_at and jobs.deadline_at, and a lease that ends no later than it.
-- A job not started by its expires_at (expires_at <= p_now, attempts = 0) is never claimed: the sweep ends it expired.
-- A job with a serial_key is claimed only when no job of its key enqueued before it (serial_seq) is unfinished and
-- none of its key is processing (one enqueued before it but committed after a later one started waits for it); a
-- queue with key_max_running gives at most that many processing jobs per concurrency_key (a key at its limit is
-- skipped). A job asked to cancel that this claim ends is settled (settle_jobs).
-- Returns the claimed rows with their lease tokens. Raises QV400 (bad worker id,
-- limit, lease, queues, types, now; a transaction not in read committed, where a claim's counts would be stale).
create or replace function claim_jobs_at(
    p_now        timestamptz,
    p_worker_id  text,
    p_limit      integer,
    p_queues     text[] default null,
    p_lease_ms   integer default null,
    p_task_types text[] default null
) returns setof claimed_job
language plpgsql
security definer
set search_path from current
set plan_cache_mode = force_generic_plan
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
declare
    v_ids   uuid[];
    v_queue record;
    v_slots bigint;
    v_tokens numeric;
    -- The rated queues this claim may take from, and their buckets refilled as of p_now.
    v_rated text[] := '{}'::text[];
    v_rated_tokens numeric[] := '{}'::numeric[];
    -- Every rated queue whose limit let this claim take from it, with its bucket as of p_now and its rate:
    -- if the bucket holds back ready jobs, the time of its next token is announced (below).
    v_buckets text[] := '{}'::text[];
    v_bucket_tokens numeric[] := '{}'::numeric[];
    v_bucket_rates numeric[] := '{}'::numeric[];
    v_left numeric;
    -- Isolated jobs (job_isolation): the ones this claim may take (null: any job), the ones it must not.
    v_limit integer := p_limit;
    v_only uuid[];
    v_exclude uuid[] := '{}'::uuid[];
    -- Some task type has a timeout: only then does a job without its own look its type's up.
    v_type_timeouts boolean;
    v_cancelled uuid[];
    -- Limits per key: a queue's keys at their key_max_running, and the picks of one queue before they are cut
    -- to what each key has left.
    v_saturated text[];
    v_picked uuid[];
    v_kept uuid[];
    v_trimmed uuid[];
begin
    if p_worker_id is null or p_worker_id !~ '\S' or length(p_worker_id) > 200 then
        raise exception using errcode = 'QV400',
            message = 'worker id must be a non-empty text of at most 200 characters', column = 'worker_id';
    end if;
    if p_limit is null or p_limit < 1 or p_limit > 1000 then
        raise exception using errcode = 'QV400',
            message = format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')),
            column = 'limit';
    end if;
    -- At most a day: a lease is renewed by heartbeats, and a session must not park a job for years.
    if p_lease_ms is not null and (p_lease_ms < 1 or p_lease_ms > 86400000) then
        raise exception using errcode = 'QV400',
            message = format('lease must be between 1 ms and one day (86400000 ms), got %s', p_lease_ms),
            column = 'lease_ms';
    end if;
    if p_queues is not null and cardinality(p_queues) = 0 then
        raise exception using errcode = 'QV400', message = 'queues, when given, must name at least one queue',
            column = 'queues';
    end if;
    if p_task_types is not null and cardinality(p_task_types) = 0 then
        raise exception using errcode = 'QV400', message = 'task types, when given, must name at least one type',
            column = 'task_types';
    end if;
    if p_now is null or not isfinite(p_now) or p_now >= '9999-01-01' then
        raise exception using errcode = 'QV400',
            message = format('now must be a finite time before the year 9999, got %s', coalesce(p_now::text, 'null')),
            column = 'now';
    end if;
    -- Each statement below must see what committed before it (a limited queue's running jobs after its row
    -- lock): under repeatable read or serializable it would see the transaction's first snapshot.
    if current_setting('transaction_isolation') <> 'read committed' then
        raise exception using errcode = 'QV400',
            message = format('a claim must run in a read committed transaction, not %s',
                             current_setting('transaction_isolation'));
    end if;

    if exists (select 1 from job_isolation) then
        if exists (select 1 from job_isolation i join jobs p on p.id = i.job_id where p.locked_by = p_worker_id) then
            return;  -- it runs an isolated job: nothing else until that ends
        end if;
        v_only := array(
            select r.id
              from job_isolation i join jobs r on r.id = i.job_id
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
               and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and not exists (select 1 from queues q where q.name = r.queue and q.paused));
        if cardinality(v_only) = 0 then
            v_only := null;
            v_exclude := array(select i.job_id from job_isolation i);
        elsif exists (select 1 from jobs p where p.lease_expires_at is not null and p.locked_by = p_worker_id) then
            return;  -- it holds other jobs: it takes the isolated one once they end
        else
            v_limit := 1;
        end if;
    end if;

    -- Plan (measured in docs/benchmarks.md): whatever the statistics say, the ready index is read in its
    -- order up to the limit and the picked rows are updated through the primary key, so a claim costs the
    -- same with 10 or 1,000,000 jobs waiting. One generic plan per session (plan_cache_mode) spares a
    -- replan per call; it may be made on an empty table, so scans that only look cheap there are ruled
    -- out: no bitmap scan (with stale statistics, a burst, it sorted the whole backlog on every call), no
    -- sequential scan (a plan made while idle updated the picked rows by reading the whole table). The
    -- cost of those disabled paths would trip JIT compilation, which a claim never needs (jit = off).
    if not exists (select 1 from queues q
                    where q.paused or q.max_running is not null or q.jobs_per_second is not null
                       or q.key_max_running is not null) then
        -- The common case, no queue paused, limited or rated: the ready index in its order, no lock but the
        -- rows'.
        -- The rows picked here stay locked by this transaction: nothing can change them before the update.
        v_ids := array(
            select r.id
              from jobs r
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
               and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and (v_only is null or r.id = any (v_only))
               and not r.id = any (v_exclude)
             order by r.priority desc, r.run_at, r.id
             limit v_limit
               for update skip locked);
    else
        -- A limited or rated queue: its row is locked (in name order, so two claims never wait on each other
        -- in a circle) before its processing jobs are counted, so claims racing for it take turns, and each
        -- one's count (a statement after the lock, a new snapshot under read committed) sees the claims
        -- committed before it. It gives at most max_running - running jobs. The locked row is its latest
        -- version, so its bucket is what the claim before this one left: refilled by the rate × the time
        -- since (none when p_now is earlier), up to greatest(1, rate), it gives at most its whole tokens.
        -- Queues neither limited nor rated take no lock.
        v_ids := '{}';
        for v_queue in
            select q.name, q.max_running, q.jobs_per_second, q.rate_tokens, q.rate_refilled_at, q.key_max_running
              from queues q
             where (q.max_running is not null or q.jobs_per_second is not null or q.key_max_running is not null)
               and not q.paused
               and (p_queues is null or q.name = any (p_queues))
             order by q.name
               for update
        loop
            v_slots := v_limit;
            if v_queue.max_running is not null then
                select v_queue.max_running - count(*) into v_slots
                  from jobs p where p.status = 'processing' and p.queue = v_queue.name;
            end if;
            if v_queue.jobs_per_second is not null then
                -- No bucket yet (a rate set by hand): a full one.
                v_tokens := least(greatest(1, v_queue.jobs_per_second),
                                  coalesce(v_queue.rate_tokens, greatest(1, v_queue.jobs_per_second))
                                  + v_queue.jobs_per_second * greatest(0, extract(epoch from
                                        p_now - coalesce(v_queue.rate_refilled_at, p_now))));
                if v_slots >= 1 then
                    v_buckets := v_buckets || v_queue.name::text;
                    v_bucket_tokens := v_bucket_tokens || v_tokens;
                    v_bucket_rates := v_bucket_rates || v_queue.jobs_per_second;
                end if;
                v_slots := least(v_slots, floor(v_tokens));
            end if;
            continue when v_slots < 1;
            if v_queue.jobs_per_second is not null then
                v_rated := v_rated || v_queue.name::text;
                v_rated_tokens := v_rated_tokens || v_tokens;
            end if;
            -- A limit per key: the keys at it are skipped, so the next key's jobs are taken.
            v_saturated := '{}';
            if v_queue.key_max_running is not null then
                v_saturated := array(select p.concurrency_key from jobs p
                                      where p.status = 'processing' and p.queue = v_queue.name
                                        and p.concurrency_key is not null
                                      group by p.concurrency_key having count(*) >= v_queue.key_max_running);
            end if;
            v_picked := array(
                select r.id
                  from jobs r
                 where r.status in ('pending', 'failed')
                   and r.run_at <= p_now
                   and r.attempts < r.max_attempts
                   and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
                   and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
                   and r.queue = v_queue.name
                   and (p_task_types is null or r.type = any (p_task_types))
                   and (v_only is null or r.id = any (v_only))
                   and not r.id = any (v_exclude)
                   and (r.concurrency_key is null or not r.concurrency_key = any (v_saturated))
                 order by r.priority desc, r.run_at, r.id
                 limit least(v_limit, v_slots)
                   for update skip locked);
            if v_queue.key_max_running is not null then
                -- Picks of one key beyond what it has left are let go (they stay locked until this commits:
                -- other claims skip them, and take them once it has), and the slots they leave are filled from
                -- the other keys: again, with the keys now at their limit (this claim's picks counted) skipped,
                -- until a round lets nothing go (at most 10 rounds).
                v_kept := '{}';
                for v_round in 1 .. 10 loop
                    v_trimmed := array(
                        select c.id
                          from (select r.id, r.concurrency_key,
                                       row_number() over (partition by r.concurrency_key
                                                          order by r.priority desc, r.run_at, r.id) as n
                                  from jobs r where r.id = any (v_picked)) c
                         where c.concurrency_key is null
                            or c.n <= v_queue.key_max_running
                                      - (select count(*) from jobs p
                                          where p.concurrency_key = c.concurrency_key and p.queue = v_queue.name
                                            and (p.status = 'processing' or p.id = any (v_kept))));
                    v_kept := v_kept || v_trimmed;
                    exit when cardinality(v_trimmed) = cardinality(v_picked)
                              or cardinality(v_kept) >= least(v_limit, v_slots);
                    v_saturated := array(
                        select p.concurrency_key from jobs p
                         where p.queue = v_queue.name and p.concurrency_key is not null
                           and (p.status = 'processing' or p.id = any (v_kept))
                         group by p.concurrency_key having count(*) >= v_queue.key_max_running);
                    v_picked := array(
                        select r.id
                          from jobs r
                         where r.status in ('pending', 'failed')
                           and r.run_at <= p_now
                           and r.attempts < r.max_attempts
                           and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
                           and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
                           and r.queue = v_queue.name
                           and (p_task_types is null or r.type = any (p_task_types))
                           and (v_only is null or r.id = any (v_only))
                           and not r.id = any (v_exclude)
                           and not r.id = any (v_kept)
                           and (r.concurrency_key is null or not r.concurrency_key = any (v_saturated))
                         order by r.priority desc, r.run_at, r.id
                         limit least(v_limit, v_slots) - cardinality(v_kept)
                           for update skip locked);
                    exit when cardinality(v_picked) = 0;
                end loop;
                v_picked := v_kept;
            end if;
            v_ids := v_ids || v_picked;
        end loop;
        -- The queues with no row, or a row neither paused, limited nor rated.
        v_ids := v_ids || array(
            select r.id
              from jobs r
             where r.status in ('pending', 'failed')
               and r.run_at <= p_now
               and r.attempts < r.max_attempts
               and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
               and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
               and (p_queues is null or r.queue = any (p_queues))
               and (p_task_types is null or r.type = any (p_task_types))
               and (v_only is null or r.id = any (v_only))
               and not r.id = any (v_exclude)
               and not exists (select 1 from queues q
                                where q.name = r.queue
                                  and (q.paused or q.max_running is not null or q.jobs_per_second is not null
                                       or q.key_max_running is not null))
             order by r.priority desc, r.run_at, r.id
             limit v_limit
               for update skip locked);
        -- The best v_limit of them; the others stay locked (skipped by other claims) until this commits.
        v_ids := array(select r.id from jobs r where r.id = any (v_ids)
                        order by r.priority desc, r.run_at, r.id limit v_limit);
        -- Each rated queue's bucket pays for what is claimed from it, still under its row's lock. A bucket
        -- nothing was claimed from is left as it was: refilling it later from its older state comes to the
        -- same tokens, and a claim that finds nothing ready writes nothing.
        update queues q
           set rate_tokens = b.tokens - b.taken,
               rate_refilled_at = greatest(q.rate_refilled_at, p_now)
          from (select t.name, t.tokens, (select count(*) from jobs r
                                           where r.id = any (v_ids) and r.queue = t.name) as taken
                  from unnest(v_rated, v_rated_tokens) as t(name, tokens)) b
         where q.name = b.name and b.taken > 0;
        -- A bucket that held back ready jobs (less than one token left, jobs of the queue still ready that
        -- this claim could take): when its next token comes is announced on pgqw_jobs_at, as a job for later
        -- is, so a listening worker that found nothing (it does not poll) claims then, on time.
        for i in 1 .. cardinality(v_buckets) loop
            v_left := v_bucket_tokens[i] - (select count(*) from jobs r where r.id = any (v_ids) and r.queue = v_buckets[i]);
            if v_left < 1 and exists (
                select 1 from jobs r
                 where r.status in ('pending', 'failed')
                   and r.run_at <= p_now
                   and r.attempts < r.max_attempts
                   and (r.expires_at is null or r.expires_at > p_now or r.attempts > 0)
                   and (r.serial_key is null or serial_turn(r.serial_key, r.serial_seq))
                   and r.queue = v_buckets[i]
                   and (p_task_types is null or r.type = any (p_task_types))
                   and not r.id = any (v_ids)) then
                perform pg_notify('pgqw_jobs_at',
                                  greatest(1, ceil((1 - v_left) / v_bucket_rates[i] * 1000))::bigint || ' ' || v_buckets[i]);
            end if;
        end loop;
    end if;

    -- A job asked to cancel is not started (a request is made with the job's row lock, which this claim
    -- holds now; a waiting job it finds is cancelled at once, so this is a request left from before).
    if exists (select 1 from job_cancel_requests r where r.job_id = any (v_ids)) then
        with ended as (
            update jobs j
               set status = 'cancelled', finished_at = greatest(p_now, j.started_at, j.created_at)
             where j.id = any (v_ids) and exists (select 1 from job_cancel_requests r where r.job_id = j.id)
            returning j.id
        )
        select array(select e.id from ended e) into v_cancelled;
        v_ids := array(select x from unnest(v_ids) x where not x = any (v_cancelled));
        perform settle_jobs(v_cancelled);  -- their dependents and batches
    end if;

    if cardinality(v_ids) > 0 then
        v_type_timeouts := exists (select 1 from task_types t
                                    where t.timeout_ms is not null or t.code_timeout_ms is not null);
    end if;
    return query
    with claimed as (
        update jobs j
           set status = 'processing',
               attempts = j.attempts + 1,
               started_at = p_now,
               locked_by = p_worker_id,
               -- The deadline (null: none), and a lease that ends at it at the latest (least skips a null).
               deadline_at = case when j.timeout_ms is not null or v_type_timeouts then p_now + make_interval(
                   secs => coalesce(j.timeout_ms, (select t.timeout_ms from task_type_settings t where t.name = j.type))
                           / 1000.0) end,
               lease_expires_at = least(
                   p_now + make_interval(
                       secs => coalesce(p_lease_ms, (select t.lease_ms from task_type_settings t where t.name = j.type),
                                        (select s.lease_ms from queue_settings s)) / 1000.0),
                   case when j.timeout_ms is not null or v_type_timeouts then p_now + make_interval(
                       secs => coalesce(j.timeout_ms, (select t.timeout_ms from task_type_settings t where t.name = j.type))
                               / 1000.0) end)
         where j.id = any (v_ids)
        -- The lease token: a random value for this attempt, returned to this caller only. The attempt's
        -- row keeps its SHA-256, which every later call for the attempt must match.
        -- The row whole (a new column of jobs is in the answer), and what the attempt's row and the order need.
        returning j as job, j.id, j.attempts, j.locked_by, j.started_at, j.deadline_at, j.priority, j.run_at,
                  gen_random_uuid() as lease_token
    ), recorded as (
        insert into job_attempts (job_id, attempt, worker_id, started_at, deadline_at, lease_token_hash)
        select c.id, c.attempts, c.locked_by, c.started_at, c.deadline_at, sha256(uuid_send(c.lease_token))
          from claimed c
    )
    select c.job, c.lease_token from claimed c order by c.priority desc, c.run_at, c.id;
end;
$$;
