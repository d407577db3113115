#!/usr/bin/env python3
"""Generates crates/apiserver/src/server/protobuf_schema.rs: for every protobuf message
reachable from the kinds listwatch serves, its fields' tags, wire kinds and JSON names.

Tags and wire types come from the k8s-pb crate (prost code generated from Kubernetes'
.proto files; 0.9 is Kubernetes 1.35) and, for fields added since, from the ADDED_* tables
below; JSON names from the k8s-openapi crate (serde field names), matched per
struct by name with case and underscores ignored. Run after changing either crate's
version:

    python3 scripts/gen_protobuf_schema.py > crates/apiserver/src/server/protobuf_schema.rs
"""
import glob, os, re, sys

REG = glob.glob(os.path.expanduser("~/.cargo/registry/src/*/"))[0]
PB = sorted(glob.glob(REG + "k8s-pb-0.9.*/src"))[-1]
OA = sorted(glob.glob(REG + "k8s-openapi-0.29.*/src"))[-1] + "/v1_37"

ROOTS = [
    "api.core.v1.Namespace", "api.core.v1.Pod", "api.core.v1.Node", "api.core.v1.ConfigMap",
    "api.core.v1.Secret", "api.core.v1.Service", "api.core.v1.Event", "api.apps.v1.ReplicaSet",
    "api.apps.v1.Deployment", "api.coordination.v1.Lease", "api.autoscaling.v1.Scale",
    "api.core.v1.ServiceAccount", "api.core.v1.PersistentVolumeClaim", "api.apps.v1.StatefulSet",
    "api.apps.v1.DaemonSet", "api.batch.v1.Job", "api.batch.v1.CronJob",
    "api.networking.v1.Ingress", "api.networking.v1.NetworkPolicy",
    "api.policy.v1.PodDisruptionBudget", "api.autoscaling.v2.HorizontalPodAutoscaler",
    "api.rbac.v1.Role", "api.rbac.v1.RoleBinding", "api.rbac.v1.ClusterRole",
    "api.rbac.v1.ClusterRoleBinding", "api.core.v1.PersistentVolume", "api.core.v1.Endpoints",
    "api.core.v1.ResourceQuota", "api.core.v1.LimitRange", "api.discovery.v1.EndpointSlice",
    "api.networking.v1.IngressClass", "api.storage.v1.StorageClass",
    "api.scheduling.v1.PriorityClass", "api.events.v1.Event", "api.core.v1.Binding",
    "api.policy.v1.Eviction", "api.core.v1.ReplicationController", "api.storage.v1.CSINode",
    "api.storage.v1.CSIDriver", "api.storage.v1.CSIStorageCapacity",
    "api.apps.v1.ControllerRevision",
]
# Messages whose JSON form is a scalar, decoded by hand in protobuf_generic.rs.
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "RawJson",
    "apimachinery.pkg.runtime.RawExtension": "RawJson",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
}

# Fields and messages newer than k8s-pb 0.9 (generated from Kubernetes 1.35), so that
# protobuf clients do not lose the fields k8s-openapi's v1_37 knows. Tags from kubernetes/api
# core/v1/generated.proto at 10b39a39bcee (master, 2026-07-24), written in prost's form.
# NodeSystemInfo.runningInUserNamespace is left out: its tag is not in kubernetes/api yet.
# JobSpec.scheduling (tag 17, alpha, gated) is left out too: it reaches a tree of
# scheduling.k8s.io/v1alpha3 messages that k8s-pb does not have.
# storage.k8s.io/v1 CSINode.status and CSIDriverSpec.preventPodSchedulingIfMissing (alpha,
# newer than k8s-pb) are left out too: their tags were not at hand when the CSI kinds joined.
CORE = ["api", "core", "v1"]
Q = "super::super::super::apimachinery::pkg::api::resource::Quantity"
T = "super::super::super::apimachinery::pkg::apis::meta::v1::Time"
def _opt(kind, tag, name, ty=None):
    return (tag, name, f'{kind}, optional, tag = "{tag}"', ty or "")
