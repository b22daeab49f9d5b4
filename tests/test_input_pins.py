"""tidemark.ingest.input_pins without Spark: a batch's plan read from Spark's logs, its files pinned,
a replay's pins checked against the recorded digests, pins released after the commit."""

from __future__ import annotations

import hashlib
import json
import os

from tidemark.ingest import input_pins
from tidemark.ingest.landing_archive import Generation


def write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(data)


def offsets(query, batch: int, millis: int, log_offset: int) -> None:
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": millis, "conf": {}}
    write(f"{query}/offsets/{batch}", f'v1\n{json.dumps(meta)}\n{{"logOffset":{log_offset}}}'.encode())


def source_log(query, name: str, entries: list[tuple[str, int]]) -> None:
    lines = ["v1"] + [json.dumps({"path": p, "timestamp": 1, "batchId": b}) for p, b in entries]
    write(f"{query}/sources/0/{name}", "\n".join(lines).encode())


def test_the_plan_comes_from_the_offset_and_file_source_logs(tmp_path):
    query, landing = str(tmp_path / "query"), str(tmp_path / "landing")
    offsets(query, 0, 1_000, 0)
    source_log(query, "0", [(f"file://{landing}/a.jsonl", 0)])
    offsets(query, 1, 2_000, 2)  # two source log entries in one micro-batch, the second compacted
    source_log(query, "1", [(f"file://{landing}/sub/b%20c.jsonl", 1)])
    source_log(query, "2.compact", [(f"file://{landing}/a.jsonl", 0), (f"file://{landing}/d.jsonl", 2)])

    first, second = input_pins.planned(query, 0, landing), input_pins.planned(query, 1, landing)

    assert first == input_pins.PlannedBatch(0, 1_000, {"a.jsonl": f"file:{landing}/a.jsonl"})
    assert second is not None
    assert second.receipt_ms == 2_000
    assert second.files == {"sub/b c.jsonl": f"file:{landing}/sub/b%20c.jsonl", "d.jsonl": f"file:{landing}/d.jsonl"}
    assert input_pins.planned(query, 2, landing) is None  # not planned by a query: a batch built by hand


def pinned(tmp_path, files: dict[str, bytes]):
    checkpoint, landing = str(tmp_path / "ckpt"), str(tmp_path / "landing")
    for name, data in files.items():
        write(f"{landing}/{name}", data)
    plan = input_pins.PlannedBatch(0, 1_000, {name: f"file:{landing}/{name}" for name in [*files, "gone.jsonl"]})
    pins, missing = input_pins.pin(checkpoint, 7, 0, landing, plan)
    return checkpoint, landing, pins, missing


def test_a_pin_keeps_the_content_read_when_the_landed_file_is_replaced(tmp_path):
    checkpoint, landing, pins, missing = pinned(tmp_path, {"a.jsonl": b"one\n", "s/b.jsonl": b"two\n"})
    assert sorted(pins) == ["a.jsonl", "s/b.jsonl"]
    assert missing == ["gone.jsonl"]
    write(f"{landing}/.a.tmp", b"other\n")
    os.replace(f"{landing}/.a.tmp", f"{landing}/a.jsonl")  # replaced by a rename: a new inode

    assert input_pins.pinned_files(checkpoint, 7) == ["a.jsonl", "s/b.jsonl"]
    assert input_pins.sha256(checkpoint, 7, "a.jsonl") == hashlib.sha256(b"one\n").hexdigest()


