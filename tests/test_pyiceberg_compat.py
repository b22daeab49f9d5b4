"""tidemark.iceberg.compat's overrides of pyiceberg internals, one test group per override.

Each group checks that the private class or method the override builds on still exists with the
shape it relies on, and that the base behaviour the override changes is still pyiceberg's (when
pyiceberg fixes it, the override is no longer needed: the test says so). The version check: an
unsupported pyiceberg warns at import and fails a commit loudly before it starts.
"""

from __future__ import annotations

import configparser
import importlib
import inspect
import os
import re
from collections.abc import Callable
from datetime import date

import pyiceberg
import pytest
from pyiceberg.manifest import ManifestFile, ManifestWriter
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update import UpdateTableMetadata
from pyiceberg.table.update.snapshot import UpdateSnapshot, _OverwriteFiles, _SnapshotProducer

from tests import icebergkit
from tidemark.iceberg import commits, compat, maintenance, table_versions
from tidemark.iceberg import table as iceberg
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAY = date(2026, 3, 10)


def _parameters(function: Callable[..., object]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _table(tmp_path: object, commits_of_day: int = 1) -> tuple[Lake, Table]:
    lake = Lake.open(os.path.join(str(tmp_path), "lake"))
    for n in range(commits_of_day):
        icebergkit.publish_run(lake, DAY, [icebergkit.receipt(1, m) for m in range(n + 1)])
    tbl = iceberg.load(lake, create=True)
    return lake, tbl


# -- the version check -----------------------------------------------------------------------------


def test_the_supported_range_is_the_one_setup_cfg_pins():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    spec = next(
        line.strip()
        for line in config["options"]["install_requires"].splitlines()
        if line.strip().startswith("pyiceberg")
    )
    found = re.search(r">=([\d.]+),<([\d.]+)", spec)
    assert found is not None, spec

    def as_tuple(version: str) -> tuple[int, ...]:
        return tuple(int(x) for x in version.split("."))

    assert (as_tuple(found.group(1)), as_tuple(found.group(2))) == compat.PYICEBERG_SUPPORTED, spec


def test_the_installed_pyiceberg_is_supported():
    compat.require_supported_pyiceberg()
    compat.require_supported_pyiceberg(pyiceberg.__version__)


@pytest.mark.parametrize("version", ["0.13.0", "0.13.0rc1", "0.11.1", "1.0.0"])
def test_an_unsupported_pyiceberg_is_refused_by_name(version):
    with pytest.raises(compat.UnsupportedPyiceberg, match=re.escape(f"pyiceberg {version} is installed")):
        compat.require_supported_pyiceberg(version)


def test_an_unsupported_pyiceberg_warns_at_import(monkeypatch):
    monkeypatch.setattr(pyiceberg, "__version__", "0.13.0")
    try:
        with pytest.warns(UserWarning, match="pyiceberg 0.13.0 is installed") as caught:
            importlib.reload(compat)
        assert [w.category.__name__ for w in caught] == ["UnsupportedPyicebergWarning"]
    finally:
        monkeypatch.undo()
        importlib.reload(compat)  # the classes as the other modules' tests expect them


def test_a_commit_on_an_unsupported_pyiceberg_fails_before_it_starts(tmp_path, monkeypatch):
    lake = Lake.open(tmp_path / "lake")
    marker = icebergkit.prepared_run(lake, DAY, [icebergkit.receipt(1)])
    monkeypatch.setattr(pyiceberg, "__version__", "0.13.0")
    with pytest.raises(compat.UnsupportedPyiceberg, match="pyiceberg 0.13.0 is installed"):
        commits.commit(lake, marker)
    assert table_versions.current_version(lake, DAY) is None


# -- CachedTransaction.table_metadata --------------------------------------------------------------


def test_transaction_has_the_shape_the_cached_subclass_relies_on(tmp_path):
    # table_metadata is a property of Transaction itself, its constructor takes (table, autocommit),
    # and _updates is the tuple of staged updates, growing with each one staged.
    assert isinstance(Transaction.__dict__.get("table_metadata"), property)
    assert _parameters(Transaction.__init__) == ["self", "table", "autocommit"]
    _, tbl = _table(tmp_path, 0)
    tx = Transaction(tbl)
    assert tx._updates == ()
    tx.set_properties(**{"tidemark.test": "1"})
    assert isinstance(tx._updates, tuple)
    assert len(tx._updates) > 0


def test_pyiceberg_still_recomputes_the_metadata_on_each_access(tmp_path):
    """The base behaviour the override changes: a fresh copy per access (if pyiceberg caches it
    itself one day, CachedTransaction can go)."""
    _, tbl = _table(tmp_path, 0)
    tx = Transaction(tbl)
    tx.set_properties(**{"tidemark.test": "1"})
    assert tx.table_metadata is not tx.table_metadata
    assert tx.table_metadata.properties["tidemark.test"] == "1"


def test_the_cached_transaction_computes_once_per_staged_update(tmp_path):
    _, tbl = _table(tmp_path, 0)
    tx = compat.CachedTransaction(tbl)
    before = tx.table_metadata
    assert tx.table_metadata is before  # cached while no update is staged
    tx.set_properties(**{"tidemark.test": "1"})
    after = tx.table_metadata
    assert after is not before
    assert after.properties["tidemark.test"] == "1"
    assert tx.table_metadata is after


# -- Overwrite._manifests --------------------------------------------------------------------------


def test_overwrite_files_has_the_shape_the_manifests_override_relies_on():
    # What the public API returns for an overwrite is the class the subclass extends.
    returns = inspect.signature(UpdateSnapshot.overwrite).return_annotation
    assert returns in (_OverwriteFiles, "_OverwriteFiles"), returns
    assert issubclass(_OverwriteFiles, _SnapshotProducer)
    assert issubclass(_OverwriteFiles, UpdateTableMetadata)
    # _manifests takes no argument but self; its result is what _commit writes into the manifest list.
    assert _parameters(_SnapshotProducer._manifests) == ["self"]
    assert re.search(r"\bself\._manifests\(\)", inspect.getsource(_SnapshotProducer._commit))
    # The state and helpers the replacement reads and calls.
    producer_source = inspect.getsource(_SnapshotProducer)
    for name in ("_added_data_files", "_deleted_data_files", "_snapshot_id", "_target_branch", "_io"):
        assert f"self.{name} =" in producer_source or f"self.{name}:" in producer_source, name
    assert _parameters(_SnapshotProducer.new_manifest_writer) == ["self", "spec"]
    for name in ("existing", "delete", "add_entry"):
        assert _parameters(getattr(ManifestWriter, name)) == ["self", "entry"], name
    # The constructor keywords the subclass passes on, and the calls the commits make.
    init = inspect.signature(_OverwriteFiles.__init__).parameters
    for name in ("operation", "transaction", "io", "snapshot_properties"):
        assert name in init, name
        assert init[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY), name
    assert _parameters(_OverwriteFiles.delete_data_file) == ["self", "data_file"]
    assert _parameters(_OverwriteFiles.append_data_file) == ["self", "data_file"]
    assert "self.commit()" in inspect.getsource(UpdateTableMetadata.__exit__)
    # The manifest counts the filter reads.
    assert isinstance(ManifestFile.added_files_count, property)
    assert isinstance(ManifestFile.existing_files_count, property)


def _manifest_counts(tmp_path: object, commits_of_day: int) -> list[int]:
    lake = Lake.open(os.path.join(str(tmp_path), "lake"))
    counts = []
    for n in range(commits_of_day):
        icebergkit.publish_run(lake, DAY, [icebergkit.receipt(1, m) for m in range(n + 1)])
        tbl = iceberg.load(lake, create=True)
        snapshot = tbl.current_snapshot()
        assert snapshot is not None
        counts.append(len(snapshot.manifests(tbl.io)))
    return counts


def test_the_overwrite_keeps_the_manifest_list_from_growing(tmp_path):
    counts = _manifest_counts(tmp_path / "ours", 6)
    assert max(counts[2:]) == min(counts[2:]) <= 2, counts


def test_pyiceberg_s_own_overwrite_still_grows_the_manifest_list(tmp_path, monkeypatch):
    """The base behaviour the override changes: pyiceberg's overwrite carries every all-deleted
    manifest forward (if it stops, the manifest merging may still be wanted, but not for this)."""
    monkeypatch.setattr(compat, "Overwrite", _OverwriteFiles)
    counts = _manifest_counts(tmp_path / "theirs", 6)
    assert counts[-1] > counts[2], f"pyiceberg's overwrite no longer grows the manifest list: {counts}"


# -- Overwrite._summary ----------------------------------------------------------------------------


def test_the_summary_override_has_the_shape_it_relies_on():
    assert _parameters(_SnapshotProducer._summary) == ["self", "snapshot_properties"]
    assert re.search(r"\bself\._summary\(self\.snapshot_properties\)", inspect.getsource(_SnapshotProducer._commit))
    assert "_parent_snapshot_id" in inspect.getsource(_SnapshotProducer.__init__)


def test_pyiceberg_s_summary_still_refuses_a_replace(tmp_path):
    """The base behaviour the override changes: no summary for a REPLACE snapshot."""
    _, tbl = _table(tmp_path)
    producer = _OverwriteFiles(
        operation=Operation.REPLACE, transaction=Transaction(tbl), io=tbl.io, snapshot_properties={}
    )
    with pytest.raises(ValueError, match="Operation not implemented"):
        producer._summary({})


def test_a_replace_carries_the_parent_s_totals(tmp_path):
    lake, tbl = _table(tmp_path, 2)
    snapshot = tbl.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    parent_totals = {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith("total-")}
    producer = compat.Overwrite(
        operation=Operation.REPLACE, transaction=compat.CachedTransaction(tbl), io=tbl.io, snapshot_properties={}
    )
    summary = producer._summary({"tidemark.maintenance": "x"})
    assert summary.operation == Operation.REPLACE
    assert {k: v for k, v in summary.additional_properties.items() if k.startswith("total-")} == parent_totals
    assert summary.additional_properties["tidemark.maintenance"] == "x"
    # and the merge of a half month with no file added is such a snapshot
    assert maintenance.buckets_to_merge(iceberg.load(lake)) == set()
