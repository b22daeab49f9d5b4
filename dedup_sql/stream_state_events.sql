-- The events of the stream's open sessions, one row each with its session's state_* columns:
-- stream_input.sql's state_events input.
--
-- Input: {state} = the stream's state, one row per open session (streaming_job.state.STATE_SCHEMA:
--   its events and pane bookkeeping)
SELECT
  user_id,
  e.event_id,
  e.event_ts,
  e.event_type,
  e.payload,
  state_session_id,
  state_session_start,
  state_closed,
  state_pane_count
FROM (
  SELECT
    user_id,
    explode(events) AS e,
    session_id AS state_session_id,
    session_start AS state_session_start,
    closed AS state_closed,
    pane_count AS state_pane_count
  FROM {state}
)
