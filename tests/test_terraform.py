"""The Terraform configuration agrees with the code, and checkov finds nothing unexplained.

No terraform binary or provider can be downloaded here, so this is what stands in for
`terraform validate`: the HCL parses (python-hcl2), every var./local./resource reference is
declared, and every name the code and the infrastructure share comes from one place
(tidemark/base/names.py DEFAULTS = the variables' defaults), as do the function's entry point and the
environment variables it reads.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import terraformkit
from tests.terraformkit import one, resource
from tidemark.base import names
from tidemark.notices import availability_notice, corrected_notice
from tidemark.store.lake import Lake

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERRAFORM = os.path.join(ROOT, "terraform")
CHECKOV = os.environ.get("TIDEMARK_CHECKOV") or os.path.join(ROOT, ".venv-tools", "bin", "checkov")

# DEFAULTS entry -> the Terraform variable holding it. PROJECT is the emulator's project id
# ("tidemark-local"); Terraform's `project` is a real one and has no default on purpose.
NAME_VARIABLES = {
    "DATASET": "dataset",
    "EVENTS_TOPIC": "events_topic",
    "AVAILABILITY_TOPIC": "availability_topic",
    "DEAD_LETTER_TOPIC": "dead_letter_topic",
    "FUNCTION_SUBSCRIPTION": "function_subscription",
    "LATE_DATA_SUBSCRIPTION": "late_data_subscription",
    "CORRECTED_TOPIC": "corrected_topic",
    "CORRECTED_SUBSCRIPTION": "corrected_subscription",
    "FUNCTION_NAME": "function_name",
    "DAG_ID": "dag_id",
    "ASSET_URI_PREFIX": "asset_uri_prefix",
}
NOT_IN_TERRAFORM = {"PROJECT"}

# Where each name is used: (resource type, resource name, attribute).
NAME_USES = {
    "events_topic": ("google_pubsub_topic", "events", "name"),
    "availability_topic": ("google_pubsub_topic", "availability", "name"),
    "dead_letter_topic": ("google_pubsub_topic", "dead_letter", "name"),
    "function_subscription": ("google_pubsub_subscription", "to_function", "name"),
    "late_data_subscription": ("google_pubsub_subscription", "late_data", "name"),
    "corrected_topic": ("google_pubsub_topic", "corrected", "name"),
    "corrected_subscription": ("google_pubsub_subscription", "corrected_changed", "name"),
    "function_name": ("google_cloudfunctions2_function", "notice_to_dag", "name"),
}


@pytest.fixture(scope="module")
def tf() -> dict:
    return terraformkit.load()


def _raw_text() -> str:
    return "\n".join(open(p).read() for p in sorted(glob.glob(os.path.join(TERRAFORM, "*.tf"))))


# -- names shared with the code ------------------------------------------------------------------


def test_every_shared_name_is_a_variable_whose_default_matches_names_py(tf):
    assert set(NAME_VARIABLES) | NOT_IN_TERRAFORM == set(names.DEFAULTS), (
        "a names.DEFAULTS entry is neither mapped to a Terraform variable nor excluded: "
        f"{sorted(set(names.DEFAULTS) - set(NAME_VARIABLES) - NOT_IN_TERRAFORM)}"
    )
    drift = {
        key: (tf["variable"].get(var, {}).get("default"), names.DEFAULTS[key])
        for key, var in NAME_VARIABLES.items()
        if tf["variable"].get(var, {}).get("default") != names.DEFAULTS[key]
    }
    assert not drift, f"Terraform defaults drifted from tidemark/base/names.py (terraform, code): {drift}"


@pytest.mark.parametrize("variable", sorted(NAME_USES))
def test_resources_take_their_names_from_the_variables(tf, variable):
    rtype, rname, attribute = NAME_USES[variable]
    assert resource(tf, rtype, rname)[attribute] == f"${{var.{variable}}}"


def test_dedup_dag_id_and_dataset_reach_the_function_and_airflow(tf):
    env = one(resource(tf, "google_cloudfunctions2_function", "notice_to_dag")["service_config"])[
        "environment_variables"
    ]
    assert env["TIDEMARK_DAG_ID"] == "${var.dag_id}"
    assert env["TIDEMARK_DATASET"] == "${var.dataset}"
    software = one(one(resource(tf, "google_composer_environment", "airflow")["config"])["software_config"])
    assert software["env_variables"]["TIDEMARK_DAG_ID"] == "${var.dag_id}"
    assert software["env_variables"]["TIDEMARK_ASSET_URI_PREFIX"] == "${var.asset_uri_prefix}"


def test_push_subscription_dead_letters_after_bounded_attempts(tf):
    sub = resource(tf, "google_pubsub_subscription", "to_function")
    policy = one(sub["dead_letter_policy"])
    assert policy["dead_letter_topic"] == "${google_pubsub_topic.dead_letter.id}"
    default = tf["variable"]["max_delivery_attempts"]["default"]
    assert 5 <= default <= 100, "Pub/Sub accepts 5 to 100 delivery attempts"
    assert one(sub["push_config"])["push_endpoint"] == "${google_cloudfunctions2_function.notice_to_dag.url}"
    # The dead-letter topic has a subscription, or dead letters would be lost.
    hold = resource(tf, "google_pubsub_subscription", "dead_letter_hold")
    assert hold["topic"] == "${google_pubsub_topic.dead_letter.id}"


def test_late_data_filter_uses_attributes_that_notices_carry(tf):
    filter_text = resource(tf, "google_pubsub_subscription", "late_data")["filter"]
    used = set(re.findall(r"attributes\.([A-Za-z_]+)", filter_text))
    assert "late" in used
    assert used <= set(availability_notice.ATTRIBUTES), (
        f"filter uses attributes notices do not carry: {used - set(availability_notice.ATTRIBUTES)}"
    )
    # The value notices give `late` (strings "true"/"false", tidemark/notices/availability_notice.py).
    assert (
        availability_notice.attributes(
            {
                "dataset": "d",
                "event_date": "2026-03-07",
                "late": True,
                "schema_version": 1,
                "kind": "partition",
                "notice_id": "n",
            }
        )["late"]
        == "true"
    )
    assert re.search(r'attributes\.late = \\?"true\\?"', filter_text)


def test_events_land_as_text_in_the_landing_bucket_the_stream_reads(tf):
    sub = resource(tf, "google_pubsub_subscription", "events_to_landing")
    config = one(sub["cloud_storage_config"])
    assert config["bucket"] == "${google_storage_bucket.landing.name}"
    assert "avro_config" not in config, "the landing contract is JSON lines (text format), not Avro"
    assert config["filename_prefix"] == "${var.landing_prefix}"
    # The input contract ignores files and folders starting with '_' or '.'.
    prefix = tf["variable"]["landing_prefix"]["default"]
    assert not prefix.startswith(("_", "."))
    assert prefix.endswith("/")
    assert tf["locals"]["landing_uri"].endswith("/${var.landing_prefix}")


# -- the Cloud Function ----------------------------------------------------------------------------


def _cloud_event_functions() -> set[str]:
    tree = ast.parse(Path(os.path.join(ROOT, "cloud_function", "main.py")).read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if ast.unparse(decorator) in ("functions_framework.cloud_event", "cloud_event"):
                    found.add(node.name)
    return found


def test_function_entry_point_is_the_cloud_event_function_in_main_py(tf):
    entry = tf["variable"]["function_entry_point"]["default"]
    assert entry in _cloud_event_functions(), (
        f"{entry!r} is not a @functions_framework.cloud_event function of cloud_function/main.py "
        f"(found {sorted(_cloud_event_functions())})"
    )
    build = one(resource(tf, "google_cloudfunctions2_function", "notice_to_dag")["build_config"])
    assert build["entry_point"] == "${var.function_entry_point}"


def _names_the_function_reads() -> set[str]:
    """Every string literal of the function's code (its bundle: cloud_function/ and the tidemark
    modules it carries, such as the REST client tidemark/orchestration/airflow_api.py), plus TIDEMARK_<NAME>."""
    from tidemark.ops.function_bundle import FILES

    literals = set()
    for path in [os.path.join(ROOT, source) for source, _ in FILES if source.endswith(".py")]:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.add(node.value)
    return literals | {f"TIDEMARK_{key}" for key in names.DEFAULTS}


def test_function_environment_is_what_the_function_reads(tf):
    service = one(resource(tf, "google_cloudfunctions2_function", "notice_to_dag")["service_config"])
    set_by_terraform = set(service["environment_variables"])
    secret_blocks = list(service.get("secret_environment_variables", []))
    for dynamic in service.get("dynamic", []):  # dynamic "secret_environment_variables" {content {...}}
        if "secret_environment_variables" in dynamic:
            secret_blocks += dynamic["secret_environment_variables"]["content"]
    set_by_terraform |= {block["key"] for block in secret_blocks}
    unread = set_by_terraform - _names_the_function_reads()
    assert not unread, f"Terraform sets variables the function never reads: {sorted(unread)}"
    assert {"AIRFLOW_BASE_URL", "AIRFLOW_AUTH_MODE", "AIRFLOW_PASSWORD"} <= set_by_terraform
    # The auth modes Terraform offers are ones the client accepts.
    from tidemark.orchestration.airflow_api import AUTH_MODES

    condition = one(tf["variable"]["airflow_auth_mode"]["validation"])["condition"]
    offered = set(re.findall(r'\\?"([a-z]+)\\?"', condition))
    assert offered
    assert offered <= set(AUTH_MODES)


def test_function_forwards_rejected_notices_to_the_declared_dead_letter_topic(tf):
    """Invalid notices are acked (so Pub/Sub never dead-letters them): without DEAD_LETTER_TOPIC the
    function only logs them. It is set, to the full name (projects/P/topics/T) of a topic Terraform
    declares under the shared name, which the function's account may publish to."""
    from cloud_function import dead_letter

    env = one(resource(tf, "google_cloudfunctions2_function", "notice_to_dag")["service_config"])[
        "environment_variables"
    ]
    assert "DEAD_LETTER_TOPIC" in env, "the function's environment lacks DEAD_LETTER_TOPIC"
    assert "DEAD_LETTER_TOPIC" in _names_the_function_reads()
    match = re.fullmatch(r"\$\{google_pubsub_topic\.([a-z0-9_]+)\.id\}", env["DEAD_LETTER_TOPIC"])
    assert match, (
        f"DEAD_LETTER_TOPIC must be a declared topic's id (projects/P/topics/T), not {env['DEAD_LETTER_TOPIC']!r}"
    )
    topic = resource(tf, "google_pubsub_topic", match.group(1))
    assert topic["name"] == "${var.dead_letter_topic}"
    assert tf["variable"]["dead_letter_topic"]["default"] == names.DEFAULTS["DEAD_LETTER_TOPIC"]
    # What the function accepts: a topic id as Terraform renders it passes dead_letter.topic().
    rendered = _substitute(env["DEAD_LETTER_TOPIC"], tf)
    assert dead_letter._TOPIC.match(rendered), rendered
    # The same topic the push subscription dead-letters to, and it has a subscription keeping it.
    assert (
        one(resource(tf, "google_pubsub_subscription", "to_function")["dead_letter_policy"])["dead_letter_topic"]
        == env["DEAD_LETTER_TOPIC"]
    )
    grants = [
        body
        for (rtype, _), body in tf["resource"].items()
        if rtype == "google_pubsub_topic_iam_member"
        and body["topic"] == env["DEAD_LETTER_TOPIC"]
        and body["member"] == "${google_service_account.function.member}"
    ]
    assert [g["role"] for g in grants] == ["roles/pubsub.publisher"], grants


