-- Deduplication, step 1: the distinct events behind a set of receipt panes.
--
-- Every pane holds its session's events so far, so accumulating panes, replays and fragments
-- repeat events. An event is (user_id, event_id, event_ts); of its copies the one kept is THE copy
-- rule (docs/input-contract.md; @copy and @kept, dedup_sql/rules.py, shared with the stream):
-- the smallest (event_type, payload), a function of the set of copies received. Every copy of an
-- event has its event_ts, so every copy lies in the receipts this run reads. Events before :lo_us
-- cannot belong to a session of the date being deduplicated (see tidemark/deduplication/dedup.py) and are left out.
--
-- Input: {panes}, one row per pane: user_id, events, receipt_ts, known
--   (known: the pane's receipt partition was already included in the previous published version).
-- Output: user_id, event_id, event_ts, event_type, payload,
--   first_receipt_ts (the first receipt that carried the event), last_receipt_ts (the same: the
--   latest first receipt of a session's events is dedup_sessions.sql's MAX of it; the incremental
--   path, dedup_events_incremental.sql, gives carried events their island's bounds instead),
--   known (some copy of the event was already seen by the previous version).
-- Parameter: :lo_us, microseconds since the epoch.
WITH exploded AS (
  SELECT p.user_id, e.event_id, e.event_ts, @copy(e.event_type, e.payload) AS copy, p.receipt_ts, p.known
  FROM {panes} AS p
  LATERAL VIEW explode(p.events) x AS e
  WHERE unix_micros(e.event_ts) >= :lo_us
  -- One shuffle for the whole dedup: by user, which the grouping below, sessionize.sql's windows
  -- and dedup_sessions.sql's grouping all accept; grouped in the windows' order, one sort serves all.
  DISTRIBUTE BY user_id
),
distinct_events AS (
  SELECT
    user_id,
    event_id,
    event_ts,
    @kept(copy) AS copy,
    MIN(receipt_ts) AS first_receipt_ts,
    bool_or(known) AS known
  FROM exploded
  GROUP BY user_id, event_ts, event_id
)
SELECT
  user_id,
  event_id,
  event_ts,
  copy.event_type AS event_type,
  copy.payload AS payload,
  first_receipt_ts,
  first_receipt_ts AS last_receipt_ts,
  known
FROM distinct_events
