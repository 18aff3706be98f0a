-- 0025_task_type_listing: list_task_types answers every effective setting of a type, its timeout, expiry,
-- snooze limit and retention too (task_type_settings' columns): a new return type.
drop function if exists list_task_types(text);
