-- Idempotency keys: 1 to 255 visible ASCII characters ('!' to '~': letters, digits, punctuation; no
-- spaces, no control or non-ASCII characters), so a key means the same bytes to every client, proxy
-- and log that carries it. (Ranges in PostgreSQL regular expressions compare character codes.)
-- enqueue_job and enqueue_jobs check the same rule first and raise QV400 with a message; this
-- constraint holds the rule for every other way a row could be written.
alter table jobs
    add constraint jobs_idempotency_key_charset check (idempotency_key ~ '^[!-~]{1,255}$');
