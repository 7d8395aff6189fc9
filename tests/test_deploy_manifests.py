"""deploy/kubernetes, rendered as docs/deploy.md renders it (envsubst with the values the doc shows), is valid against
the Kubernetes schemas (``kubernetes-validate``'s bundled ones, strict: no field the API does not know) and
KubeRay's RayCluster schema (vendored under tests/schemas); its proxy's nginx files are deploy/nginx's, rendered for
the serve StatefulSet's pods; what selects what matches."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
_PLACEHOLDER = re.compile(r"\$\{(ROLLBOX_[A-Z0-9_]+)\}")
#: Kubernetes versions the manifests must be valid for: an older one still supported by clouds, and the newest known.
VERSIONS = ["1.30", kubernetes_validate.latest_version()]


def doc_values() -> dict[str, str]:
    """Every ``export ROLLBOX_...=VALUE`` of the block of values docs/deploy.md shows, as the shell reads it."""
    blocks = (ROOT / "docs" / "deploy.md").read_text().split("```")
    block = next(b for b in blocks if "export ROLLBOX_NAMESPACE=" in b)
    values = {}
    for line in block.splitlines():
        if line.startswith("export ROLLBOX_"):
            name, _, value = line.removeprefix("export ").partition("=")
            words = shlex.split(value, comments=True)
            values[name] = words[0] if words else ""
    return values


def render(path: Path, values: dict[str, str]) -> str:
    """``envsubst`` of the placeholders ``path`` holds (named alone, as docs/deploy.md does: nginx's own ``$``
    variables in the proxy's configuration are left as they are)."""
    names = sorted(set(_PLACEHOLDER.findall(path.read_text())))
    missing = [n for n in names if n not in values]
    assert not missing, f"docs/deploy.md shows no value for {missing} ({path.name} needs them)"
    return subprocess.run(
        ["envsubst", " ".join(f"${{{n}}}" for n in names)],
        input=path.read_text(),
        env={**os.environ, **values},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def resources() -> list[dict[str, Any]]:
    values = doc_values()
    found = []
    for path in MANIFESTS:
        found += [r for r in yaml.safe_load_all(render(path, values)) if r is not None]
    return found


def _strict(schema: Any) -> Any:
    """``schema`` refusing fields it does not name, as the API server's strict field validation does (a structural
    schema's object without ``x-kubernetes-preserve-unknown-fields`` or ``additionalProperties``)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        strict.setdefault("additionalProperties", bool(schema.get("x-kubernetes-preserve-unknown-fields")))
    return strict


def raycluster_schema() -> dict[str, Any]:
    """KubeRay's RayCluster (v1) schema, strict; ``apiVersion``, ``kind`` and ``metadata`` as the API has them."""
    schema: dict[str, Any] = _strict(json.loads((ROOT / "tests" / "schemas" / "raycluster-v1.json").read_text()))
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    return schema


def _name(resource: dict[str, Any]) -> str:
    return f"{resource['kind']}/{resource['metadata']['name']}"


def test_the_doc_shows_every_value_and_nothing_is_left_unrendered() -> None:
    values = doc_values()
    assert values["ROLLBOX_NAMESPACE"] and values["ROLLBOX_IMAGE"]
    used = {n for path in MANIFESTS for n in _PLACEHOLDER.findall(path.read_text())}
    assert set(values) == used, ("shown but unused", set(values) - used, "used but not shown", used - set(values))
    for path in MANIFESTS:
        assert "${ROLLBOX_" not in render(path, values), path.name


@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_is_valid_for_kubernetes(version: str) -> None:
    raycluster = raycluster_schema()
    kinds = set()
    for resource in resources():
        kinds.add(resource["kind"])
        if resource["apiVersion"] == "ray.io/v1":
            jsonschema.validate(resource, raycluster)
            pod_template = resource["spec"]["headGroupSpec"]["template"]
            for template in (pod_template, *(g["template"] for g in resource["spec"]["workerGroupSpecs"])):
                # The pods inside it, against Kubernetes' own PodTemplateSpec (the CRD's copy is looser).
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template},
                    version,
                    strict=True,
                )
        else:
            kubernetes_validate.validate(resource, version, strict=True)
    assert {"Namespace", "Secret", "ConfigMap", "Service", "StatefulSet", "Deployment", "Job", "RayCluster"} <= kinds


