-- 0012_queue_rate: queues.jobs_per_second is enforced now, as a token bucket per queue: at most
-- greatest(1, jobs_per_second) tokens (one second's worth, and at least one job); each claim refills it
-- by the time elapsed × the rate and spends a token per job it starts. Written only by set_queue_rate
-- and claim_jobs_at (under the queue row's lock).
alter table queues
    -- Tokens in the bucket as of rate_refilled_at; null with no rate (and, for a rate set by hand, a
    -- full bucket). Numeric, so a refill of 0.1 s × 10/s is exactly one job, never 0.999….
    add column rate_tokens       numeric,
    -- When rate_tokens was last refilled; the claim's clock (claim_jobs_at's p_now), never moved back.
    add column rate_refilled_at  timestamptz,
    -- What set_queue_rate accepts: at most a million a second, in steps of 0.000001.
    add constraint queues_jobs_per_second_range
        check (jobs_per_second <= 1000000 and jobs_per_second = round(jobs_per_second, 6)),
    add constraint queues_rate_tokens_in_bucket
        check (rate_tokens >= 0 and rate_tokens <= greatest(1, jobs_per_second)),
    add constraint queues_rate_bucket_needs_rate
        check (jobs_per_second is not null or (rate_tokens is null and rate_refilled_at is null)),
    add constraint queues_rate_bucket_complete
        check ((rate_tokens is null) = (rate_refilled_at is null));