def test_function_source_is_the_bundle_function_bundle_builds(tf):
    from tidemark.cli import build_parser

    parser = build_parser()
    bundle_default = parser.parse_args(["function-bundle"]).out
    source_dir = tf["variable"]["function_source_dir"]["default"]
    assert os.path.normpath(os.path.join(TERRAFORM, source_dir)) == os.path.normpath(os.path.join(ROOT, bundle_default))
    archive = tf["data"][("archive_file", "function")]
    assert archive["source_dir"] == "${path.module}/${var.function_source_dir}"


def test_nobody_but_the_push_account_may_invoke_the_function(tf):
    public = [
        (rtype, rname)
        for (rtype, rname), body in tf["resource"].items()
        if "_iam_" in rtype
        and any(
            m in ("allUsers", "allAuthenticatedUsers") for m in [body.get("member")] + list(body.get("members") or [])
        )
    ]
    assert not public, f"public IAM bindings: {public}"
    invoker = resource(tf, "google_cloud_run_service_iam_member", "push_invoker")
    assert invoker["member"] == "${google_service_account.push.member}"
    assert invoker["service"] == "${google_cloudfunctions2_function.notice_to_dag.name}"
    oidc = one(one(resource(tf, "google_pubsub_subscription", "to_function")["push_config"])["oidc_token"])
    assert oidc["service_account_email"] == "${google_service_account.push.email}"