def test_an_invalid_resource_is_refused() -> None:
    """The checks can fail: a misspelt field, and a RayCluster without its head."""
    found = resources()
    serve = next(r for r in found if _name(r) == "StatefulSet/rollbox-serve")
    serve["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(serve, VERSIONS[-1], strict=True)
    ray = next(r for r in found if r["kind"] == "RayCluster")
    del ray["spec"]["headGroupSpec"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(ray, raycluster_schema())
    misspelt = next(r for r in resources() if r["kind"] == "RayCluster")
    misspelt["spec"]["workerGroupSpecs"][0]["replica"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(misspelt, raycluster_schema())


def test_the_proxy_serves_deploy_nginx_for_the_serve_pods() -> None:
    values, found = doc_values(), resources()
    namespace = values["ROLLBOX_NAMESPACE"]
    serve = next(r for r in found if _name(r) == "StatefulSet/rollbox-serve")
    pods = [f"rollbox-serve-{i}" for i in range(serve["spec"]["replicas"])]
    args = serve["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--node=$(POD_NAME)" in args and "--port=8080" in args  # the node in each id is its pod's name
    conf = next(r for r in found if _name(r) == "ConfigMap/rollbox-proxy")["data"]
    listen = subprocess.run(
        ["envsubst", "${ROLLBOX_LISTEN}"],
        input=(ROOT / "deploy" / "nginx" / "rollbox.conf").read_text(),
        env={**os.environ, "ROLLBOX_LISTEN": "8080"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert conf["rollbox.conf"] == listen
    pairs = [f"{p}={p}.{serve['spec']['serviceName']}.{namespace}.svc.cluster.local:8080" for p in pods]
    nodes = subprocess.run(
        [
            "sh",
            str(ROOT / "deploy" / "nginx" / "nodes.sh"),
            "--resolve",
            "kube-dns.kube-system.svc.cluster.local",
            *pairs,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert conf["rollbox-nodes.conf"] == nodes


def test_selectors_and_references_match() -> None:
    found = resources()
    by_name = {_name(r): r for r in found}
    namespaces = {r["metadata"]["name"] for r in found if r["kind"] == "Namespace"}
    for resource in found:
        if resource["kind"] != "Namespace":
            assert resource["metadata"]["namespace"] in namespaces, _name(resource)
    templates = {
        _name(r): r["spec"]["template"]["metadata"]["labels"]
        for r in found
        if r["kind"] in ("StatefulSet", "Deployment")
    }
    for service in (r for r in found if r["kind"] == "Service"):
        selector = service["spec"]["selector"]
        assert any(selector.items() <= labels.items() for labels in templates.values()), _name(service)
    for name, labels in templates.items():
        assert by_name[name]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for kind, referenced in _references(found):
        # rollbox-tenants is made from its file by kubectl (docs/deploy.md), never written in a manifest.
        assert f"{kind}/{referenced}" in by_name or (kind, referenced) == ("Secret", "rollbox-tenants"), referenced


_REFERENCES = {
    ("secretKeyRef", "name"): "Secret",
    ("secretRef", "name"): "Secret",
    ("secret", "secretName"): "Secret",
    ("configMapRef", "name"): "ConfigMap",
    ("configMap", "name"): "ConfigMap",
    ("persistentVolumeClaim", "claimName"): "PersistentVolumeClaim",
}


def _references(value: Any, field: str = "") -> list[tuple[str, str]]:
    """(kind, name) of every Secret, ConfigMap and claim that ``value`` refers to."""
    if isinstance(value, list):
        return [found for item in value for found in _references(item, field)]
    if not isinstance(value, dict):
        return []
    found = [(kind, value[key]) for (outer, key), kind in _REFERENCES.items() if outer == field and key in value]
    return found + [item for key, inner in value.items() for item in _references(inner, key)]
