"""tidemark.iceberg.publish's commit leans on pyiceberg internals (a Transaction subclass reading `_updates`,
an `_OverwriteFiles` subclass replacing `_existing_manifests`). These tests fail on a pyiceberg
whose internals changed shape, and show that an unsupported version fails the commit loudly."""

from __future__ import annotations

import configparser
import inspect
import os
import re

import pytest

from tests import icebergkit
from tidemark.iceberg import publish
from tidemark.iceberg import table as iceberg
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_supported_range_is_the_one_setup_cfg_pins():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    spec = next(
        line.strip()
        for line in config["options"]["install_requires"].splitlines()
        if line.strip().startswith("pyiceberg")
    )
    low, high = re.search(r">=([\d.]+),<([\d.]+)", spec).groups()
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert (as_tuple(low), as_tuple(high)) == publish.PYICEBERG_SUPPORTED, spec


def test_the_installed_pyiceberg_is_supported():
    import pyiceberg

    publish.require_supported_pyiceberg()
    publish.require_supported_pyiceberg(pyiceberg.__version__)


@pytest.mark.parametrize("version", ["0.13.0", "0.13.0rc1", "0.11.1", "1.0.0"])
def test_an_unsupported_pyiceberg_is_refused_by_name(version):
    with pytest.raises(publish.UnsupportedPyiceberg, match=re.escape(f"pyiceberg {version} is installed")):
        publish.require_supported_pyiceberg(version)


def test_a_commit_on_an_unsupported_pyiceberg_fails_before_it_starts(tmp_path, monkeypatch):
    import pyiceberg

    lake = Lake.open(tmp_path / "lake")
    marker = icebergkit.prepared_run(lake, "2026-03-10", [icebergkit.receipt(1)])
    monkeypatch.setattr(pyiceberg, "__version__", "0.13.0")
    monkeypatch.setattr(publish, "_TRANSACTION", None)
    monkeypatch.setattr(publish, "_OVERWRITE", None)
    with pytest.raises(publish.UnsupportedPyiceberg, match="pyiceberg 0.13.0 is installed"):
        publish.commit(lake, marker)
    assert publish.current_version(lake, "2026-03-10") is None


# -- the internals' shape --------------------------------------------------------------------------


def _parameters(function) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(function).parameters)


def test_overwrite_files_has_the_shape_the_subclass_relies_on():
    from pyiceberg.manifest import ManifestFile
    from pyiceberg.table.update import UpdateTableMetadata
    from pyiceberg.table.update.snapshot import UpdateSnapshot, _OverwriteFiles, _SnapshotProducer

    # What the public API returns for an overwrite is the class the subclass extends.
    returns = inspect.signature(UpdateSnapshot.overwrite).return_annotation
    assert returns in (_OverwriteFiles, "_OverwriteFiles"), returns
    assert issubclass(_OverwriteFiles, _SnapshotProducer)
    assert issubclass(_OverwriteFiles, UpdateTableMetadata)
    # The methods replaced: _manifests (no argument but self, its result what _commit writes into
    # the manifest list) and _summary (called by _commit with the snapshot properties).
    assert list(_parameters(_SnapshotProducer._manifests)) == ["self"]
    assert re.search(r"\bself\._manifests\(\)", inspect.getsource(_SnapshotProducer._commit))
    assert re.search(r"\bself\._summary\(self\.snapshot_properties\)", inspect.getsource(_SnapshotProducer._commit))
    # The state and helpers the replacement reads and calls.
    producer_source = inspect.getsource(_SnapshotProducer)
    for name in (
        "_added_data_files",
        "_deleted_data_files",
        "_snapshot_id",
        "_target_branch",
        "_operation",
        "_parent_snapshot_id",
        "_io",
    ):
        assert f"self.{name} =" in producer_source or f"self.{name}:" in producer_source, name
    assert list(_parameters(_SnapshotProducer.new_manifest_writer)) == ["self", "spec"]
    from pyiceberg.manifest import ManifestWriter

    for name in ("existing", "delete", "add_entry"):
        assert list(_parameters(getattr(ManifestWriter, name))) == ["self", "entry"], name
    # The constructor keywords publish passes.
    init = _parameters(_OverwriteFiles.__init__)
    for name in ("operation", "transaction", "io", "snapshot_properties"):
        assert name in init, name
        assert init[name].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        ), name
    # The calls publish makes, and the context manager that commits on exit.
    assert list(_parameters(_OverwriteFiles.delete_data_file)) == ["self", "data_file"]
    assert list(_parameters(_OverwriteFiles.append_data_file)) == ["self", "data_file"]
    assert "self.commit()" in inspect.getsource(UpdateTableMetadata.__exit__)
    # The manifest counts the filter reads.
    assert isinstance(ManifestFile.added_files_count, property)
    assert isinstance(ManifestFile.existing_files_count, property)


def test_transaction_has_the_shape_the_cached_subclass_relies_on(tmp_path):
    from pyiceberg.table import Transaction

    assert isinstance(Transaction.__dict__.get("table_metadata"), property)
    tbl = iceberg.load(Lake.open(tmp_path / "lake"), create=True)
    tx = publish._transaction_class()(tbl)
    assert isinstance(tx._updates, tuple)
    assert len(tx._updates) == 0
    before = tx.table_metadata
    tx.set_properties(**{"tidemark.test": "1"})
    assert len(tx._updates) > 0
    after = tx.table_metadata
    assert after is not before
    assert after.properties["tidemark.test"] == "1"
    assert tx.table_metadata is after  # cached while no update is staged


def _manifest_counts(lake: Lake, commits: int) -> list[int]:
    counts = []
    for n in range(commits):
        icebergkit.publish_run(lake, "2026-03-10", [icebergkit.receipt(1, m) for m in range(n + 1)])
        tbl = iceberg.load(lake)
        counts.append(len(tbl.current_snapshot().manifests(tbl.io)))
    return counts


def test_the_overwrite_subclass_keeps_the_manifest_list_from_growing(tmp_path, monkeypatch):
    """What the private subclass is for: repeated overwrites of one date keep a bounded manifest
    list. pyiceberg's own overwrite (the public API) carries every all-deleted manifest forward."""
    ours = _manifest_counts(Lake.open(tmp_path / "ours"), 6)
    assert max(ours[2:]) == min(ours[2:]) <= 2, ours
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    monkeypatch.setattr(publish, "_OVERWRITE", _OverwriteFiles)
    theirs = _manifest_counts(Lake.open(tmp_path / "theirs"), 6)
    assert theirs[-1] > theirs[2], f"pyiceberg's overwrite no longer grows the manifest list: {theirs}"
