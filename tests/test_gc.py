"""tidemark gc: superseded versions go after the retention; current, newest, and anything younger
stay; leftovers of killed or losing runs go too. Versions are built with pyarrow here (gc is pure
file logic), read back through the same reader consumers use."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from tidemark import cli, layout, publish, reader

DAY = "2026-03-06"
T0 = datetime(2026, 3, 10, tzinfo=timezone.utc)


def make_version(lake, version, created_at, sessions=1, point=True):
    run_id = publish.new_run_id()
    folder = publish.data_dir(lake, DAY, version, run_id)
    os.makedirs(folder)
    pq.write_table(pa.table({"user_id": [f"u{i}" for i in range(sessions)],
                             "session_start": pa.array([T0] * sessions, pa.timestamp("us", tz="UTC"))}),
                   f"{folder}/part-0.parquet")
    marker = {"event_date": DAY, "version": version, "data": publish.data_dir_name(run_id),
              "files": [f"{publish.data_dir_name(run_id)}/part-0.parquet"], "sessions": sessions,
              "receipts": [], "created_at": created_at.isoformat().replace("+00:00", "Z")}
    publish.complete_version(lake, marker)
    if point:
        publish.switch_pointer(lake, DAY)
    return marker


def age_files(folder, when):
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            os.utime(os.path.join(root, name), (when.timestamp(), when.timestamp()))
    os.utime(folder, (when.timestamp(), when.timestamp()))


def test_gc_keeps_current_newest_and_recent_removes_the_rest(tmp_path, capsys):
    lake = str(tmp_path / "lake")
    v = [f"20260310T0{i}0000000Z" for i in range(1, 5)]
    make_version(lake, v[0], T0 + timedelta(hours=1))
    make_version(lake, v[1], T0 + timedelta(hours=2))
    make_version(lake, v[2], T0 + timedelta(hours=3))
    make_version(lake, v[3], T0 + timedelta(hours=4), sessions=3)
    # A run killed mid-write (no marker) and the losing data folder of two concurrent runs.
    killed = publish.data_dir(lake, DAY, "20260310T050000000Z", publish.new_run_id())
    os.makedirs(killed)
    loser = publish.data_dir(lake, DAY, v[3], publish.new_run_id())
    os.makedirs(loser)
    age_files(layout.dedup_version_dir(lake, DAY, "20260310T050000000Z"), T0)
    age_files(loser, T0)

    # now = 4h30 after T0 with a 2h retention: v0 superseded at 2h (2h30 ago) and v1 at 3h (1h30
    # ago): only v0 goes. The old leftovers go; the current v3 stays.
    removed = publish.gc(lake, timedelta(hours=2), now=T0 + timedelta(hours=4, minutes=30))
    assert {(r.what, r.version) for r in removed} == {
        ("version", v[0]), ("incomplete", "20260310T050000000Z"), ("orphan-data", v[3])}
    assert publish.list_version_dirs(lake, DAY) == v[1:]
    assert not os.path.exists(loser)
    assert reader.read_sessions(lake, DAY).num_rows == 3

    # Much later everything superseded goes, but never the current version.
    removed = publish.gc(lake, timedelta(hours=2), now=T0 + timedelta(days=30))
    assert {r.version for r in removed} == {v[1], v[2]}
    assert publish.list_version_dirs(lake, DAY) == [v[3]]
    assert reader.read_sessions(lake, DAY).num_rows == 3
    assert reader.resolve(lake, DAY, as_of=v[3])["version"] == v[3]


def test_gc_never_removes_the_pointed_version_even_if_a_newer_one_exists(tmp_path):
    lake = str(tmp_path / "lake")
    old = make_version(lake, "20260310T010000000Z", T0)
    make_version(lake, "20260310T020000000Z", T0 + timedelta(hours=1), point=False)
    make_version(lake, "20260310T030000000Z", T0 + timedelta(hours=2), point=False)
    assert publish.read_pointer(lake, DAY)["version"] == old["version"]
    removed = publish.gc(lake, timedelta(0), now=T0 + timedelta(days=1))
    assert {r.version for r in removed} == {"20260310T020000000Z"}
    assert reader.read_sessions(lake, DAY).num_rows == 1


def test_gc_leaves_young_leftovers_of_a_run_in_progress(tmp_path):
    lake = str(tmp_path / "lake")
    make_version(lake, "20260310T010000000Z", T0)
    running = publish.data_dir(lake, DAY, "20260310T020000000Z", publish.new_run_id())
    os.makedirs(running)
    with open(os.path.join(running, "part-0.parquet"), "wb") as out:
        out.write(b"being written")
    assert publish.gc(lake, timedelta(hours=1)) == []  # mtime is now: a live run
    assert os.path.exists(running)


def test_gc_command_dry_run_lists_without_removing(tmp_path, capsys):
    lake = str(tmp_path / "lake")
    make_version(lake, "20260310T010000000Z", T0)
    make_version(lake, "20260310T020000000Z", T0 + timedelta(hours=1))
    assert cli.main(["gc", "--lake", lake, "--retention", "1h", "--dry-run"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["version"], r["what"], r["dry_run"]) for r in lines] == [("20260310T010000000Z", "version", True)]
    assert len(publish.list_version_dirs(lake, DAY)) == 2
    assert cli.main(["gc", "--lake", lake, "--retention", "1h", "--event-date", DAY]) == 0
    assert publish.list_version_dirs(lake, DAY) == ["20260310T020000000Z"]