# -- Spark -----------------------------------------------------------------------------------------


def _substitute(value: str, tf: dict | None = None) -> str:
    """Replace ${...} interpolations by a placeholder path, so argparse sees plain strings; a
    variable with a default by that default (argparse checks typed values such as durations)."""

    def value_of(match: re.Match) -> str:
        name = match.group(1)
        name = re.sub(r"^tostring\((.*)\)$", r"\1", name)  # a number passed as a string argument
        if name.startswith("google_pubsub_topic.") and name.endswith(".id"):  # the topic's full name
            return f"projects/placeholder-project/topics/{name.split('.')[1]}"
        default = (
            (tf or {}).get("variable", {}).get(name[len("var.") :], {}).get("default")
            if name.startswith("var.")
            else None
        )
        return "x" if default is None else str(default)

    return re.sub(r"\$\{([^}]*)\}", value_of, value)


def test_stream_job_arguments_are_a_valid_tidemark_stream_command(tf):
    from tidemark.cli import build_parser

    job = one(resource(tf, "google_dataproc_job", "stream")["pyspark_config"])
    args = [_substitute(a, tf) for a in job["args"]]
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as exc:  # argparse exits on an unknown or missing option
        raise AssertionError(f"`tidemark {' '.join(args)}` is not a valid command line") from exc
    assert parsed.command == "stream"
    assert not parsed.available_now
    raw = dict(zip(job["args"][1::2], job["args"][2::2], strict=False))
    assert raw["--notify-topic"] == "${google_pubsub_topic.availability.id}"
    assert raw["--lake"] == "${local.lake_uri}"
    assert raw["--landing"] == "${local.landing_uri}"
    assert job["properties"]["spark.sql.session.timeZone"] == "UTC"
    assert job["main_python_file_uri"].endswith("${google_storage_bucket_object.submit_py.name}")
    submit = resource(tf, "google_storage_bucket_object", "submit_py")
    assert submit["source"] == "${path.module}/../streaming_job/submit.py"
    assert os.path.exists(os.path.join(ROOT, "streaming_job", "submit.py"))


