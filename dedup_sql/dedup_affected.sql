-- Deduplication, step 3: the other event dates whose published version this run may invalidate.
--
-- A session that holds new events and spans the date being deduplicated may have absorbed
-- sessions published under any date it spans (they start within it), or moved to another date:
-- every UTC date from its start to its end is reported (an over-approximation: rerunning a date
-- without new receipts is a no-op, so the reruns terminate).
--
-- Input: temp view tm_dedup_islands (dedup_sessions.sql). Parameter: :event_date ('YYYY-MM-DD').
SELECT DISTINCT date_format(d, 'yyyy-MM-dd') AS affected_date
FROM tm_dedup_islands
LATERAL VIEW explode(sequence(to_date(session_start), to_date(session_end), INTERVAL 1 DAY)) x AS d
WHERE has_new
  AND to_date(session_start) <= to_date(:event_date)
  AND to_date(session_end) >= to_date(:event_date)
