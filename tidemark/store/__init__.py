"""The lake's storage: the `Lake` handle (lake), opened once from a URI, owning its filesystem
and the only place that knows folder names, and the small file operations under it (storage).
"""
