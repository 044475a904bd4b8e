"""Driver side: the brokers' admin REST API, for what the binary protocol cannot do.

The native client (``pulsar-client``) produces and reads but has no admin calls, so the sink uses
a few REST calls (stdlib ``urllib``; token and TLS as the client's): how many partitions a topic
has, creating a partitioned topic, whether broker-side deduplication applies to a topic (the
sink's exactly-once protocol needs it, docs/sinks/pulsar.md), and a compaction threshold on the
control topic; for ``follow-topic``, each partition's last message id. Errors name ``admin_url``
and never print the token.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from sinks.base import SinkError
from sinks.pulsar.config import PulsarSinkConfig


class PulsarUnreachable(SinkError):
    """The brokers (their binary protocol or their admin API) do not answer."""


class TopicCreationRefused(SinkError):
    """The brokers refused to create a topic the sink needs."""


class DeduplicationOff(SinkError):
    """Broker-side deduplication is off for a topic the sink writes: exactly-once needs it."""


@dataclass(frozen=True)
class Response:
    status: int
    body: Any


class PulsarAdmin:
    """A few calls of the admin REST API (driver side).

    Args:
        config: the sink's configuration (``admin_url``, the token, the TLS settings).
    """

    def __init__(self, config: PulsarSinkConfig) -> None:
        self.config = config
        self.base = config.admin_url
        self._ssl: ssl.SSLContext | None = None
        if self.base.startswith("https://"):
            ctx = ssl.create_default_context(cafile=config.tls_trust_certs_file_path)
            if config.tls_allow_insecure_connection:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif not config.tls_validate_hostname:
                ctx.check_hostname = False
            self._ssl = ctx

    def call(self, method: str, path: str, body: Any = None) -> Response:
        """One request; 4xx/5xx come back as a :class:`Response` (the caller decides).

        Raises:
            PulsarUnreachable: no answer within ``connect_timeout_s``.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.config.auth_token is not None:
            request.add_header("Authorization", f"Bearer {self.config.auth_token.get_secret_value()}")
        try:
            with urllib.request.urlopen(request, timeout=self.config.connect_timeout_s, context=self._ssl) as r:
                return Response(r.status, _json(r.read()))
        except urllib.error.HTTPError as exc:
            return Response(exc.code, _json(exc.read()))
        except (OSError, urllib.error.URLError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PulsarUnreachable(
                f"cannot reach the Pulsar admin API at admin_url={self.base} ({reason}): check "
                f"`admin_url`, the network and the TLS settings", admin_url=self.base) from None

    def check(self, response: Response, what: str) -> Any:
        """The body of a 2xx response, else a :class:`SinkError` naming ``what`` and the reason."""
        if 200 <= response.status < 300:
            return response.body
        reason = response.body.get("reason") if isinstance(response.body, dict) else response.body
        hint = (": check the sink's `auth_token` and the role's permissions on the namespace"
                if response.status in (401, 403) else "")
        raise SinkError(f"Pulsar admin API at {self.base}: {what} failed with HTTP {response.status} "
                        f"({reason}){hint}", admin_url=self.base, status=response.status)

    @staticmethod
    def _path(topic: str) -> str:
        """``persistent://t/ns/name`` -> ``/admin/v2/persistent/t/ns/name``."""
        return "/admin/v2/" + topic.replace("://", "/", 1)

    def partitions(self, topic: str) -> int | None:
        """The topic's layout: n for a partitioned topic of n partitions, 0 for an existing
        non-partitioned topic, None when it does not exist."""
        r = self.call("GET", f"{self._path(topic)}/partitions")
        if r.status == 404 and "Topic" in str(r.body):
            return None
        meta = self.check(r, f"reading {topic}'s partitions")
        n = int(meta.get("partitions", 0)) if isinstance(meta, dict) else 0
        if n:
            return n
        tenant_ns = topic.split("://", 1)[1].rsplit("/", 1)[0]
        listed = self.check(self.call("GET", f"/admin/v2/persistent/{tenant_ns}"), f"listing {tenant_ns}'s topics")
        return 0 if topic in listed else None

    def create_partitioned(self, topic: str, partitions: int) -> None:
        """Create a partitioned topic (one that exists meanwhile is fine).

        Raises:
            TopicCreationRefused: the brokers refused (the message says why).
        """
        r = self.call("PUT", f"{self._path(topic)}/partitions", partitions)
        if r.status == 409 or 200 <= r.status < 300:
            return
        reason = r.body.get("reason") if isinstance(r.body, dict) else r.body
        raise TopicCreationRefused(
            f"Pulsar refused to create topic {topic!r} with {partitions} partitions (HTTP {r.status}: "
            f"{reason}): create it yourself, or fix the sink's `tenant`/`namespace`/`partitions` or "
            f"the role's permissions", topic=topic)

    def deduplication(self, topic: str) -> bool | None:
        """Whether broker-side deduplication applies to ``topic`` (topic policy, else namespace
        policy, else the broker's setting); None when the brokers do not say (no permission)."""
        applied = self.call("GET", f"{self._path(topic)}/deduplicationEnabled?applied=true")
        if applied.status == 200 and isinstance(applied.body, bool):
            return applied.body
        tenant_ns = topic.split("://", 1)[1].rsplit("/", 1)[0]
        ns = self.call("GET", f"/admin/v2/namespaces/{tenant_ns}/deduplication")
        if ns.status == 200 and isinstance(ns.body, bool):
            return ns.body
        broker = self.call("GET", "/admin/v2/brokers/configuration/runtime")
        if broker.status == 200 and isinstance(broker.body, dict) and "brokerDeduplicationEnabled" in broker.body:
            return str(broker.body["brokerDeduplicationEnabled"]).lower() == "true"
        return None

    def require_deduplication(self, topic: str) -> None:
        """Raises:
            DeduplicationOff: deduplication is off for ``topic``, or the brokers do not say.
        """
        on = self.deduplication(topic)
        if on:
            return
        tenant_ns = topic.split("://", 1)[1].rsplit("/", 1)[0]
        state = "is off" if on is False else "cannot be read (no permission to read the topic's or the namespace's policies)"
        raise DeduplicationOff(
            f"broker-side deduplication {state} for {topic}: the Pulsar sink needs it for exactly-once "
            f"delivery. Enable it: `pulsar-admin namespaces set-deduplication {tenant_ns} --enable` "
            f"(or the brokers' `brokerDeduplicationEnabled=true`)", topic=topic)

    def last_message_id(self, topic: str) -> tuple[int, int, int] | None:
        """The position ``(ledger id, entry id, batch index)`` of the newest message of one topic
        partition (a non-partitioned topic, or ``<topic>-partition-<i>``), as the brokers hold it
        now; None when the partition holds no message.

        Raises:
            SinkError: the brokers refused (no permission, the topic is gone).
        """
        last = self.check(self.call("GET", f"{self._path(topic)}/lastMessageId"), f"reading {topic}'s last message id")
        if not isinstance(last, dict) or int(last.get("entryId", -1)) < 0:
            return None
        return int(last["ledgerId"]), int(last["entryId"]), int(last.get("batchIndex", -1))

    def compact_at(self, topic: str, threshold_bytes: int) -> bool:
        """Set the topic's compaction threshold; False when the brokers refuse."""
        r = self.call("POST", f"{self._path(topic)}/compactionThreshold", threshold_bytes)
        return 200 <= r.status < 300


def _json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:300]
