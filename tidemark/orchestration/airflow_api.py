"""A small client for Airflow 3's REST API (/api/v2).

What the Cloud Function, the DAGs' REST triggers (a per-date run with its partition_key), the
outbox's asset-event drain and the tests need. It lives in the core, not beside the function, because the DAGs and the notices drain ship with tidemark/ alone (Composer's dag_packages, the function bundle).

Plain HTTP with requests (the generated apache-airflow-client is not needed). Three auth modes:

- "password": a self-managed Airflow. POST {base}/auth/token with a username and password gives a
  JWT, sent as a Bearer token and renewed once when Airflow answers 401 (expired).
- "google": Cloud Composer. google.auth default credentials (the function's service account) and
  an AuthorizedSession; Composer's web server accepts Google OAuth tokens. Not testable offline.
- "none": an Airflow with simple_auth_manager_all_admins (local experiments only).

Errors are split by what the caller should do: TransientAirflowError (Airflow down, 5xx, timeout,
401/403/404 that an operator can fix: retry later, Pub/Sub redelivers) and AirflowRejected (a 4xx
that retrying cannot fix). Credentials never appear in a message or a log: exceptions carry the
method, the path, the status and a short excerpt of Airflow's answer, never a request body.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

if TYPE_CHECKING:
    from airflow.sdk import Connection

DEFAULT_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
AUTH_MODES = ("password", "google", "none")
RUN_ENDED = ("success", "failed")  # the states a DAG run ends in
GOOGLE_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
# requests' timeout: one number, or (connect, read) in seconds
Timeout = float | tuple[float, float]
# One JSON object of Airflow's answers (parsed JSON from outside: its fields are Airflow's).
JSONObject = dict[str, Any]


class AirflowError(Exception):
    """Base class: something went wrong talking to Airflow."""


class TransientAirflowError(AirflowError):
    """Worth retrying later: connection refused, timeout, 5xx, auth or DAG not available yet."""


class AirflowRejected(AirflowError):
    """Airflow refused the request for a reason retrying will not fix (400, 422 ...)."""


class ConfigError(ValueError):
    """The function's environment is incomplete; the message names the variable, never a value."""


class NotConfigured(ConfigError):
    """No REST API is configured at all (no connection, no AIRFLOW_BASE_URL).

    E.g. `airflow dags test` on a laptop. Callers whose work the lake keeps owed (the asset events
    of the corrected outbox, the neighbour
    reruns of obligations) leave it to a later drain instead of failing; a connection that exists
    but is wrong stays a plain ConfigError.
    """


@dataclass(frozen=True)
class TriggerResult:
    """What triggering a run did: created it, or found it already there."""

    run_id: str
    created: bool  # False: the run already existed (409), which is success too
    state: str | None = None


def _object(response: requests.Response) -> JSONObject:
    """The response's body, a JSON object in every /api/v2 answer this client reads."""
    # requests types json() as Any; every endpoint called here answers with an object
    return cast(JSONObject, response.json())


def _excerpt(response: requests.Response) -> str:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    return str(detail)[:300]


class _TokenAuth:
    """Airflow 3 JWT from /auth/token, cached, renewed on 401."""

    def __init__(self, base_url: str, username: str, password: str, timeout: Timeout) -> None:
        """Credentials for `base_url`'s /auth/token; no request until the first headers()."""
        self._url = f"{base_url}/auth/token"
        self._username = username
        self._password = password
        self._timeout = timeout
        self._token: str | None = None

    def __repr__(self) -> str:  # never show the password, even in a debugger or a traceback
        return f"_TokenAuth(user={self._username!r})"

    def headers(self, session: requests.Session, renew: bool = False) -> dict[str, str]:
        """The Authorization header, a new token fetched first when there is none or `renew`."""
        if self._token is None or renew:
            try:
                response = session.post(
                    self._url, json={"username": self._username, "password": self._password}, timeout=self._timeout
                )
            except requests.RequestException as exc:
                raise TransientAirflowError(f"POST /auth/token failed: {type(exc).__name__}") from None
            if response.status_code not in (200, 201):
                # 401: wrong credentials (fixable by an operator: retry, then dead-letter).
                raise TransientAirflowError(f"POST /auth/token -> HTTP {response.status_code}: {_excerpt(response)}")
            self._token = str(_object(response)["access_token"])
        return {"Authorization": f"Bearer {self._token}"}


