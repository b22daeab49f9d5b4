-- The stream's input to sessionize.sql: the events of the open sessions (state) and the batch's
-- events, one row per distinct event.
--
-- An event is (user_id, event_id, event_ts); copies of it (redeliveries) may differ in
-- event_type or payload, and the kept copy is THE copy rule of tidemark (docs/input-contract.md;
-- @copy/@kept of dedup_sql/rules.py, shared with dedup_events.sql): the smallest (event_type, payload). It is
-- a function of the set of copies received, whatever their order or batch: a new copy replaces
-- the one state holds only if it is smaller, and then counts as new (the session's pane is
-- emitted again with it).
--
-- Input: {state_events} (user_id, event_id, event_ts, event_type, payload and the state_* columns
--   of its session) and {batch_events} (user_id, event_id, event_ts, event_type, payload).
-- Output: user_id, event_id, event_ts, event_type, payload, state_session_id,
--   state_session_start, state_closed, state_pane_count (null for events state did not hold),
--   is_new (the kept copy is not the one state held).
WITH copies AS (
  SELECT user_id, event_id, event_ts,
         @copy(event_type, payload) AS copy,
         @copy(event_type, payload) AS state_copy,
         state_session_id, state_session_start, state_closed, state_pane_count
  FROM {state_events}
  UNION ALL
  SELECT user_id, event_id, event_ts,
         @copy(event_type, payload) AS copy,
         CAST(NULL AS @COPY_TYPE) AS state_copy,
         CAST(NULL AS STRING), CAST(NULL AS TIMESTAMP), CAST(NULL AS BOOLEAN), CAST(NULL AS INT)
  FROM {batch_events}
),
by_user AS (
  -- One shuffle for the batch: by user, which the grouping below, sessionize.sql's windows and
  -- stream_panes.sql's grouping all accept; grouped in the windows' order, one sort serves all.
  SELECT * FROM copies DISTRIBUTE BY user_id
),
kept AS (
  SELECT user_id, event_id, event_ts,
         @kept(copy) AS copy,
         -- state holds at most one copy of an event: these pick it (nulls are ignored)
         MIN(state_copy) AS state_copy,
         MIN(state_session_id) AS state_session_id,
         MIN(state_session_start) AS state_session_start,
         MIN(state_closed) AS state_closed,
         MIN(state_pane_count) AS state_pane_count
  FROM by_user
  GROUP BY user_id, event_ts, event_id
)
SELECT user_id, event_id, event_ts, copy.event_type AS event_type, copy.payload AS payload,
       state_session_id, state_session_start, state_closed, state_pane_count,
       state_copy IS NULL OR copy <> state_copy AS is_new
FROM kept
