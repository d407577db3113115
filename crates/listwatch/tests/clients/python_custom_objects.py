"""Drives listwatch's custom resources with the official Python Kubernetes client (PyPI
`kubernetes`, 37.x): ApiextensionsV1Api and CustomObjectsApi.

Usage: python_custom_objects.py KUBECONFIG

Creates a CRD and waits until it is Established, creates three custom objects, lists them,
then watches from the list's resourceVersion while another thread patches one and deletes
another, and checks that a schema violation is a 422 naming the field. Prints one JSON
object with what it observed; tests/clients.rs asserts on it.
"""

import json
import sys
import threading
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "stable.example.com", "v1", "crontabs"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "crontabs.stable.example.com"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "kind": "CronTab", "shortNames": ["ct"]},
        "versions": [{
            "name": VERSION, "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {
                    "type": "object",
                    "properties": {
                        "cronSpec": {"type": "string"},
                        "replicas": {"type": "integer", "minimum": 1, "default": 1},
                    },
                }},
            }},
        }],
    },
}


def crontab(name, spec):
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CronTab",
            "metadata": {"name": name}, "spec": spec}


def main():
    config.load_kube_config(config_file=sys.argv[1])
    ext = client.ApiextensionsV1Api()
    ext.create_custom_resource_definition(CRD)
    established = False
    for _ in range(200):
        crd = ext.read_custom_resource_definition("crontabs.stable.example.com")
        conds = (crd.status.conditions or []) if crd.status else []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            established = True
            break
        time.sleep(0.05)

    co = client.CustomObjectsApi()
    for n in ["a", "b", "c"]:
        co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                           crontab(n, {"cronSpec": "* * * * *"}))
    listed = co.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    rv = listed["metadata"]["resourceVersion"]

    def writer():
        time.sleep(0.3)
        co.patch_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "b",
                                          {"spec": {"replicas": 5}})
        co.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "a")

    t = threading.Thread(target=writer)
    t.start()
    events = []
    w = watch.Watch()
    for ev in w.stream(co.list_namespaced_custom_object, GROUP, VERSION, "default", PLURAL,
                       resource_version=rv, timeout_seconds=10):
        obj = ev["object"]
        events.append([ev["type"], obj["metadata"]["name"],
                       int(obj["metadata"]["resourceVersion"]),
                       obj.get("spec", {}).get("replicas")])
        if ev["type"] == "DELETED":
            w.stop()
    t.join()

    invalid = None
    try:
        co.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL,
                                           crontab("bad", {"replicas": 0}))
    except ApiException as e:
        body = json.loads(e.body)
        invalid = [e.status, body.get("reason"),
                   [c.get("field") for c in body.get("details", {}).get("causes", [])]]

    print(json.dumps({
        "established": established,
        "listed": [i["metadata"]["name"] for i in listed["items"]],
        "defaults": [i["spec"].get("replicas") for i in listed["items"]],
        "events": events,
        "invalid": invalid,
    }))


if __name__ == "__main__":
    main()
