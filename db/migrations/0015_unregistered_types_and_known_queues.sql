-- 0015_unregistered_types_and_known_queues: enqueue_job(s) refuse a task type nobody registered (QT422), unless
-- a DBA lets them through (accept_unregistered_types: for a team whose producers deploy before anything
-- registers the types); pause_queue, resume_queue, set_queue_limit and set_queue_rate refuse a queue that is
-- not known (QU404) unless asked to create it, a new last argument p_create. A signature change: the old
-- functions are dropped here and made again by the functions every migrate re-applies.
alter table queue_settings add column accept_unregistered_types boolean not null default false;

drop function if exists pause_queue(text);
drop function if exists resume_queue(text);
drop function if exists set_queue_limit(text, integer);
drop function if exists set_queue_rate(text, numeric);