def _rep(kind, tag, name, ty=None):
    return (tag, name, f'{kind}, repeated, tag = "{tag}"', ty or "")
ADDED_FIELDS = {
    "api.core.v1.PodSpec": [_opt("message", 43, "scheduling_group", "PodSchedulingGroup"),
                            _rep("message", 44, "eviction_responders", "EvictionResponder")],
    "api.core.v1.PodStatus": [
        _rep("message", 21, "node_allocatable_resource_claim_statuses",
             "NodeAllocatableResourceClaimStatus"),
        _rep("message", 22, "volume_health", "PodVolumeHealth")],
    "api.core.v1.NodeSpec": [_opt("message", 8, "pod_preemption_policy", "NodePodPreemptionPolicy")],
    "api.core.v1.VolumeMount": [_rep("string", 8, "bind_mount_options")],
    "api.core.v1.VolumeMountStatus": [_opt("message", 5, "volume_status", "VolumeStatus")],
    "api.core.v1.EmptyDirVolumeSource": [_opt("int32", 3, "mode")],
    "api.core.v1.SecretVolumeSource": [_opt("int64", 5, "default_user")],
    "api.core.v1.DownwardAPIVolumeSource": [_opt("int64", 3, "default_user")],
    "api.core.v1.ConfigMapVolumeSource": [_opt("int64", 5, "default_user")],
    "api.core.v1.ProjectedVolumeSource": [_opt("int64", 3, "default_user")],
    "api.core.v1.KeyToPath": [_opt("int64", 4, "user")],
    "api.core.v1.DownwardAPIVolumeFile": [_opt("int64", 5, "user")],
    "api.core.v1.ServiceAccountTokenProjection": [_opt("int64", 4, "user")],
    "api.core.v1.ClusterTrustBundleProjection": [_opt("int64", 6, "user")],
    "api.core.v1.PodCertificateProjection": [_opt("int64", 8, "user")],
    "api.core.v1.ResourceHealth": [_opt("string", 6, "message")],
    "api.core.v1.HttpGetAction": [_opt("string", 6, "protocol")],
    "api.core.v1.GrpcAction": [_opt("string", 3, "mode")],
    "api.core.v1.PersistentVolumeClaimStatus": [
        _opt("message", 10, "health_status", "VolumeHealthStatus")],
    # autoscaling/v2/generated.proto at the same commit.
    "api.autoscaling.v2.HorizontalPodAutoscalerCondition": [_opt("int64", 6, "observed_generation")],
}
ADDED_MESSAGES = {
    "PodSchedulingGroup": [_opt("string", 1, "pod_group_name")],
    "EvictionResponder": [_opt("string", 1, "name"), _opt("int32", 2, "priority")],
    "NodeAllocatableResourceClaimStatus": [
        _opt("string", 1, "resource_claim_name"), _rep("string", 2, "containers"),
        _rep("message", 4, "mapping", "NodeAllocatableMappedResources"),
        _rep("message", 5, "overhead", "NodeAllocatableOverheadResources")],
    "NodeAllocatableMappedResources": [_opt("string", 1, "name"), _opt("message", 2, "quantity", Q)],
    "NodeAllocatableOverheadResources": [_opt("string", 1, "name"),
                                         _opt("message", 2, "per_pod", Q),
                                         _opt("message", 3, "per_container", Q)],
    "PodVolumeHealth": [_opt("string", 1, "name"),
                        _rep("message", 2, "health_conditions", "VolumeHealthCondition"),
                        _opt("message", 3, "last_transition_time", T)],
    "VolumeHealthCondition": [_opt("string", 1, "status"), _opt("string", 2, "reason"),
                              _opt("string", 3, "message")],
    "VolumeStatus": [_opt("message", 1, "image", "ImageVolumeStatus")],
    "ImageVolumeStatus": [_opt("string", 1, "image_ref")],
    "NodePodPreemptionPolicy": [_rep("string", 1, "disable_resize_preemption")],
    "VolumeHealthStatus": [_rep("message", 1, "health_conditions", "VolumeHealthCondition"),
                           _opt("message", 2, "last_transition_time", T)],
}
# Tags Kubernetes has since retired (reserved, no longer in the JSON form either).
REMOVED_FIELDS = {("api.core.v1.PodSpec", 42)}  # workloadRef, tombstoned in 1.36

