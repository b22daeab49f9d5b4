-- What one micro-batch of the stream writes, from stream_panes.sql's sessions: the sessions it
-- emits (a pane, `emit`) or keeps (state, `retain`), shuffled by event date (the pane writer,
-- streaming_job/pane_writer.py, writes one file per date), with the pane columns but the batch's
-- own values (batch_id, watermark, receipt_ts: the writer adds them, pane_writer.BatchValues) and
-- the state's bookkeeping.
--
-- Input: {panes} = stream_panes.sql's rows
--
-- One statement with the sessionizing (streaming_job.batch.BATCH_ROWS_QUERY): every DataFrame step
-- on top of that plan analysed all of it again in the driver (five steps, ~130 ms of a warm small
-- batch's ~1.3 s; BENCHMARKS.md section 1).
--
-- event_ids is the events' ids, taken after the shuffle: shuffling a copy of them made the pane
-- shuffle ~40% bigger. The panes' event_date is the session's start date as text.
SELECT
  session_id,
  user_id,
  session_start,
  session_end,
  event_count,
  event_type_count,
  events.event_id AS event_ids,
  events,
  pane_kind,
  pane_index,
  event_date,
  closed,
  state_pane_count,
  emit,
  retain
FROM (
  SELECT
    session_id,
    user_id,
    session_start,
    session_end,
    event_count,
    event_type_count,
    events,
    pane_kind,
    pane_count + 1 AS pane_index,
    date_format(session_start, 'yyyy-MM-dd') AS event_date,
    closed,
    -- the panes a kept session has had, this batch's included
    pane_count + CAST(emit AS INT) AS state_pane_count,
    emit,
    retain
  FROM {panes}
  WHERE emit OR retain
  DISTRIBUTE BY event_date
)
