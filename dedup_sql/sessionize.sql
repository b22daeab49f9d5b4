-- The session rule of tidemark, in one place: gaps and islands over event time.
--
-- Events of one user whose timestamps are closer than the gap (strictly: a distance of exactly
-- the gap starts a new session) belong to one session. These are the semantics of Spark's
-- session_window and Beam's Sessions windows: each event opens a window [t, t + gap) and
-- overlapping windows merge.
--
-- Input: {events}, at least user_id, event_id, event_ts (distinct events).
-- Output: each input row plus session_seq, the ordinal of its session within its user.
-- Parameter: :gap_us, the gap in microseconds.
WITH ordered AS (
  SELECT
    i.*,
    unix_micros(i.event_ts)
      - LAG(unix_micros(i.event_ts)) OVER (PARTITION BY i.user_id ORDER BY i.event_ts, i.event_id)
      AS since_previous_us
  FROM {events} AS i
)
SELECT
  o.*,
  SUM(CASE WHEN o.since_previous_us IS NULL OR o.since_previous_us >= :gap_us THEN 1 ELSE 0 END)
    OVER (PARTITION BY o.user_id ORDER BY o.event_ts, o.event_id
          ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session_seq
FROM ordered AS o
