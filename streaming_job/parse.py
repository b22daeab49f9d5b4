"""The input contract in the stream: applied to the raw bytes of every line.

The contract is specified by one Python implementation (tidemark/ingest/contract.py), shared with the
batch reference; here it runs as a vectorised Arrow UDF over each micro-batch, through its fast
path (tidemark/ingest/contract_fast.py: the common lines decided in bulk, every other line by
contract.check_line itself, the two held identical by tests/test_contract_differential.py). The
line's exact bytes (the text source keeps invalid UTF-8 as is) go to the contract and, for refused
lines, to the quarantine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf

from tidemark.ingest import contract_fast
from tidemark.ingest.contract import InputRules

if TYPE_CHECKING:
    from pyspark.sql._typing import UserDefinedFunctionLike

    ArrowArray = pa.Array[Any]
else:
    # pyspark takes an Arrow UDF's kind from its type hints, compared with pa.Array itself (arrays
    # in, an array out: a scalar Arrow UDF); pa.Array is not subscriptable at run time.
    ArrowArray = pa.Array

VERDICT = (
    "reason string, user_id string, event_id string, event_type string, "
    "event_ts_us bigint, payload string"
)  # the Spark spelling of contract_fast.VERDICT
FILE_FACTS = ("file_size", "file_mtime_ms")  # of a line's file, as Spark listed it (streaming_job.job.source)


def _arrow_udf(function: Callable[..., ArrowArray]) -> UserDefinedFunctionLike:
    """`function` as a scalar Arrow UDF returning VERDICT rows, its kind taken from its type hints."""
    # pyspark's stubs type arrow_udf only with a functionType, not the form that reads the hints.
    udf: UserDefinedFunctionLike = arrow_udf(VERDICT)(function)  # type: ignore[call-overload]
    return udf


def _verdict_udf(rules: InputRules) -> UserDefinedFunctionLike:
    def verdict(raw: ArrowArray, received_us: ArrowArray) -> ArrowArray:
        # `raw` is the binary column `raw` (with_parse)
        return contract_fast.verdicts(cast("pa.BinaryArray", raw), received_us, rules)

    return _arrow_udf(verdict)


def _verdict_at_udf(rules: InputRules, received_us: int) -> UserDefinedFunctionLike:
    """The verdict UDF with the receipt time a value of the function, not of the plan.

    Spark writes a literal into the code it generates, so a batch's time in the plan would make
    every batch compile anew (streaming_job.pane_writer.BatchValues).
    """

    def verdict(raw: ArrowArray) -> ArrowArray:
        received = pa.repeat(pa.scalar(received_us, pa.int64()), len(raw))
        return contract_fast.verdicts(cast("pa.BinaryArray", raw), received, rules)

    return _arrow_udf(verdict)


def with_parse(batch: DataFrame, rules: InputRules | None = None, received_us: int | None = None) -> DataFrame:
    """The batch's lines checked.

    `reason` (null for a valid event), the event's columns (`user_id`, `event_id`, `event_ts`,
    `event_type`, `payload`; null for a refused line), `raw` and `source_file` (set for refused
    lines only) and `receipt_time`.

    Needs `value` (a line), `source_file` and the clock guard's now: `received_us`, the micro-batch's
    timestamp, or else a `receipt_time` column (passed on); `file_size` and `file_mtime_ms` are
    passed on when present. The stream caches this
    frame, so it holds only what a later step reads: a valid line's bytes are never read again (only
    the quarantine needs them), and keeping them doubled the cache a batch builds and scans. The
    file of every line stays (the landing rule and ledger group by it), a name in each cached row:
    the stream's cache is uncompressed (streaming_job.job.stream_settings says why).
    """
    raw = F.col("value").cast("binary")
    if received_us is None:
        verdict = _verdict_udf(rules or InputRules())(F.col("raw"), F.unix_micros("receipt_time"))
    else:
        verdict = _verdict_at_udf(rules or InputRules(), received_us)(F.col("raw"))
    checked = batch.withColumn("raw", raw).withColumn("verdict", verdict)
    refused = F.col("verdict.reason").isNotNull()
    return checked.select(
        F.col("verdict.reason").alias("reason"),
        F.col("verdict.user_id").alias("user_id"),
        F.col("verdict.event_id").alias("event_id"),
        F.timestamp_micros(F.col("verdict.event_ts_us")).alias("event_ts"),
        F.col("verdict.event_type").alias("event_type"),
        F.col("verdict.payload").alias("payload"),
        F.when(refused, F.col("raw")).alias("raw"),
        "source_file",
        *[name for name in (*FILE_FACTS, "receipt_time") if name in batch.columns],
    )


def valid_events(parsed: DataFrame) -> DataFrame:
    """Events that passed every check: user_id, event_id, event_ts, event_type, payload."""
    return parsed.where(F.col("reason").isNull()).select("user_id", "event_id", "event_ts", "event_type", "payload")


def quarantined(parsed: DataFrame) -> DataFrame:
    """Refused lines: the exact bytes (binary `raw`), the reason and the source file."""
    return parsed.where(F.col("reason").isNotNull()).select("raw", "reason", "source_file")