def test_session_rules_come_from_the_lake_not_from_terraform(tf):
    """One place for the rules: the lake's rules record. The stream job passes no rule option (it
    takes the lake's, like the dedup the DAG runs), and no variable holds a rule that could drift."""
    job = one(resource(tf, "google_dataproc_job", "stream")["pyspark_config"])
    rule_options = {"--gap", "--allowed-lateness", "--watermark-delay", "--migrate-rules"}
    assert not rule_options & set(job["args"]), job["args"]
    assert not {"session_gap", "allowed_lateness", "watermark_delay"} & set(tf["variable"])
    assert "must agree" not in _raw_text()
    # The documented way to change them on the cluster is a valid command.
    from tidemark.cli import build_parser

    example = tf["output"]["rules_migrate_example"]["value"]
    argv = [word for word in _substitute(example.split(" -- ", 1)[1]).split() if not word.endswith("EOT")]
    parsed = build_parser().parse_args(argv)
    assert (parsed.command, parsed.rules_command) == ("rules", "migrate")


def test_the_dedup_reaches_the_clusters_warm_spark_connect_server_when_asked(tf):
    """dedup_spark_connect: Composer's spark_default is a spark_connect connection to the master's
    port, the master's metadata tells the init action to start the server there, and only the
    client ranges may reach that port."""
    software = one(one(resource(tf, "google_composer_environment", "airflow")["config"])["software_config"])
    conn = software["env_variables"]["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert 'conn_type = "spark_connect"' in conn
    assert "local.spark_connect_host" in conn
    assert "var.spark_connect_port" in conn
    gce = one(one(resource(tf, "google_dataproc_cluster", "spark")["cluster_config"])["gce_cluster_config"])
    assert "tidemark-spark-connect-port" in str(gce["metadata"])
    firewall = resource(tf, "google_compute_firewall", "spark_connect")
    assert firewall["count"] == "${var.dedup_spark_connect ? 1 : 0}"
    assert firewall["source_ranges"] == "${var.spark_connect_client_ranges}"
    assert tf["variable"]["dedup_spark_connect"]["default"] is False
    script = Path(os.path.join(TERRAFORM, "scripts", "install-tidemark.sh")).read_text()
    assert "tidemark-spark-connect-port" in script
    assert "start-connect-server.sh --wait --master yarn" in script


def test_dataproc_runs_spark_4_in_utc_with_tidemark_installed(tf):
    config = one(resource(tf, "google_dataproc_cluster", "spark")["cluster_config"])
    software = one(config["software_config"])
    assert software["image_version"] == "${var.dataproc_image_version}"
    assert tf["variable"]["dataproc_image_version"]["default"].startswith("3."), "tidemark needs Spark 4"
    assert software["override_properties"]["spark:spark.sql.session.timeZone"] == "UTC"
    init = one(config["initialization_action"])
    assert init["script"].endswith("${google_storage_bucket_object.init_action.name}")
    assert one(config["gce_cluster_config"])["internal_ip_only"] is True


def test_init_action_is_valid_bash_and_keeps_the_clusters_spark():
    script = os.path.join(TERRAFORM, "scripts", "install-tidemark.sh")
    subprocess.run(["bash", "-n", script], check=True)
    text = Path(script).read_text()
    assert "--no-deps" in text
    assert "pyspark" in text


# Every DAG file Composer may get (the example consumer only with deploy_example_consumer_dag).
DAG_FILES = tuple(sorted(name for name in os.listdir(os.path.join(ROOT, "dags")) if name.endswith(".py")))


def _dag_environment_names() -> set[str]:
    """TIDEMARK_* names the DAG files, and the first-party modules their tasks import, read."""
    out = set()
    files = set()
    for dag_file in DAG_FILES:
        files.add(os.path.join(ROOT, "dags", dag_file))
        files |= _first_party_closure(os.path.join(ROOT, "dags", dag_file))
    for path in sorted(files):
        tree = ast.parse(Path(path).read_text())
        out |= {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"TIDEMARK_[A-Z_]+", node.value)
        }
    return out


def test_composer_environment_is_what_the_dag_reads(tf):
    software = one(one(resource(tf, "google_composer_environment", "airflow")["config"])["software_config"])
    set_by_terraform = set(software["env_variables"])
    # AIRFLOW_CONN_SPARK_DEFAULT: the connection the DAG's dedup task reads (conn_id spark_default).
    read = _dag_environment_names() | {f"TIDEMARK_{key}" for key in names.DEFAULTS} | {"AIRFLOW_CONN_SPARK_DEFAULT"}
    assert set_by_terraform <= read, f"Composer gets variables nothing reads: {sorted(set_by_terraform - read)}"
    # What the DAG needs on Composer: the lake, the application, and the Dataproc branch's target.
    needed = {
        "TIDEMARK_LAKE",
        "TIDEMARK_SUBMIT_APP",
        "TIDEMARK_DATAPROC_CLUSTER",
        "TIDEMARK_DATAPROC_PROJECT",
        "TIDEMARK_DATAPROC_REGION",
    }
    assert needed <= _dag_environment_names(), f"the DAG no longer reads {sorted(needed - _dag_environment_names())}"
    assert needed <= set_by_terraform, f"Composer lacks {sorted(needed - set_by_terraform)}"
    assert software["env_variables"]["TIDEMARK_LAKE"] == "${local.lake_uri}"
    assert (
        software["env_variables"]["TIDEMARK_DATAPROC_CLUSTER"]
        == '${var.dedup_spark_connect ? "" : google_dataproc_cluster.spark.name}'
    )
    assert tf["variable"]["composer_image_version"]["default"].startswith("composer-3-airflow-3")
    # The Composer account may submit jobs (the Dataproc branch) but not change clusters.
    role = resource(tf, "google_project_iam_custom_role", "dataproc_job_submitter")
    assert "dataproc.jobs.create" in role["permissions"]
    assert not any(
        p.startswith("dataproc.clusters.") and p.split(".")[-1] in ("create", "delete", "update")
        for p in role["permissions"]
    )


