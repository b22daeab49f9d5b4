"""The lake's storage: the `Lake` handle and the small file operations under it.

The `Lake` handle (lake) is opened once from a URI, owns its filesystem and is the only place that
knows folder names; the small file operations under it are in storage; a published version's
record is a value (version_record).
"""
