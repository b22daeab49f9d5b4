"""tidemark class-archive: build the JVM class archive that local Spark sessions start from.

A local Spark driver maps the classes of this archive instead of loading them from Spark's jars:
~2 s less to start a session and ~1.5 s less for its first queries (BENCHMARKS.md section 1), on
every start of `tidemark stream`, `tidemark dedup`, the other commands that run Spark locally and
the local stack's Spark Connect server. scripts/setup.sh builds it; build it again after installing
another Java or pyspark (a stale archive is ignored by the JVM, so nothing breaks, only the saving
goes). Takes ~35 s. TIDEMARK_JVM_CLASS_ARCHIVE=0 turns the archive off
(tidemark/base/class_archive.py says how it works).
"""

from __future__ import annotations

import argparse
import os

from tidemark.commands.console import wide_console
from tidemark.commands.options import Subparsers


def register(subparsers: Subparsers) -> None:
    """Add `tidemark class-archive` to the subcommands."""
    p = subparsers.add_parser(
        "class-archive", help="build the JVM class archive local Spark starts from", description=__doc__
    )
    p.add_argument("--rebuild", action="store_true", help="build it even when this Java and Spark have one")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run `tidemark class-archive`; its exit status."""
    from tidemark.base import class_archive

    console = wide_console()
    path = class_archive.archive_path()
    if path is None:
        console.print(f"no class archive: {class_archive.ENV} turns it off, or no java or Spark jars were found")
        return 0
    if os.path.isfile(path) and not args.rebuild:
        console.print(f"class archive up to date: {path}")
        return 0
    from streaming_job.class_archive import build  # pyspark: imported only to build

    with console.status("building the class archive (the stream's warm-up in a JVM of its own)"):
        built = build(path)
    console.print(f"class archive built in {built.seconds} s: {built.path} ({built.size // 2**20} MiB)")
    for old in built.removed:
        console.print(f"removed a stale one: {old}")
    return 0