FIRST_PARTY = ("tidemark", "streaming_job", "dedup_sql", "cloud_function")


def _module_file(module: str) -> str | None:
    base = os.path.join(ROOT, *module.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.exists(candidate):
            return candidate
    return None


def _first_party_closure(path: str) -> set[str]:
    """Files of every first-party module `path` imports, at any depth (function-level imports too)."""
    seen: set[str] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        for node in ast.walk(ast.parse(Path(current).read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for module in modules:
                if module.split(".")[0] not in FIRST_PARTY:
                    continue
                parts = module.split(".")
                for depth in range(1, len(parts) + 1):  # the packages on the way count too
                    found = _module_file(".".join(parts[:depth]))
                    if found and found not in seen:
                        seen.add(found)
                        todo.append(found)
    return seen


def test_composer_gets_every_module_the_dag_imports(tf):
    """The DAG and its tasks run in Composer from the dags/ folder Terraform fills: every
    first-party module they import must be in a package Terraform uploads."""
    uploaded = tf["locals"]["dag_packages"]
    assert resource(tf, "google_storage_bucket_object", "dag_files")["for_each"] == "${local.dag_files}"
    listed = set(re.findall(r'"(dags/[a-z_]+\.py)"', Path(os.path.join(TERRAFORM, "composer.tf")).read_text()))
    assert {f"dags/{name}" for name in DAG_FILES} == listed, "composer.tf uploads other DAG files than dags/ holds"
    assert (
        'var.deploy_example_consumer_dag ? ["dags/example_session_metrics.py", '
        '"dags/example_weekly_session_metrics.py", "dags/example_changes_consumer.py"]'
    ) in _raw_text()
    assert tf["variable"]["deploy_example_consumer_dag"]["default"] is False
    needed = set()
    for dag_file in DAG_FILES:
        needed |= _first_party_closure(os.path.join(ROOT, "dags", dag_file))
    assert needed, "the DAG imports no tidemark module?"
    missing = sorted(
        os.path.relpath(f, ROOT)
        for f in needed
        if os.path.relpath(f, ROOT).split(os.sep)[0] not in uploaded
        or "devstack" in os.path.relpath(f, ROOT).split(os.sep)
    )
    assert not missing, f"the DAG imports modules Terraform does not upload to Composer: {missing}"


def test_corrected_topic_subscription_filter_and_who_may_publish(tf):
    topic = resource(tf, "google_pubsub_topic", "corrected")
    sub = resource(tf, "google_pubsub_subscription", "corrected_changed")
    assert sub["topic"] == "${google_pubsub_topic.corrected.id}"
    used = set(re.findall(r"attributes\.([A-Za-z_]+)", sub["filter"]))
    assert "change" in used, used
    assert used <= set(corrected_notice.ATTRIBUTES), used
    assert re.search(r'attributes\.change != \\?"unchanged\\?"', sub["filter"])
    assert "unchanged" in corrected_notice.CHANGE_KINDS
    assert sub["filter"].replace('\\"', '"') == corrected_notice.EXAMPLE_FILTER.format(dataset="${var.dataset}")
    assert topic["name"] == "${var.corrected_topic}"
    # The DAG's notify_corrected task (Composer) publishes and finds the topic in its environment.
    grant = resource(tf, "google_pubsub_topic_iam_member", "composer_corrected_publisher")
    assert (grant["topic"], grant["role"]) == ("${google_pubsub_topic.corrected.id}", "roles/pubsub.publisher")
    software = one(one(resource(tf, "google_composer_environment", "airflow")["config"])["software_config"])
    assert software["env_variables"]["TIDEMARK_CORRECTED_TOPIC_PATH"] == "${google_pubsub_topic.corrected.id}"
    # ... and writes the corrected outbox, nothing else in the lake.
    outbox = resource(tf, "google_storage_bucket_iam_member", "composer_writes_corrected_outbox")
    assert "/objects/_notices/corrected/" in one(outbox["condition"])["expression"]


def _grants_of(tf, member: str) -> list[tuple[str, str, dict]]:
    """(resource type, role, body) of every IAM member resource granting something to `member`."""
    return [
        (rtype, body["role"], body)
        for (rtype, _), body in tf["resource"].items()
        if rtype.endswith("_iam_member") and body.get("member") == member
    ]


def test_consumer_account_subscribes_and_reads_the_corrected_output_but_writes_nothing(tf):
    resource(tf, "google_service_account", "consumer")
    grants = _grants_of(tf, "${google_service_account.consumer[0].member}")
    roles = {(rtype, role) for rtype, role, _ in grants}
    assert roles == {
        ("google_pubsub_subscription_iam_member", "roles/pubsub.subscriber"),
        ("google_storage_bucket_iam_member", "roles/storage.objectViewer"),
        ("google_project_iam_member", "roles/biglake.viewer"),
    }, roles
    for rtype, _role, body in grants:
        if rtype == "google_pubsub_subscription_iam_member":
            assert body["subscription"] == "${google_pubsub_subscription.corrected_changed.id}"
        if rtype == "google_storage_bucket_iam_member":
            expression = one(body["condition"])["expression"]
            assert "/objects/sessions_dedup/" in expression
            assert "/objects/_catalog/" in expression
            assert "/objects/sessions/" not in expression  # not the raw panes
    # Read only: no role that creates, changes or deletes anything, no publisher.
    assert not any(
        re.search(r"admin|editor|creator|objectUser|publisher|owner|writer", role, re.I) for _, role, _ in grants
    )


# -- the configuration is self-consistent (what `terraform validate` would catch) -----------------


def test_every_reference_is_declared(tf):
    text = re.sub(r"#[^\n]*", "", _raw_text())
    interpolations = " ".join(re.findall(r"\$\{(.*?)\}", text)) + " " + text
    declared_vars = set(tf["variable"])
    declared_locals = set(tf["locals"])
    missing = {f"var.{v}" for v in re.findall(r"\bvar\.([a-z0-9_]+)", interpolations)} - {
        f"var.{v}" for v in declared_vars
    }
    missing |= {f"local.{v}" for v in re.findall(r"\blocal\.([a-z0-9_]+)", interpolations)} - {
        f"local.{v}" for v in declared_locals
    }
    for rtype, rname in re.findall(r"(?<![.\w])((?:google|archive)_[a-z0-9_]+)\.([a-z0-9_]+)", interpolations):
        if (rtype, rname) not in tf["resource"] and not re.match(r"^(google|archive)$", rtype):
            missing.add(f"{rtype}.{rname}")
    for rtype, rname in re.findall(r"\bdata\.([a-z0-9_]+)\.([a-z0-9_]+)", interpolations):
        if (rtype, rname) not in tf["data"]:
            missing.add(f"data.{rtype}.{rname}")
    assert not missing, f"undeclared references: {sorted(missing)}"


def test_every_variable_is_used(tf):
    text = _raw_text()
    unused = [v for v in tf["variable"] if not re.search(rf"\bvar\.{v}\b", text)]
    assert not unused, f"variables nothing uses: {unused}"


def test_tfvars_example_sets_only_declared_variables(tf):
    example = Path(os.path.join(TERRAFORM, "terraform.tfvars.example")).read_text()
    keys = set(re.findall(r"^([a-z_]+)\s*=", example, re.M))
    assert keys, sorted(keys - set(tf["variable"]))
    assert keys <= set(tf["variable"]), sorted(keys - set(tf["variable"]))


# -- checkov ---------------------------------------------------------------------------------------


def test_checkov_finds_nothing_unexplained():
    """Every checkov finding is fixed or skipped inline with its reason (#checkov:skip=ID:reason)."""
    if not (os.path.exists(CHECKOV) or shutil.which("checkov")):
        pytest.fail(
            f"checkov is not installed at {CHECKOV}: run `make setup` (scripts/setup.sh creates "
            ".venv-tools with checkov) or set TIDEMARK_CHECKOV to its path"
        )
    binary = CHECKOV if os.path.exists(CHECKOV) else shutil.which("checkov")
    done = subprocess.run(
        [binary, "-d", TERRAFORM, "--framework", "terraform", "--skip-download", "--compact", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "LOG_LEVEL": "ERROR"},
    )
    try:
        report = json.loads(done.stdout)
    except ValueError as exc:
        raise AssertionError(f"checkov gave no JSON report ({done.returncode}):\n{done.stderr[-2000:]}") from exc
    summary = report["summary"]
    assert summary["parsing_errors"] == 0, summary
    assert summary["passed"] > 0, "checkov checked nothing"
    failed = [(c["check_id"], c["resource"], c["file_path"]) for c in report["results"]["failed_checks"]]
    assert not failed, f"checkov findings without a fix or an explained skip: {failed}"
    for check in report["results"]["skipped_checks"]:
        reason = (check.get("check_result") or {}).get("suppress_comment") or ""
        assert len(reason.strip()) >= 20, f"{check['check_id']} on {check['resource']} is skipped without a reason"


# -- the Iceberg table (terraform/iceberg.tf) ------------------------------------------------------


def test_iceberg_catalog_description_is_where_and_what_tidemark_reads(tf):
    """The catalog properties Terraform writes into the lake are found by tidemark/iceberg/table.py (same
    object name), name a REST catalog pyiceberg accepts, and the namespace and table match."""
    from tidemark.iceberg import table

    obj = resource(tf, "google_storage_bucket_object", "iceberg_catalog_config")
    assert obj["bucket"] == "${google_storage_bucket.lake.name}"
    assert Lake.open("gs://b").catalog_config() == "gs://b/" + tf["locals"]["iceberg_catalog_object"]
    content = obj["content"]
    assert content.startswith("${jsonencode(")
    assert re.search(r'\btype = \\?"rest\\?"', content)
    assert "uri = var.iceberg_rest_uri" in content
    assert "warehouse = local.lake_uri" in content
    assert re.search(r'auth = \{type = \\?"google\\?"\}', content)
    assert "rest" in table._CATALOG_TYPES
    namespace, name = table.DEFAULT_IDENTIFIER.split(".")
    assert (tf["locals"]["iceberg_namespace"], tf["locals"]["iceberg_table"]) == (namespace, name)
    assert resource(tf, "google_biglake_iceberg_namespace", "tidemark")["namespace_id"] == "${local.iceberg_namespace}"
    catalog = resource(tf, "google_biglake_iceberg_catalog", "lake")
    # BigLake maps one catalog to one bucket, named after it; the table lives in the lake bucket.
    assert catalog["name"] == "${google_storage_bucket.lake.name}"
    assert catalog["catalog_type"] == "CATALOG_TYPE_GCS_BUCKET"
    assert tf["locals"]["lake_uri"] == "gs://${local.lake_bucket}"


def test_who_commits_and_who_reads_the_table(tf):
    editor = resource(tf, "google_project_iam_member", "spark_biglake_editor")
    assert editor["role"] == "roles/biglake.editor"
    assert editor["member"] == "${google_service_account.spark.member}"
    viewer = resource(tf, "google_project_iam_member", "composer_biglake_viewer")
    assert viewer["role"] == "roles/biglake.viewer"
    assert "composer" in viewer["member"]
    assert resource(tf, "google_storage_bucket_iam_member", "readers_lake")["role"] == "roles/storage.objectViewer"
    assert "iceberg_bigquery_table" in tf["output"]


def test_composer_installs_the_pyiceberg_the_code_pins(tf):
    """The DAG's publish task imports tidemark.iceberg, which needs pyiceberg: Composer installs a
    range that contains the version constraints.txt pins."""
    software = one(one(resource(tf, "google_composer_environment", "airflow")["config"])["software_config"])
    spec = software["pypi_packages"]["pyiceberg"]
    pinned = next(
        line.split("==")[1]
        for line in Path(os.path.join(ROOT, "constraints.txt")).read_text().splitlines()
        if line.lower().startswith("pyiceberg==")
    )
    low, high = re.match(r"^>=([\d.]+),<([\d.]+)$", spec).groups()
    as_tuple = lambda v: tuple(int(x) for x in v.strip().split("."))  # noqa: E731
    assert as_tuple(low) <= as_tuple(pinned) < as_tuple(high)


# -- the Spark provider Composer installs for the dedup's Spark Connect path ----------------------

# The first apache-airflow-providers-apache-spark that depends on pyspark-client (the pure-Python
# Spark Connect client) instead of the full pyspark: 6.0.0 ("Make pyspark-client as default and
# pyspark package optional"). Its hooks/spark_connect.py (6.0.2) is byte-identical to 5.6.0's.
PROVIDER_WITH_CONNECT_CLIENT = 6
CONNECT_HOOK_MODULE = "airflow.providers.apache.spark.hooks.spark_connect"


def _range(spec: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    match = re.fullmatch(r">=([\d.]+),<([\d.]+)", spec.replace(" ", ""))
    assert match, f"{spec!r} is not a bounded range >=low,<high"
    low, high = match.groups()
    return tuple(int(x) for x in low.split(".")), tuple(int(x) for x in high.split("."))


def _pinned(package: str) -> tuple[int, ...]:
    line = next(
        line
        for line in Path(os.path.join(ROOT, "constraints.txt")).read_text().splitlines()
        if line.lower().startswith(package.lower() + "==")
    )
    return tuple(int(x) for x in line.strip().split("==")[1].split("."))


def _setup_cfg_requirement(package: str) -> str:
    import configparser

    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    lines = config["options"]["install_requires"].splitlines()
    lines += [line for extra in config["options.extras_require"].values() for line in extra.splitlines()]
    spec = next(line.strip() for line in lines if re.match(rf"^{re.escape(package)}(\[|>|<|=|$)", line.strip()))
    return re.sub(r"^[A-Za-z0-9_.-]+(\[[^]]*\])?", "", spec)


def _dag_connect_path_imports() -> set[str]:
    """Modules DedupOperator's Spark Connect branch imports (function-level imports of the DAG file),
    and those the tidemark modules among them import, transitively."""
    tree = ast.parse(Path(os.path.join(ROOT, "dags", "tidemark_dedup.py")).read_text())
    operator = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "DedupOperator")
    found = {node.module for node in ast.walk(operator) if isinstance(node, ast.ImportFrom) and node.module}
    pending = [m for m in found if m.startswith("tidemark.")]
    while pending:
        path = Path(ROOT, *pending.pop().split("."))
        source = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
        if not source.exists():
            continue  # `from tidemark.x import module`: the module's own file is named by the next import
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module not in found:
                found.add(node.module)
                if node.module.startswith("tidemark."):
                    pending.append(node.module)
    return found


def test_composer_installs_the_spark_provider_that_brings_the_connect_client(tf):
    """With dedup_spark_connect the dedup task is a Spark Connect client on Composer's worker:
    SparkConnectHook (the provider) and a pyspark Connect client of the cluster's Spark major.
    Composer installs no pyspark, so the provider's range starts at the first major that depends on
    pyspark-client, is bounded above, and pyspark-client's range is the code's pyspark range."""
    imports = _dag_connect_path_imports()
    assert CONNECT_HOOK_MODULE in imports, imports
    assert "tidemark.base.spark" in imports, imports
    software = one(one(resource(tf, "google_composer_environment", "airflow")["config"])["software_config"])
    packages = software["pypi_packages"]
    low, high = _range(packages["apache-airflow-providers-apache-spark"])
    assert low[0] >= PROVIDER_WITH_CONNECT_CLIENT, (
        f"Composer's Spark provider range starts at {low}: below {PROVIDER_WITH_CONNECT_CLIENT} it brings "
        "no pyspark-client, and the Connect path has no client on the worker"
    )
    assert high == (low[0] + 1,), f"bound the provider to one major (>={low[0]},<{low[0] + 1}), not <{high}"
    assert "pyspark" not in packages, "pyspark and pyspark-client overwrite each other's files (pyspark/)"
    client = _range(packages["pyspark-client"])
    code = _range(_setup_cfg_requirement("pyspark"))
    assert client == code, f"pyspark-client {client} on Composer, pyspark {code} in setup.cfg: one Spark major"
    assert client[0] <= _pinned("pyspark") < client[1]


def test_the_local_spark_provider_pin_has_the_hook_the_connect_path_imports():
    """Locally (constraints.txt) the provider stays below the pyspark-client major, over the full
    pyspark the local Spark runs on, and has the same hook module the DAG imports on Composer."""
    import importlib
    from importlib.metadata import version

    pinned = _pinned("apache-airflow-providers-apache-spark")
    assert pinned[0] < PROVIDER_WITH_CONNECT_CLIENT, (
        "constraints.txt pins a provider that depends on pyspark-client, which overwrites the local pyspark"
    )
    low, high = _range(_setup_cfg_requirement("apache-airflow-providers-apache-spark"))
    assert low <= pinned < high, "setup.cfg's airflow extra does not admit constraints.txt's provider"
    assert tuple(int(x) for x in version("apache-airflow-providers-apache-spark").split(".")) == pinned
    hook = importlib.import_module(CONNECT_HOOK_MODULE).SparkConnectHook
    assert callable(hook.get_connection_url)
    assert hook.conn_type == "spark_connect"


# -- alert policies (terraform/monitoring.tf) -------------------------------------------------------


def test_alert_policies_are_the_prometheus_rules(tf):
    """One policy per alert of ops/prometheus/rules.yml, read from that file (so the names and
    expressions cannot drift), with a PromQL condition and a notification channel variable."""
    import yaml

    policy = resource(tf, "google_monitoring_alert_policy", "slo")
    assert "yamldecode(file(" in _raw_text()
    assert "ops/prometheus/rules.yml" in _raw_text()
    assert policy["for_each"] == "${local.slo_rules}"
    condition = one(one(policy["conditions"])["condition_prometheus_query_language"])
    assert condition["query"] == "${each.value.expr}"
    assert condition["alert_rule"] == "${each.key}"
    assert policy["notification_channels"] == "${var.alert_notification_channels}"
    with open(os.path.join(ROOT, "ops", "prometheus", "rules.yml")) as handle:
        rules = yaml.safe_load(handle)["groups"][0]["rules"]
    for rule in rules:
        # Cloud Monitoring takes durations in seconds ("300s"), Prometheus takes them too.
        assert re.fullmatch(r"\d+s", rule.get("for", "0s")), rule["alert"]
        assert {"severity", "slo"} <= set(rule["labels"])
        assert rule["annotations"]["runbook"]
    assert "monitoring.googleapis.com" in _raw_text()


def test_function_outcome_metric_counts_the_outcomes_the_function_logs(tf):
    """The log-based metric extracts `outcome` from the function's own Cloud Run service, and
    every log line of the function's handler carries that field."""
    metric = resource(tf, "google_logging_metric", "function_notices")
    assert "${var.function_name}" in metric["filter"]
    assert "jsonPayload.outcome" in metric["filter"]
    assert metric["label_extractors"] == {"outcome": "EXTRACT(jsonPayload.outcome)"}
    source = Path(os.path.join(ROOT, "cloud_function", "main.py")).read_text()
    handler = source[source.index("def handle(") : source.index("@functions_framework")]
    calls = re.findall(r"log\.(?:error|warning|info)\((.*?)\)\n", handler, re.S)
    assert len(calls) >= 4, calls
    assert all("outcome=" in call for call in calls), calls
    assert {"rejected", "retry"} <= set(re.findall(r'outcome="(\w+)"', handler))
    assert '"triggered" if result.created else "already_exists"' in handler