def patched(msgs):
    for name, fields in ADDED_MESSAGES.items():
        assert "api.core.v1." + name not in msgs, name
        msgs["api.core.v1." + name] = (CORE, fields)
    for name, fields in ADDED_FIELDS.items():
        mod, have = msgs[name]
        tags = {f[0] for f in have}
        assert not tags & {f[0] for f in fields}, name
        msgs[name] = (mod, have + fields)
    for name, tag in REMOVED_FIELDS:
        mod, have = msgs[name]
        assert any(f[0] == tag for f in have), (name, tag)
        msgs[name] = (mod, [f for f in have if f[0] != tag])
    return msgs

def pb_messages():
    msgs = {}
    for path in glob.glob(PB + "/**/mod.rs", recursive=True):
        mod = os.path.relpath(os.path.dirname(path), PB).split(os.sep)
        text = open(path).read()
        for m in re.finditer(r"^pub struct (\w+) \{\n(.*?)^\}", text, re.S | re.M):
            name, body = m.group(1), m.group(2)
            fields = []
            for f in re.finditer(r"#\[prost\(([^\]]*)\)\]\s*pub (r#)?(\w+):\s*(.*?),\n(?=\s*(///|#\[|pub |$))", body, re.S):
                attrs, fname, ty = f.group(1), f.group(3), " ".join(f.group(4).split())
                tag = int(re.search(r'tag = "(\d+)"', attrs).group(1))
                fields.append((tag, fname, attrs, ty))
            msgs[".".join(mod + [name])] = (mod, fields)
    return msgs

def resolve(mod, ty):
    """The full name of the message type `ty` used in module `mod`."""
    inner = ty
    for wrap in ("::core::option::Option<", "::prost::alloc::vec::Vec<"):
        if inner.startswith(wrap):
            inner = inner[len(wrap):-1]
    if inner.startswith("::prost::alloc::collections::BTreeMap<"):
        inner = inner[len("::prost::alloc::collections::BTreeMap<"):-1].split(",", 1)[1].strip()
    parts = inner.strip().rstrip(",").strip().split("::")
    base = list(mod)
    while parts and parts[0] == "super":
        base.pop(); parts.pop(0)
    return ".".join(base + parts)

def oa_json_names():
    names = {}
    for path in glob.glob(OA + "/**/*.rs", recursive=True):
        mod = os.path.relpath(os.path.dirname(path), OA).split(os.sep)
        text = open(path).read()
        s = re.search(r"^pub struct (\w+)", text, re.M)
        if not s:
            continue
        keys = re.findall(r'"([A-Za-z0-9$]+)" => Field::Key_', text)
        names[".".join(mod + [s.group(1)]).lower()] = {k.lower(): k for k in keys}
    return names

def kind_of(attrs):
    a = attrs.replace(" ", "")
    repeated = ",repeated," in a + ","
    if a.startswith('btree_map="string,string"'):
        return "Map(&V::String)", False
    if a.startswith('btree_map="string,bytes"'):
        return "Map(&V::Bytes)", False
    if a.startswith('btree_map="string,message"'):
        return "Map(&V::Message(M))", False
    head = a.split(",")[0].split("=")[0]
    scalar = {"string": "V::String", "bool": "V::Bool", "int32": "V::Int", "int64": "V::Int",
              "bytes": "V::Bytes", "double": "V::Double", "message": "V::Message(M)"}[head]
    return scalar, repeated

