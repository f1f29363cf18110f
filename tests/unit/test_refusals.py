"""An API server's error answer, typed by its status; a 403 names the RBAC rule that would allow the request."""

from __future__ import annotations

import json

import pytest

from gpualign.base.errors import ApiError, Conflict, Forbidden, Invalid, NotFound, Unreachable
from gpualign.kube.refusals import rbac_rule, refused


class Answer:
    def __init__(self, status: int, message: str = "") -> None:
        self.status_code = status
        self.text = json.dumps({"kind": "Status", "message": message}) if message else "plain body"

    def json(self) -> object:
        return json.loads(self.text)


@pytest.mark.parametrize(("method", "path", "params", "rule"), [
    ("GET", "/api/v1/nodes", None, 'apiGroups: [""], resources: ["nodes"], verbs: ["list"], cluster-wide'),
    ("GET", "/api/v1/nodes", {"watch": "true"}, 'apiGroups: [""], resources: ["nodes"], verbs: ["watch"], cluster'),
    ("PATCH", "/api/v1/nodes/gpu-a1", None,
     'apiGroups: [""], resources: ["nodes"], verbs: ["patch"], resourceNames: ["gpu-a1"], cluster-wide'),
    ("GET", "/apis/batch/v1/namespaces/gpualign-system/jobs", None,
     'apiGroups: ["batch"], resources: ["jobs"], verbs: ["list"], in namespace gpualign-system'),
    ("POST", "/api/v1/namespaces/ml/pods/train-0/eviction", None,
     'apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"], in namespace ml'),
    ("GET", "/api/v1/namespaces/gpu-operator/pods/p/log", None,
     'apiGroups: [""], resources: ["pods/log"], verbs: ["get"], resourceNames: ["p"], in namespace gpu-operator'),
    ("GET", "/api/v1/namespaces/kube-system", None,
     'apiGroups: [""], resources: ["namespaces"], verbs: ["get"], resourceNames: ["kube-system"], cluster-wide'),
    ("DELETE", "/apis/apps/v1/namespaces/x/daemonsets", None,
     'apiGroups: ["apps"], resources: ["daemonsets"], verbs: ["deletecollection"], in namespace x'),
    ("GET", "/version", None, 'nonResourceURLs: ["/version"], verbs: ["get"]'),
])
def test_the_rule_is_read_from_the_request_as_the_authorizer_reads_it(method, path, params, rule):
    assert rbac_rule(method, path, params).startswith(rule)


def test_a_403_names_the_verb_the_resource_and_the_rule_in_one_line():
    err = refused("PATCH", "/api/v1/nodes/gpu-a1", "https://k", Answer(403, 'nodes "gpu-a1" is forbidden: User '
                                                                         '"x" cannot patch resource "nodes"'))
    assert isinstance(err, Forbidden) and err.status == 403 and not err.retryable
    assert "\n" not in err.message
    assert err.message.startswith("PATCH /api/v1/nodes/gpu-a1 on https://k: forbidden (HTTP 403): nodes ")
    assert 'rule apiGroups: [""], resources: ["nodes"], verbs: ["patch"]' in err.message
    assert "deploy/cli/" in err.message


@pytest.mark.parametrize(("status", "kind", "retryable"), [
    (404, NotFound, False), (409, Conflict, True), (422, Invalid, False), (400, ApiError, False),
    (429, ApiError, True), (500, ApiError, True), (503, ApiError, True)])
def test_each_status_is_its_own_kind_and_only_a_busy_server_or_a_conflict_is_retried(status, kind, retryable):
    err = refused("GET", "/api/v1/pods", "https://k", Answer(status, "why"))
    assert type(err) is kind and err.status == status and err.retryable is retryable
    assert err.message == f"GET /api/v1/pods on https://k: HTTP {status}: why"
    assert not isinstance(err, Unreachable)  # an answer is not a transport failure


def test_transport_failures_are_retryable_and_answers_are_not_transport_failures():
    assert Unreachable("connect refused").retryable
    assert not issubclass(ApiError, Unreachable) and not issubclass(Unreachable, ApiError)
