-- Deduplication, step 3: what the driver needs to know about the islands, in one pass.
--
--   reach_us        the latest end of a session touching :event_date (starting on it, or starting
--                   earlier and still going on it): how far ahead the run must read (tidemark/panes/planning.py)
--   sessions        how many sessions start on :event_date
--   affected_dates  the event dates whose published version this run may invalidate: a session that
--                   holds new events and spans :event_date may have absorbed sessions published under
--                   any date it spans (they start within it), so every UTC date from its start to its
--                   end is reported. An over-approximation: rerunning a date without new receipts is
--                   a no-op, so the reruns terminate.
--
--   context_rows    how many islands do not start on :event_date but before :horizon_us (kept beside
--                   the version for the next run's incremental path, tidemark/deduplication/incremental.py)
--   past_horizon    how many islands of :event_date or earlier that hold new events end less than
--                   a gap before the horizon: an incremental run cannot vouch for them (it falls
--                   back to the full path; tidemark/deduplication/incremental.py)
--
-- Input: {islands} (dedup_sessions.sql's columns). Parameters: :event_date ('YYYY-MM-DD'),
--   :horizon_us (microseconds since the epoch), :gap_us (the split threshold, sessionize.sql: an
--   event at session_end + :gap_us or later could not join the island, one before it could).
SELECT
  -- islands start at lo = D0 - split gap at the earliest, so event_date <= D and an end on or after D0
  -- is "touches D"; an island ending before D0 cannot reach past D+1 anyway.
  MAX(CASE WHEN event_date <= :event_date THEN unix_micros(session_end) END) AS reach_us,
  count_if(event_date = :event_date) AS sessions,
  count_if(event_date <> :event_date AND unix_micros(session_start) < :horizon_us) AS context_rows,
  count_if(has_new AND event_date <= :event_date AND unix_micros(session_end) + :gap_us > :horizon_us)
    AS past_horizon,
  array_sort(array_distinct(flatten(collect_list(
    CASE WHEN has_new
              AND to_date(session_start) <= to_date(:event_date)
              AND to_date(session_end) >= to_date(:event_date)
         THEN transform(sequence(to_date(session_start), to_date(session_end), INTERVAL 1 DAY),
                        d -> date_format(d, 'yyyy-MM-dd'))
    END)))) AS affected_dates
FROM {islands}
