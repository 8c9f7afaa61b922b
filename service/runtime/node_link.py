"""The node's outbound HTTP link to its coordinator (standard library only).

Every call goes from the node to the coordinator (``PRIVFIT_COORDINATOR_URL``) with the
site's key there (``PRIVFIT_COORDINATOR_KEY``), so a site needs no open inbound port. One
persistent connection per link (keep-alive); a failed call is retried once on a fresh
connection. Errors become :class:`~service.domain.errors.UpstreamError` with the
coordinator's problem detail (never data: the coordinator's answers carry none).
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from service.domain.errors import UpstreamError
from service.domain.nodes.remote import RemoteOffer

__all__ = ["HttpCoordinatorLink"]


class HttpCoordinatorLink:
    """:class:`service.domain.nodes.offers.CoordinatorLink` over HTTP, plus the agent's task
    calls (:meth:`next_task`, :meth:`post_result`)."""

    def __init__(self, base_url: str, key: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the coordinator URL must be an http(s) URL")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path
        self._key = key
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        #: Bytes sent and received on this link (request and response bodies), for benchmarks.
        self.bytes_sent = 0
        self.bytes_received = 0

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = (
                http.client.HTTPSConnection
                if self._scheme == "https"
                else http.client.HTTPConnection
            )
            self._conn = cls(self._host, self._port, timeout=timeout)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        """(status, decoded JSON or None). Raises :class:`UpstreamError` when unreachable."""
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Authorization": f"Bearer {self._key}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection(timeout or self._timeout)
                try:
                    conn.request(method, self._prefix + path, body=payload, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self._conn = None
                    if attempt == 2:
                        raise UpstreamError(
                            f"the coordinator could not be reached: {type(exc).__name__}"
                        ) from None
                    continue
                self.bytes_sent += len(payload or b"")
                self.bytes_received += len(data)
                decoded = json.loads(data) if data else None
                return response.status, decoded
        raise AssertionError("unreachable")  # pragma: no cover

    def _checked(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        status, decoded = self.request(method, path, body)
        if status >= 400:
            detail = decoded.get("detail") if isinstance(decoded, dict) else None
            raise UpstreamError(f"the coordinator answered {status}: {detail or 'no detail'}")
        return decoded

    # --- offers (CoordinatorLink) ------------------------------------------------------

    def offer(self, *, study_id: str, offer: RemoteOffer) -> str:
        decoded = self._checked(
            "POST",
            f"/v1/studies/{quote(study_id, safe='')}/remote-contributions",
            {
                "node_dataset_id": offer.node_dataset_id,
                "preprocessing": dict(offer.preprocessing),
                "label": dict(offer.label),
                "n_features": offer.n_features,
                "epsilon_cap": offer.epsilon_cap,
                "delta_cap": offer.delta_cap,
            },
        )
        if not isinstance(decoded, dict) or not isinstance(decoded.get("id"), str):
            raise UpstreamError("the coordinator's answer named no contribution")
        return str(decoded["id"])

    def withdraw(self, *, study_id: str, contribution_id: str) -> None:
        self._checked(
            "DELETE",
            f"/v1/studies/{quote(study_id, safe='')}/remote-contributions/"
            f"{quote(contribution_id, safe='')}",
        )

    # --- model offers (ModelLink) ------------------------------------------------------

    def upload_model(self, body: Mapping[str, Any]) -> str:
        decoded = self._checked("POST", "/v1/models", body)
        if not isinstance(decoded, dict) or not isinstance(decoded.get("id"), str):
            raise UpstreamError("the coordinator's answer named no model")
        return str(decoded["id"])

    def contribute_model(self, *, study_id: str, model_id: str) -> str:
        decoded = self._checked(
            "POST",
            f"/v1/studies/{quote(study_id, safe='')}/contributions",
            {"model_id": model_id},
        )
        if not isinstance(decoded, dict) or not isinstance(decoded.get("id"), str):
            raise UpstreamError("the coordinator's answer named no contribution")
        return str(decoded["id"])

    # --- the agent's calls -------------------------------------------------------------

    def next_task(self, *, wait: float) -> dict[str, Any] | None:
        """The next task for this site's contributions (long poll), or None."""
        status, decoded = self.request(
            "GET", f"/v1/node/tasks/next?wait={wait:g}", timeout=wait + 30.0
        )
        if status == 204:
            return None
        if status >= 400 or not isinstance(decoded, dict):
            detail = decoded.get("detail") if isinstance(decoded, dict) else None
            raise UpstreamError(f"the coordinator answered {status}: {detail or 'no detail'}")
        return decoded

    def post_result(self, task_id: str, answer: Mapping[str, Any]) -> bool:
        """Post a task's answer; False when the coordinator no longer awaits it."""
        status, _ = self.request(
            "POST", f"/v1/node/tasks/{quote(task_id, safe='')}/result", dict(answer)
        )
        return status < 400
