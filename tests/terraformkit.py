"""The Terraform configuration as python-hcl2 parses it, merged over every .tf file, and lookups in
it: what tests/test_terraform.py and tests/test_bounded_landing_config.py read (no terraform binary
or provider can be downloaded here)."""

from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERRAFORM = os.path.join(ROOT, "terraform")


def load_file(path: str) -> dict:
    import hcl2

    with open(path) as handle:
        return hcl2.load(
            handle,
            serialization_options=hcl2.utils.SerializationOptions(strip_string_quotes=True, explicit_blocks=False),
        )


def load() -> dict:
    """Every .tf file merged: {"variable": {name: body}, "resource": {(type, name): body}, ...}."""
    merged: dict = {"variable": {}, "resource": {}, "data": {}, "locals": {}, "output": {}}
    files = sorted(glob.glob(os.path.join(TERRAFORM, "*.tf")))
    assert files, "no Terraform files in terraform/"
    for path in files:
        doc = load_file(path)
        for block in doc.get("variable", []):
            merged["variable"].update(block)
        for block in doc.get("output", []):
            merged["output"].update(block)
        for block in doc.get("locals", []):
            merged["locals"].update(block)
        for kind in ("resource", "data"):
            for block in doc.get(kind, []):
                for rtype, instances in block.items():
                    for rname, body in instances.items():
                        assert (rtype, rname) not in merged[kind], f"{kind} {rtype}.{rname} declared twice"
                        merged[kind][(rtype, rname)] = body
    return merged


def resource(tf, rtype: str, rname: str) -> dict:
    assert (rtype, rname) in tf["resource"], f"resource {rtype}.{rname} is missing"
    return tf["resource"][(rtype, rname)]


def one(blocks):
    """A nested block as python-hcl2 gives it (a list of one dict) -> the dict."""
    assert isinstance(blocks, list), blocks
    assert len(blocks) == 1, blocks
    return blocks[0]
