-- One micro-batch of the stream: merge the batch's new events into the open sessions kept in
-- state, and decide which panes to emit and which sessions to keep (Beam's triggers, in SQL).
--
-- Input: {sessionized} = sessionize.sql over the union of
--   state events  (state_session_id, state_session_start, state_closed, state_pane_count set)
--   new events    (is_new = true, state columns null)
-- Input: {watermarks} = one row, the batch's two watermarks (microseconds since the epoch):
--   w_prev_us      watermark at the start of the batch (decides what is too late)
--   w_new_us       watermark after the batch (decides what closes and what expires)
-- They come as a row, not as :parameters, because Spark writes a parameter's value into the Java
-- code it generates for the plan: a value that changes every batch made every batch compile that
-- code again (and the JVM's JIT compile it again). As a column, every batch runs one compiled plan.
-- Parameters (durations in microseconds, the same for every batch of a stream):
--   :gap_us (the split threshold, sessionize.sql: a window ends :gap_us after its last event, so
--   under the `merge` boundary one microsecond after last event + gap), :lateness_us
WITH sessions AS (
  SELECT
    user_id,
    session_seq,
    MIN(event_ts) AS session_start,
    MAX(event_ts) AS session_end,
    COUNT(*) AS event_count,
    -- size of a set: no DISTINCT aggregate (Spark plans those with an Expand of the input)
    size(collect_set(event_type)) AS event_type_count,
    sort_array(collect_list(@event())) AS events,  -- not array_sort: see dedup_sessions.sql
    bool_or(is_new) AS has_new,
    bool_or(state_session_id IS NOT NULL) AS from_state,
    coalesce(bool_or(state_closed), false) AS was_closed,
    -- A session that absorbs others keeps the id (and the pane count) of the earliest one, so its
    -- id stays stable. Only the session holding a state session's first event inherits from it:
    -- after `rules migrate` to a shorter gap a state session can come apart here, and its later
    -- pieces are new sessions with ids of their own (one id never names two sessions).
    coalesce(MAX(CASE WHEN event_ts = state_session_start THEN state_pane_count END), 0) AS pane_count,
    MIN(CASE WHEN state_session_id IS NOT NULL AND event_ts = state_session_start
             THEN named_struct('start', state_session_start, 'id', state_session_id) END).id
      AS kept_session_id
  FROM {sessionized}
  GROUP BY user_id, session_seq
),
classified AS (
  SELECT
    s.*,
    w.w_new_us,
    unix_micros(s.session_end) + :gap_us AS window_end_us,
    CASE
      WHEN NOT s.from_state AND unix_micros(s.session_end) + :gap_us + :lateness_us <= w.w_prev_us
        THEN 'too_late'
      WHEN s.was_closed THEN 'late'
      WHEN unix_micros(s.session_end) + :gap_us > w.w_new_us THEN 'early'
      WHEN unix_micros(s.session_end) + :gap_us > w.w_prev_us THEN 'on_time'
      ELSE 'late'
    END AS pane_kind
  FROM sessions AS s
  CROSS JOIN {watermarks} AS w
)
SELECT
  coalesce(kept_session_id,
           @session_id(user_id, session_start))
    AS session_id,
  user_id,
  session_start,
  session_end,
  event_count,
  event_type_count,
  events,
  pane_kind,
  -- emit: new data arrived, or the watermark passed a session that has not been closed yet
  (has_new OR (from_state AND NOT was_closed AND window_end_us <= w_new_us)) AS emit,
  -- keep in state until the watermark passes window end + allowed lateness
  (pane_kind <> 'too_late' AND window_end_us + :lateness_us > w_new_us) AS retain,
  was_closed OR window_end_us <= w_new_us AS closed,
  pane_count
FROM classified
