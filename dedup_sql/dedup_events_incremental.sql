-- Incremental deduplication, step 1: the distinct events of the users new receipts touched, from
-- the previous version's islands of those users and the new receipts' panes (tidemark/deduplication/incremental.py).
--
-- The previous version's islands (its sessions of the date plus the islands it kept beside them,
-- the "context") hold every distinct event >= lo of the receipts it read, with the kept copy
-- already chosen; a new copy replaces it only if smaller (THE copy rule: @copy/@kept, dedup_sql/rules.py).
-- Islands only ever merge when events are added, so an old island ends up whole inside one new
-- island: its first/last receipt bounds carry over as they are. The precondition that every new
-- receipt is at least as recent as the previous version's newest one means a new copy of an old
-- event never lowers that event's first receipt.
--
-- Input: {islands}: previous islands of the touched users (user_id, events, first_receipt_ts,
--   last_receipt_ts); {panes}: the new receipts' panes (user_id, events, receipt_ts).
-- Output: dedup_events.sql's columns (user_id, event_id, event_ts, event_type, payload,
--   first_receipt_ts, last_receipt_ts, known), ready for sessionize.sql and dedup_sessions.sql.
-- Parameter: :lo_us, microseconds since the epoch.
WITH copies AS (
  SELECT i.user_id, e.event_id, e.event_ts,
         @copy(e.event_type, e.payload) AS copy,
         i.first_receipt_ts, i.last_receipt_ts, TRUE AS known
  FROM {islands} AS i
  LATERAL VIEW explode(i.events) x AS e
  UNION ALL
  SELECT p.user_id, e.event_id, e.event_ts,
         @copy(e.event_type, e.payload) AS copy,
         p.receipt_ts, p.receipt_ts, FALSE AS known
  FROM {panes} AS p
  LATERAL VIEW explode(p.events) x AS e
  WHERE unix_micros(e.event_ts) >= :lo_us
),
by_user AS (
  -- one shuffle, by user, for the grouping below and the windows after it (as in dedup_events.sql)
  SELECT * FROM copies DISTRIBUTE BY user_id
),
distinct_events AS (
  SELECT user_id, event_id, event_ts,
         @kept(copy) AS copy,
         MIN(first_receipt_ts) AS first_receipt_ts,
         -- an old event lies in exactly one old island: its bound; a new event: its first receipt
         coalesce(MAX(CASE WHEN known THEN last_receipt_ts END), MIN(last_receipt_ts)) AS last_receipt_ts,
         bool_or(known) AS known
  FROM by_user
  GROUP BY user_id, event_ts, event_id
)
SELECT user_id, event_id, event_ts, copy.event_type AS event_type, copy.payload AS payload,
       first_receipt_ts, last_receipt_ts, known
FROM distinct_events