def main():
    msgs, oa = patched(pb_messages()), oa_json_names()
    order, seen, todo = [], set(), list(ROOTS)
    while todo:
        name = todo.pop(0)
        if name in seen or name in SPECIAL:
            continue
        seen.add(name); order.append(name)
        mod, fields = msgs[name]
        for tag, fname, attrs, ty in fields:
            if "message" in attrs:
                todo.append(resolve(mod, ty))
    index = {n: i for i, n in enumerate(order)}
    # An inlined struct has no schema of its own in k8s-openapi: its JSON names are its
    # parent's.
    for name in order:
        mod, fields = msgs[name]
        parent = oa.get(name.lower())
        for tag, fname, attrs, ty in fields if parent else []:
            target = resolve(mod, ty) if "message" in attrs else None
            if (fname.replace("_", "").lower() not in parent and target in msgs
                    and target.lower() not in oa
                    and all(f[1].replace("_", "").lower() in parent for f in msgs[target][1])):
                oa[target.lower()] = parent
    out = []
    w = out.append
    w("//! Generated by `scripts/gen_protobuf_schema.py` from the k8s-pb (field tags) and")
    w("//! k8s-openapi (JSON names) crates, plus the fields newer than k8s-pb that the script lists")
    w("//! with their Kubernetes tags: do not edit by hand. The protobuf messages of the kinds")
    w("//! listwatch serves, for [`super::protobuf_generic`].")
    w("")
    w("use super::protobuf_generic::{Field, Message, Special, Value as V};")
    w("")
    w("/// Index in [`MESSAGES`] of each served kind's message: (apiVersion, kind, index).")
    w("pub const ROOTS: &[(&str, &str, usize)] = &[")
    for r in ROOTS:
        parts = r.split(".")
        group = parts[1]
        group = {"core": "", "coordination": "coordination.k8s.io",
                 "networking": "networking.k8s.io", "rbac": "rbac.authorization.k8s.io",
                 "discovery": "discovery.k8s.io", "storage": "storage.k8s.io",
                 "scheduling": "scheduling.k8s.io", "events": "events.k8s.io"}.get(group, group)
        api_version = f"{group}/{parts[2]}" if group else parts[2]
        w(f'    ("{api_version}", "{parts[-1]}", {index[r]}),')
    w("];")
    w("")
    w("/// Every message reachable from [`ROOTS`].")
    w("pub static MESSAGES: &[Message] = &[")
    assert "apimachinery.pkg.apis.meta.v1.Duration" not in index, "Duration needs a Special"
    missing = []
    for name in order:
        mod, fields = msgs[name]
        json = oa.get(name.lower(), {})
        w(f'    Message {{ name: "{name}", fields: &[')
        for tag, fname, attrs, ty in fields:
            jname = json.get(fname.replace("_", "").lower())
            target = resolve(mod, ty) if "message" in attrs else None
            if jname is None and target in msgs and target not in SPECIAL and json and all(
                    f[1].replace("_", "").lower() in json for f in msgs[target][1]):
                # A Go struct embedded inline: its own message on the wire, its fields
                # flattened into this object in JSON.
                w(f'        Field {{ tag: {tag}, json: "", value: V::Inline({index[target]}), repeated: false }},')
                continue
            if jname is None:
                missing.append(f"{name}.{fname}")
                parts = fname.split("_")
                jname = parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
            kind, repeated = kind_of(attrs)
            if "Message(M)" in kind:
                kind = kind.replace("V::Message(M)", f"V::Special(Special::{SPECIAL[target]})" if target in SPECIAL else f"V::Message({index[target]})")
            w(f'        Field {{ tag: {tag}, json: "{jname}", value: {kind if kind.startswith("V::") else "V::" + kind}, repeated: {str(repeated).lower()} }},')
        w("    ] },")
    w("];")
    print("\n".join(out))
    for m in missing:
        print("no JSON name in k8s-openapi for", m, file=sys.stderr)

main()
