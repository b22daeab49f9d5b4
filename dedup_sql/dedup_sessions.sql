-- Deduplication, step 2: one row per session (island) of the re-sessionized distinct events.
--
-- Input: {sessionized} = sessionize.sql over dedup_events.sql's (or dedup_events_incremental.sql's)
--   output.
-- Output: THE session schema's island columns (tidemark/session/session_schema.py ISLAND, checked by
--   tests/test_session_schema.py) plus has_new and event_date:
--   user_id, session_start, session_end, event_count, event_type_count (distinct event types of
--   its events' kept copies), event_ids (sorted, one per event: an id
--   sent at two timestamps is two events and appears twice), events (sorted by time),
--   first_receipt_ts / last_receipt_ts (the earliest / latest of its events' first arrivals),
--   has_new (the session holds an event the previous published version had not seen),
--   event_date (UTC date of the start: the partition the session belongs to).
SELECT
  user_id,
  MIN(event_ts) AS session_start,
  MAX(event_ts) AS session_end,
  COUNT(*) AS event_count,
  -- the size of a set, not COUNT(DISTINCT): a DISTINCT aggregate beside the others makes Spark
  -- Expand the input; equal to session_schema's fill (distinct types of the events' kept copies)
  size(collect_set(event_type)) AS event_type_count,
  -- sort_array, not array_sort: the same ascending order for arrays without nulls (collect_list
  -- drops nulls), but compared natively where array_sort calls its comparator lambda per pair
  -- (interpreted): ~3 s of the 1M-session dedup (BENCHMARKS.md section 4).
  sort_array(collect_list(event_id)) AS event_ids,
  sort_array(collect_list(@event())) AS events,
  MIN(first_receipt_ts) AS first_receipt_ts,
  MAX(last_receipt_ts) AS last_receipt_ts,
  NOT bool_and(known) AS has_new,
  date_format(MIN(event_ts), 'yyyy-MM-dd') AS event_date
FROM {sessionized}
GROUP BY user_id, session_seq
