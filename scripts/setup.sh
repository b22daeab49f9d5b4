#!/usr/bin/env bash
# Set up tidemark on a fresh machine: system packages it needs, .venv/ with pinned versions
# (constraints.txt), and .venv-tools/ for checkov (whose pins conflict with Airflow's).
# Safe to rerun: it only reinstalls when constraints.txt, constraints-tools.txt or setup.cfg change.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

if ! command -v java >/dev/null 2>&1; then
  say "installing Java 17 (Spark needs a JVM)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  say "installing Prometheus (the local stack's alerts; promtool checks the rules)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  say "installing PostgreSQL (the local stack's Airflow metadata database; SQLite without it)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null) \
    || say "could not install PostgreSQL: the local stack keeps Airflow's metadata in SQLite"
fi
if ! command -v gcloud >/dev/null 2>&1 || [ ! -d /usr/lib/google-cloud-sdk/platform/pubsub-emulator ]; then
  say "warning: the Pub/Sub emulator (google-cloud-cli-pubsub-emulator) is not installed;"
  say "         tests and commands that need it will say so and be skipped"
fi

stamp() { cat constraints.txt constraints-tools.txt setup.cfg | sha256sum | cut -d' ' -f1; }
want=$(stamp)
if [ -x .venv/bin/tidemark ] && [ -f .venv/.tidemark-stamp ] && [ "$(cat .venv/.tidemark-stamp)" = "$want" ]; then
  say ".venv is up to date"
else
  say "creating .venv (pyspark, Airflow, Pub/Sub client, functions-framework; a few minutes the first time)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip setuptools wheel
  .venv/bin/pip install -q -c constraints.txt -e ".[airflow,function,dev]"
  say "creating .venv-tools (checkov, kept apart from Airflow's pins)"
  [ -x .venv-tools/bin/python ] || "$PY" -m venv .venv-tools
  .venv-tools/bin/pip install -q -c constraints-tools.txt checkov
  echo "$want" > .venv/.tidemark-stamp
fi
# Local Spark sessions start ~2 s sooner from a class archive of Spark's JVM (tidemark/base/class_archive.py):
# built once per Java and pyspark (~35 s), "up to date" after. Without it everything runs, only slower.
say "JVM class archive for local Spark:"
.venv/bin/tidemark class-archive 2>.venv/class-archive.log \
  || say "warning: no class archive built (.venv/class-archive.log says why); local Spark starts without one"
say "ready: $ROOT/.venv/bin/tidemark"
