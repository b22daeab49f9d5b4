-- The session rule of tidemark, in one place: gaps and islands over event time.
--
-- Neighbouring events of one user (in time order) at least :gap_us apart are in two sessions;
-- closer ones are in one. :gap_us is the split threshold of the lake's rules (SessionRules.gap_us,
-- tidemark/base/session_rules.py), which hold the gap boundary:
--   split (the default)  :gap_us = the gap: events exactly one gap apart start a new session, as
--                        Beam's Sessions (windows [t, t + gap) that touch stay apart);
--   merge                :gap_us = the gap + 1 us: events exactly one gap apart join, as Spark's
--                        session_window and Flink's session windows (touching windows merge).
-- Timestamps are whole microseconds, so that one comparison states both (docs/lake-layout.md).
--
-- Input: {events}, at least user_id, event_id, event_ts (distinct events).
-- Output: each input row plus session_seq, the ordinal of its session within its user.
-- Parameter: :gap_us, the split threshold in microseconds.
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