class _NoAuth:
    """No header: the session authenticates itself, or Airflow admits everyone."""

    def headers(self, session: requests.Session, renew: bool = False) -> dict[str, str]:
        """No headers."""
        return {}


class AirflowClient:
    """The calls tidemark makes to one Airflow's REST API, with its auth and retries."""

    def __init__(
        self,
        base_url: str,
        auth_mode: str = "password",
        username: str | None = None,
        password: str | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
    ) -> None:
        """A client of `base_url` in `auth_mode` (see the module); `session` for tests.

        Raises:
            ConfigError: an unknown mode, or the password mode without its credentials.
        """
        if auth_mode not in AUTH_MODES:
            raise ConfigError(f"AIRFLOW_AUTH_MODE must be one of {', '.join(AUTH_MODES)}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        if auth_mode == "google":
            # Imported here: only Composer deployments need google-auth's transport.
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=list(GOOGLE_SCOPES))
            # google-auth leaves AuthorizedSession.__init__ unannotated
            self.session = session or AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
            self._auth: _NoAuth | _TokenAuth = _NoAuth()  # the AuthorizedSession adds and refreshes its own token
        else:
            self.session = session or requests.Session()
            if auth_mode == "password":
                if not username or not password:
                    raise ConfigError(
                        "auth mode 'password' needs AIRFLOW_USERNAME and AIRFLOW_PASSWORD (or AIRFLOW_PASSWORD_FILE)"
                    )
                self._auth = _TokenAuth(self.base_url, username, password, timeout)
            else:
                self._auth = _NoAuth()

    def __repr__(self) -> str:
        """The base URL only: never a credential."""
        return f"AirflowClient({self.base_url!r})"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AirflowClient:
        """A client configured by the environment.

        AIRFLOW_BASE_URL, AIRFLOW_AUTH_MODE (password|google|none), AIRFLOW_USERNAME,
        AIRFLOW_PASSWORD or AIRFLOW_PASSWORD_FILE (a Secret Manager secret exposed by Cloud
        Functions as an environment variable or a mounted file), AIRFLOW_TIMEOUT_SECONDS.

        Raises:
            ConfigError: what is missing or unreadable, named (never a value).
        """
        env = os.environ if environ is None else environ
        base_url = env.get("AIRFLOW_BASE_URL", "").strip()
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError("AIRFLOW_BASE_URL must be set to the Airflow web server URL (http:// or https://)")
        password = env.get("AIRFLOW_PASSWORD")
        if not password and env.get("AIRFLOW_PASSWORD_FILE"):
            try:
                with open(env["AIRFLOW_PASSWORD_FILE"]) as handle:
                    password = handle.read().strip()
            except OSError as exc:
                raise ConfigError(f"AIRFLOW_PASSWORD_FILE cannot be read: {exc.strerror}") from None
        read = float(env.get("AIRFLOW_TIMEOUT_SECONDS", DEFAULT_TIMEOUT[1]))
        return cls(
            base_url,
            env.get("AIRFLOW_AUTH_MODE", "password").strip().lower(),
            env.get("AIRFLOW_USERNAME"),
            password,
            (DEFAULT_TIMEOUT[0], read),
        )

    # -- HTTP ---------------------------------------------------------------------------------

    @retry(
        retry=retry_if_exception_type(TransientAirflowError),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.5, max=4),
        reraise=True,
    )
    def _request(
        self,
        method: str,
        path: str,
        ok: tuple[int, ...] = (200,),
        expected: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> requests.Response:
        """One call with a few quick retries for blips.

        A longer outage is left to Pub/Sub's redelivery (the caller raises). Statuses in `expected`
        are returned to the caller.
        """
        url = f"{self.base_url}{path}"
        for renew in (False, True):
            try:
                response = self.session.request(
                    method, url, headers=self._auth.headers(self.session, renew), timeout=self.timeout, **kwargs
                )
            except requests.RequestException as exc:
                raise TransientAirflowError(f"{method} {path} failed: {type(exc).__name__}") from None
            if response.status_code != 401 or renew:
                break
        status = response.status_code
        if status in ok or status in expected:
            return response
        message = f"{method} {path} -> HTTP {status}: {_excerpt(response)}"
        if status >= 500 or status in (401, 403, 404, 408, 429):
            # 404: the DAG is not parsed yet or was renamed; 401/403: credentials or roles.
            raise TransientAirflowError(message)
        raise AirflowRejected(message)

    # -- API ----------------------------------------------------------------------------------

    def health(self) -> JSONObject:
        """Airflow's /monitor/health answer."""
        return _object(self._request("GET", "/api/v2/monitor/health"))

    def trigger_dag_run(
        self,
        dag_id: str,
        run_id: str,
        conf: Mapping[str, Any],
        note: str | None = None,
        partition_key: str | None = None,
    ) -> TriggerResult:
        """Create run `run_id` of `dag_id`; an existing run with that id (409) is success.

        The run's partition_key is `partition_key`, else the conf's event_date: every per-date
        run (the function's, reconcile's, a test's) is then that date's partition in Airflow
        without each caller having to repeat it. A DAG that is not partitioned refuses a key
        (HTTP 400); pass conf without event_date to trigger one.
        """
        body: dict[str, Any] = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
        key = partition_key if partition_key is not None else (conf or {}).get("event_date")
        if key is not None:
            body["partition_key"] = key
        if note:
            body["note"] = note
        response = self._request("POST", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns", expected=(409,), json=body)
        if response.status_code == 409:
            return TriggerResult(run_id, created=False)
        return TriggerResult(run_id, created=True, state=_object(response).get("state"))

    @classmethod
    def from_connection(cls, conn: Connection) -> AirflowClient:
        """A client of an Airflow Connection (the DAGs' `tidemark_airflow_api`).

        Host as a full URL (http://host:port) or host + port (+ schema http/https); login/password
        for "password"; extra {"auth_mode": "google"} on Composer, {"auth_mode": "none"} for an
        all-admins Airflow.

        Raises:
            ConfigError: the connection has no host.
        """
        extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else dict(getattr(conn, "extra", None) or {})
        host = (conn.host or "").strip()
        if not host:
            raise ConfigError("the Airflow API connection has no host (the Airflow web server URL)")
        if not host.startswith(("http://", "https://")):
            scheme = conn.schema if conn.schema in ("http", "https") else "http"
            host = f"{scheme}://{host}" + (f":{int(conn.port)}" if conn.port else "")
        mode = str(extra.get("auth_mode") or ("password" if conn.login else "none")).strip().lower()
        return cls(host, mode, conn.login, conn.password)

    # Run ids, conf and partition keys are sent as JSON bodies, never spliced into a path; a
    # path segment (dag id, run id) is always quote()d.
    def get_dag_run(self, dag_id: str, run_id: str) -> JSONObject | None:
        """The run, None when Airflow has no such run."""
        response = self._request(
            "GET", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}", expected=(404,)
        )
        return None if response.status_code == 404 else _object(response)

    def list_dag_runs(self, dag_id: str) -> list[JSONObject]:
        """Every run of the DAG, oldest first (all pages)."""
        runs: list[JSONObject] = []
        offset = 0
        while True:
            page = _object(
                self._request(
                    "GET",
                    f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns",
                    params={"limit": 100, "offset": offset, "order_by": "run_after"},
                )
            )
            runs.extend(page["dag_runs"])
            offset += len(page["dag_runs"])
            if not page["dag_runs"] or offset >= page["total_entries"]:
                return runs

    def get_dag(self, dag_id: str) -> JSONObject | None:
        """The DAG, None when Airflow has not parsed one of that id."""
        response = self._request("GET", f"/api/v2/dags/{quote(dag_id, safe='')}", expected=(404,))
        return None if response.status_code == 404 else _object(response)

    def set_paused(self, dag_id: str, paused: bool) -> None:
        """Pause or unpause the DAG."""
        self._request("PATCH", f"/api/v2/dags/{quote(dag_id, safe='')}", json={"is_paused": paused})

    def import_errors(self) -> list[JSONObject]:
        """The DAG files Airflow failed to import, with their errors."""
        errors: list[JSONObject] = _object(self._request("GET", "/api/v2/importErrors")).get("import_errors", [])
        return errors

    def task_instances(self, dag_id: str, run_id: str) -> list[JSONObject]:
        """The run's task instances."""
        found: list[JSONObject] = _object(
            self._request(
                "GET", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}/taskInstances"
            )
        )["task_instances"]
        return found

    def running_dag_runs(self, dag_id: str) -> list[JSONObject]:
        """The DAG's runs in state running (one page of 100: more than max_active_runs allows)."""
        found: list[JSONObject] = _object(
            self._request(
                "GET", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns", params={"state": "running", "limit": 100}
            )
        )["dag_runs"]
        return found

    def running_task_instances(self, dag_id: str, task_id: str) -> list[JSONObject]:
        """The running instances of one task across every run of the DAG (one page of 100)."""
        found: list[JSONObject] = _object(
            self._request(
                "GET",
                f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/~/taskInstances",
                params={"task_id": task_id, "state": "running", "limit": 100},
            )
        )["task_instances"]
        return found

    # -- assets -------------------------------------------------------------------------------

    def asset_id(self, name: str) -> int | None:
        """The id of the asset named exactly `name` (None: no DAG declares it yet).

        By name: Airflow normalises URIs (tidemark://sessions_dedup becomes
        tidemark://sessions_dedup/).
        """
        page = _object(self._request("GET", "/api/v2/assets", params={"name_pattern": name, "limit": 100}))
        found = [int(a["id"]) for a in page.get("assets", []) if a.get("name") == name]
        return found[0] if found else None

    def create_asset_event(
        self, asset_id: int, extra: Mapping[str, Any], partition_key: str | None = None
    ) -> JSONObject:
        """POST /api/v2/assets/events: one event (not idempotent: the caller's bookkeeping is)."""
        body: dict[str, Any] = {"asset_id": int(asset_id), "extra": extra}
        if partition_key is not None:
            body["partition_key"] = partition_key
        return _object(self._request("POST", "/api/v2/assets/events", json=body))

    def asset_events(self, asset_id: int, since: str | None = None) -> list[JSONObject]:
        """The asset's events (oldest first), from `since` (ISO time) on when given."""
        events: list[JSONObject] = []
        offset = 0
        params: dict[str, str | int] = {"asset_id": int(asset_id), "limit": 100, "order_by": "timestamp"}
        if since:
            params["timestamp_gte"] = since
        while True:
            page = _object(self._request("GET", "/api/v2/assets/events", params={**params, "offset": offset}))
            events.extend(page["asset_events"])
            offset += len(page["asset_events"])
            if not page["asset_events"] or offset >= page["total_entries"]:
                return events

    def asset_events_once_listable(self, asset_id: int, timeout: float, interval: float = 2.0) -> list[JSONObject]:
        """asset_events(asset_id), tried until Airflow lists them.

        Airflow 3.3.2 answers HTTP 500 while a run one of the events created is still queued
        (apache/airflow#71360: the run's start_date is null), so a reader that needs the whole list
        waits for those runs to start.
        """
        # Imported here: the Cloud Function's bundle ships this module without tidemark.base.polling
        # (tidemark/ops/function_bundle.py), and the function never waits for a listing.
        from tidemark.base.polling import wait_for

        (events,) = wait_for(
            lambda: (self.asset_events(asset_id),),  # a tuple: an empty listing is an answer too
            timeout,
            "a listing of the asset's events (no run they created still queued)",
            interval=interval,
            not_yet=(TransientAirflowError,),
        )
        return events


# The Airflow connection the DAGs' tasks reach this Airflow's REST API through (the local stack sets
# AIRFLOW_CONN_TIDEMARK_AIRFLOW_API; on Composer a connection with extra {"auth_mode": "google"}).
API_CONN_ID = "tidemark_airflow_api"


def for_tasks(conn_id: str = API_CONN_ID) -> AirflowClient:
    """Inside an Airflow task: the client of connection `conn_id`, else AIRFLOW_BASE_URL & co.

    Why a task calls the REST API of its own Airflow at all: the SDK's TriggerDagRunOperator path
    (3.3.2, standard provider 1.21.0) cannot set a run's partition_key, and an asset event per
    committed version must come from the outbox, not from a task's outlets (docs/airflow.md).
    """
    # Imported when a task asks: Airflow is in the DAGs' environment only (the function bundle
    # ships tidemark/ without it).
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        if os.environ.get("AIRFLOW_BASE_URL"):
            return AirflowClient.from_env()
        raise NotConfigured(
            f"no Airflow connection {conn_id!r} (nor AIRFLOW_BASE_URL): the tasks that "
            "trigger per-date runs and emit asset events need this Airflow's REST API"
        ) from None
    return AirflowClient.from_connection(conn)
