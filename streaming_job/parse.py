"""Input contract: one JSON object per line with event_id, user_id, event_type and an RFC 3339
event_ts (with 'Z' or an offset). Other fields are kept in `payload` (a JSON object of strings).

Anything else is quarantined with the raw line, the file it came from and a reason; nothing is
dropped silently.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

REQUIRED_FIELDS = ("event_id", "user_id", "event_type", "event_ts")

# RFC 3339 date-time: a UTC offset is mandatory, otherwise the instant is ambiguous.
RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"


def _fields(value: Column) -> Column:
    return F.from_json(value, "map<string,string>")


def with_parse(batch: DataFrame) -> DataFrame:
    """Add `fields`, the parsed timestamp and `reason` (null when the line is a valid event)."""
    fields = F.col("fields")
    # RFC 3339 allows a lowercase 't' and 'z' and a space between date and time; Spark's parser
    # takes none of them, so normalise before parsing.
    parsed_ts = F.try_to_timestamp(F.regexp_replace(F.upper(fields["event_ts"]), "^(.{10}) ", "$1T"))
    df = batch.withColumn("fields", _fields(F.col("value")))
    reason = F.when(F.trim(F.col("value")) == "", F.lit("empty line"))
    # Only lines that are not a JSON object are parsed a second time, to tell why: the nested
    # CASE is evaluated only for them, so valid events pay for one parse.
    reason = reason.when(fields.isNull(),
                         F.when(F.expr("try_parse_json(value)").isNull(), F.lit("not valid JSON"))
                         .otherwise(F.lit("not a JSON object")))
    for name in REQUIRED_FIELDS:
        reason = reason.when(fields[name].isNull() | (F.trim(fields[name]) == ""),
                             F.lit(f"missing or empty required field: {name}"))
    reason = reason.when(~fields["event_ts"].rlike(RFC3339),
                         F.concat(F.lit("event_ts is not an RFC 3339 timestamp with offset: "),
                                  F.substring(fields["event_ts"], 1, 64)))
    reason = reason.when(parsed_ts.isNull(),
                         F.concat(F.lit("event_ts out of range: "), F.substring(fields["event_ts"], 1, 64)))
    return df.withColumn("event_ts", parsed_ts).withColumn("reason", reason)


def valid_events(parsed: DataFrame) -> DataFrame:
    """Events that passed every check: user_id, event_id, event_ts, event_type, payload."""
    payload = F.to_json(F.map_filter(F.col("fields"), lambda k, v: ~k.isin(*REQUIRED_FIELDS)))
    return (parsed.where(F.col("reason").isNull())
            .select(F.col("fields")["user_id"].alias("user_id"),
                    F.col("fields")["event_id"].alias("event_id"),
                    F.col("event_ts"),
                    F.col("fields")["event_type"].alias("event_type"),
                    payload.alias("payload")))


def quarantined(parsed: DataFrame) -> DataFrame:
    """Rejected lines: raw text, reason and source file."""
    return parsed.where(F.col("reason").isNotNull()).select(
        F.col("value").alias("raw"), "reason", "source_file")
