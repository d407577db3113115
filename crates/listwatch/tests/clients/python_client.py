"""Drives listwatch with the official Python Kubernetes client (PyPI `kubernetes`, 37.x).

Usage: python_client.py KUBECONFIG NAMESPACE

Creates NAMESPACE and some configmaps in it, lists (label selector, limit/continue
paging), patches, replaces and deletes them, watches its own writes live and again resumed
from a resourceVersion, and checks 404/409 errors. Prints one JSON object with what it
observed on stdout; tests/clients.rs asserts on it. Exits non-zero (with a traceback on
stderr) when a client call fails unexpectedly.
"""

import json
import sys
import threading

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException


def cm(name, labels, data):
    """A ConfigMap body as a plain dict (the client serialises dicts as they are)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": data,
    }


def status_of(call):
    """Runs `call`; returns (HTTP status, Status reason) of the ApiException it must raise."""
    try:
        call()
    except ApiException as e:
        reason = None
        try:
            reason = json.loads(e.body).get("reason")
        except (TypeError, ValueError):
            pass
        return [e.status, reason]
    raise AssertionError("expected an ApiException, the call succeeded")


def names(items):
    return [i.metadata.name for i in items]


def collect(ns, resource_version, timeout, out, stop_after=None):
    """Watches configmaps of `ns` from `resource_version` until the server ends the stream
    after `timeout` seconds, or until a DELETED event of `stop_after` arrived. Appends
    [type, name, resourceVersion, data] per event to `out`."""
    v1 = client.CoreV1Api()
    w = watch.Watch()
    for ev in w.stream(
        v1.list_namespaced_config_map,
        namespace=ns,
        resource_version=resource_version,
        timeout_seconds=timeout,
    ):
        obj = ev["object"]
        out.append(
            [ev["type"], obj.metadata.name, obj.metadata.resource_version, obj.data]
        )
        if stop_after is not None and ev["type"] == "DELETED" and obj.metadata.name == stop_after:
            w.stop()


def main():
    kubeconfig, ns = sys.argv[1], sys.argv[2]
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    result = {}

    created_ns = v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    result["namespace"] = created_ns.metadata.name
    result["namespace_phase"] = created_ns.status.phase if created_ns.status else None

    start = v1.list_namespaced_config_map(ns)
    result["initial_items"] = names(start.items)
    rv0 = start.metadata.resource_version

    # A live watch from the list's resourceVersion, in the background, while we write.
    live = []
    live_error = []

    def run_live():
        try:
            collect(ns, rv0, 20, live, stop_after="c")
        except Exception as e:  # reported in the output, the test fails on it
            live_error.append(repr(e))

    t = threading.Thread(target=run_live, daemon=True)
    t.start()

    a = v1.create_namespaced_config_map(ns, cm("a", {"app": "x"}, {"k1": "v1"}))
    result["created_a"] = {
        "uid_set": bool(a.metadata.uid),
        "rv_set": bool(a.metadata.resource_version),
        "created_ts_set": a.metadata.creation_timestamp is not None,
    }
    v1.create_namespaced_config_map(ns, cm("b", {"app": "y"}, {"k": "b0"}))
    v1.create_namespaced_config_map(ns, cm("c", {"app": "x"}, {"k": "c0"}))

    result["selector_app_x"] = names(
        v1.list_namespaced_config_map(ns, label_selector="app=x").items
    )
    result["selector_app_notin"] = names(
        v1.list_namespaced_config_map(ns, label_selector="app notin (x)").items
    )

    page1 = v1.list_namespaced_config_map(ns, limit=2)
    page2 = v1.list_namespaced_config_map(ns, limit=2, _continue=page1.metadata._continue)
    result["pages"] = [names(page1.items), names(page2.items)]
    result["page1_continue_set"] = bool(page1.metadata._continue)
    result["page1_remaining"] = page1.metadata.remaining_item_count
    result["page2_continue"] = page2.metadata._continue
    result["pages_same_rv"] = page1.metadata.resource_version == page2.metadata.resource_version

    patched = v1.patch_namespaced_config_map(
        "a", ns, {"metadata": {"labels": {"tier": "web"}}, "data": {"k2": "v2"}}
    )
    result["patched_data"] = patched.data
    result["patched_labels"] = patched.metadata.labels

    b = v1.read_namespaced_config_map("b", ns)
    stale_rv = b.metadata.resource_version
    b.data = {"k": "b1"}
    replaced = v1.replace_namespaced_config_map("b", ns, b)
    result["replaced_data"] = replaced.data
    result["replaced_rv_changed"] = replaced.metadata.resource_version != stale_rv
    stale = cm("b", {"app": "y"}, {"k": "stale"})
    stale["metadata"]["resourceVersion"] = stale_rv
    result["stale_replace"] = status_of(lambda: v1.replace_namespaced_config_map("b", ns, stale))

    v1.delete_namespaced_config_map("c", ns)

    result["missing_read"] = status_of(lambda: v1.read_namespaced_config_map("nope", ns))
    result["duplicate_create"] = status_of(
        lambda: v1.create_namespaced_config_map(ns, cm("a", {}, {}))
    )
    result["missing_delete"] = status_of(lambda: v1.delete_namespaced_config_map("c", ns))

    result["final_items"] = names(v1.list_namespaced_config_map(ns).items)

    t.join(30)
    result["live_thread_done"] = not t.is_alive()
    result["live_error"] = live_error
    result["live"] = [[e[0], e[1]] for e in live]
    rvs = [int(e[2]) for e in live]
    result["live_rvs_increasing"] = all(x < y for x, y in zip(rvs, rvs[1:]))
    result["live_rvs_after_list"] = all(r > int(rv0) for r in rvs)
    result["live_modified_a_data"] = next(
        (e[3] for e in live if e[0] == "MODIFIED" and e[1] == "a"), None
    )

    # Resume from the resourceVersion of the MODIFIED event of "a": exactly the later
    # events must come, then the stream ends at its timeout.
    resumed = []
    resume_from = next((e[2] for e in live if e[0] == "MODIFIED" and e[1] == "a"), None)
    if resume_from is not None:
        collect(ns, resume_from, 2, resumed)
    result["resumed"] = [[e[0], e[1]] for e in resumed]
    result["resumed_rvs"] = [e[2] for e in resumed]
    result["live_rvs_tail"] = [e[2] for e in live[4:]]

    # Server-side apply, as controllers written with this client do it.
    apply_ct = "application/apply-patch+yaml"
    cfg = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"k": "1"}}
    applied = v1.patch_namespaced_config_map(
        "ssa", ns, cfg, field_manager="py-apply", _content_type=apply_ct
    )
    result["ssa_created_managers"] = [
        [e.manager, e.operation] for e in applied.metadata.managed_fields
    ]
    v1.patch_namespaced_config_map("ssa", ns, {"data": {"k": "2"}}, field_manager="py-editor")
    result["ssa_conflict"] = status_of(
        lambda: v1.patch_namespaced_config_map(
            "ssa", ns, cfg, field_manager="py-apply", _content_type=apply_ct
        )
    )
    forced = v1.patch_namespaced_config_map(
        "ssa", ns, cfg, field_manager="py-apply", force=True, _content_type=apply_ct
    )
    result["ssa_forced_data"] = forced.data

    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