def test_a_replay_cuts_a_grown_pin_back_and_reports_a_changed_or_gone_one(tmp_path):
    files = {"grown.jsonl": b"a\n", "changed.jsonl": b"b\n", "gone.jsonl": b"c\n", "empty.jsonl": b""}
    checkpoint, landing, _, _ = pinned(tmp_path, files)
    recorded = [
        {"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in files.items()
        if data
    ]
    with open(f"{landing}/grown.jsonl", "ab") as out:  # in place: the pin shares the inode
        out.write(b"more\n")
    with open(f"{landing}/changed.jsonl", "wb") as out:
        out.write(b"x\n")
    os.remove(os.path.join(input_pins.pin_dir(checkpoint, 7), "gone.jsonl"))

    lost, changed = input_pins.verify(checkpoint, 7, recorded)

    assert lost == {"changed.jsonl": input_pins.PIN_CHANGED, "gone.jsonl": input_pins.PIN_GONE}
    assert changed == {"changed.jsonl": b"x\n"}
    assert input_pins.pinned_files(checkpoint, 7) == ["grown.jsonl"]  # what is read: the recorded bytes
    assert input_pins.sha256(checkpoint, 7, "grown.jsonl") == hashlib.sha256(b"a\n").hexdigest()
    with open(f"{landing}/grown.jsonl", "rb") as landed:
        assert landed.read() == b"a\nmore\n"  # the landed file is left as it is (the audit's business)


def test_pins_are_released_once_spark_commits_their_batch(tmp_path):
    checkpoint, _, _, _ = pinned(tmp_path, {"a.jsonl": b"one\n"})
    query = Generation(0, 7).query_dir(checkpoint)
    assert input_pins.release(checkpoint, 0, query) == []
    write(os.path.join(query, "commits", "0"), b"v1\n{}")
    assert input_pins.release(checkpoint, 0, query, keep=frozenset({7})) == []  # the archive has not taken it yet
    assert input_pins.release(checkpoint, 0, query) == [7]
    assert os.listdir(os.path.join(checkpoint, input_pins.PINNED_DIR)) == []


def test_released_pins_of_a_replayed_batch_are_pinned_again_only_from_the_recorded_bytes(tmp_path):
    """A replay after the pins were released (Spark's commit of the batch gone): a landed file that
    still starts with the recorded bytes is pinned again (cut back to them by verify), one that holds
    other content is not, and its content stays the landing's (a later batch reads a reused name)."""
    checkpoint, landing, pins, _ = pinned(tmp_path, {"same.jsonl": b"one\n", "swapped.jsonl": b"two\n"})
    recorded = [
        {"path": name, "size": pins[name].size, "sha256": input_pins.sha256(checkpoint, 7, name)} for name in pins
    ]
    query = Generation(0, 7).query_dir(checkpoint)
    write(os.path.join(query, "commits", "0"), b"v1\n{}")
    assert input_pins.release(checkpoint, 0, query) == [7]
    write(f"{landing}/same.jsonl", b"one\nappended\n")
    write(f"{landing}/swapped.jsonl", b"TWO\n")
    plan = input_pins.PlannedBatch(0, 1_000, {name: f"file:{landing}/{name}" for name in pins})

    assert input_pins.restore(checkpoint, 7, 0, landing, plan, recorded) == ["same.jsonl"]
    lost, changed = input_pins.verify(checkpoint, 7, recorded)

    assert lost == {"swapped.jsonl": input_pins.PIN_GONE}
    assert changed == {}
    assert input_pins.sha256(checkpoint, 7, "same.jsonl") == hashlib.sha256(b"one\n").hexdigest()
    assert input_pins.release(checkpoint, 0, query) == [7]  # its manifest is back: released as before


def test_an_earlier_generations_pins_are_released(tmp_path):
    checkpoint, _, _, _ = pinned(tmp_path, {"a.jsonl": b"one\n"})  # generation 0, never committed there
    assert input_pins.release(checkpoint, 1, Generation(1, 9).query_dir(checkpoint)) == [7]


def test_the_archive_takes_the_content_read_from_the_pin_when_the_landed_file_changed(tmp_path):
    """A batch read a.jsonl ("one") and b.jsonl; after its commit a.jsonl is replaced by another
    content and b.jsonl deleted: the archive gets what the batch read, from its pins, and the
    replaced file goes to on_replaced (quarantined and set aside by the stream)."""
    from tidemark.ingest import landing_archive

    checkpoint, landing, pins, _ = pinned(tmp_path, {"a.jsonl": b"one\n", "b.jsonl": b"two\n"})
    generation = Generation(0, 7)
    files = [{"path": p.path, "size": p.size, "mtime_ms": p.mtime_ms} for p in pins.values()]
    landing_archive.enqueue(checkpoint, generation, 0, "20261126T100000000Z", files)
    write(os.path.join(generation.query_dir(checkpoint), "commits", "0"), b"v1\n{}")
    write(f"{landing}/.a.tmp", b"other content\n")
    os.replace(f"{landing}/.a.tmp", f"{landing}/a.jsonl")
    os.remove(f"{landing}/b.jsonl")
    archive, handed = str(tmp_path / "archive"), []

    landing_archive.drain(landing, archive, checkpoint, handed.extend)

    for name, data in (("a.jsonl", b"one\n"), ("b.jsonl", b"two\n")):
        with open(landing_archive.archive_path(archive, "20261126T100000000Z", name), "rb") as archived:
            assert archived.read() == data
    assert [f.path for f in handed] == ["a.jsonl"]
    assert landing_archive.queued(checkpoint) == []
