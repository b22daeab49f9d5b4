"""tidemark function-bundle: assemble the Cloud Function's deployable source folder.

A deployed function sees only its source folder (plus what requirements.txt installs), so the
bundle carries the tidemark modules the function imports, at the same import paths as in the repo
(the list: tidemark/ops/function_bundle.py). The folder is built next to --out and swapped in, then
checked: a clean Python with only the bundle on its path imports main and must load no first-party
module from outside the bundle. Terraform archives --out.
"""

from __future__ import annotations

import argparse
import json

from tidemark.commands.options import Subparsers
from tidemark.ops import function_bundle


def register(subparsers: Subparsers) -> None:
    """Add `tidemark function-bundle` to the subcommands."""
    p = subparsers.add_parser(
        "function-bundle", help="assemble the Cloud Function's deployable folder", description=__doc__
    )
    p.add_argument("--out", default="build/cloud_function", help="output folder (replaced)")
    p.add_argument(
        "--no-check", action="store_true", help="skip the check that the bundle imports nothing from outside itself"
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark function-bundle`; its exit status."""
    out = function_bundle.build(args.out)
    result = {"out": out, "files": [dest for _, dest in function_bundle.FILES]}
    if not args.no_check:
        result["checked_modules"] = sorted(function_bundle.check(out))
    print(json.dumps(result))
    return 0
