//! CustomResourceDefinitions end to end, driven by the real kubectl 1.32 against a
//! `listwatch serve` child process: a CRD applied, established and served; custom objects
//! created, listed with their printer columns, explained, scaled, patched through the status
//! subresource, refused when they break the schema (every violation named, nothing stored),
//! pruned and defaulted; CEL validation rules enforced (a bad update refused with the rule's
//! message, a transition rule comparing with the stored object) and rules that do not compile
//! or cost too much refused with the CRD; the CRD deleted with its objects; names that
//! conflict refused in the conditions; definitions that are not structural refused;
//! everything kept across a `kill -9`; a key the store could not read back refused.

mod common;

use common::{http_json, item_names, TestServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Ready
      type: string
      jsonPath: .status.conditions[?(@.type=="Ready")].status
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    selectableFields:
    - jsonPath: .spec.image
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cronSpec]
            properties:
              cronSpec:
                type: string
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image:
                type: string
                maxLength: 40
              replicas:
                type: integer
                minimum: 1
                maximum: 10
                default: 1
          status:
            type: object
            properties:
              replicas: {type: integer}
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

const CRONTAB: &str = r#"apiVersion: stable.example.com/v1
kind: CronTab
metadata:
  name: nightly
spec:
  cronSpec: "0 3 * * *"
  image: backup:1.0
"#;

fn established(srv: &TestServer) {
    srv.kubectl_ok(&[
        "wait",
        "--for=condition=established",
        "--timeout=20s",
        "crd/crontabs.stable.example.com",
    ]);
}

fn condition<'a>(crd: &'a Value, type_: &str) -> &'a Value {
    crd["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {}", crd["status"]))
}

/// Polls `f` every 50 ms until it is true or `limit` passes; panics with `what` then.
fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_crd_is_established_and_its_objects_served_as_kubectl_expects() {
    let srv = TestServer::start();
    let crd = srv.write_file("crd.yaml", CRD);
    srv.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    established(&srv);
    let got = srv.kubectl_json(&["get", "crd", "crontabs.stable.example.com", "-o", "json"]);
    assert_eq!(condition(&got, "NamesAccepted")["status"], "True");
    assert_eq!(condition(&got, "NamesAccepted")["reason"], "NoConflicts");
    assert_eq!(condition(&got, "Established")["status"], "True");
    assert_eq!(got["status"]["acceptedNames"]["listKind"], "CronTabList");
    assert_eq!(got["status"]["storedVersions"], json!(["v1"]));

    // Discovery: kubectl's own resource list has it, with its short name.
    let resources = srv.kubectl_ok(&["api-resources", "--api-group=stable.example.com"]);
    assert!(
        resources.contains("crontabs") && resources.contains("ct") && resources.contains("CronTab"),
        "{resources}"
    );
    // From a cold cache, kubectl 1.32 asks for aggregated discovery and needs nothing else:
    // no request per group version.
    let cold = format!("--cache-dir={}", srv.dir().join("cold-cache").display());
    let out = srv.kubectl(&["api-resources", "-v=6", &cold]);
    let (listed, log) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{log}");
    assert!(
        listed.contains("crontabs") && listed.contains("deployments"),
        "{listed}"
    );
    assert!(log.contains("/apis?timeout=20s 200 OK"), "{log}");
    assert!(
        !log.contains("/apis/apps/v1") && !log.contains("/apis/stable.example.com/v1"),
        "discovery per group version: {log}"
    );

    // Create; the schema's default is applied.
    let ct = srv.write_file("ct.yaml", CRONTAB);
    srv.kubectl_ok(&["apply", "-f", ct.to_str().unwrap()]);
    let obj = srv.kubectl_json(&["get", "ct", "nightly", "-o", "json"]);
    assert_eq!(obj["apiVersion"], "stable.example.com/v1");
    assert_eq!(obj["spec"]["replicas"], 1, "default applied: {obj}");
    assert_eq!(obj["metadata"]["generation"], 1);

    // The printer columns, by their short name and through the `all` category.
    let table = srv.kubectl_ok(&["get", "ct"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "SPEC", "REPLICAS", "READY", "AGE"],
        "{table}"
    );
    let row = lines.next().unwrap_or_default();
    assert!(
        row.starts_with("nightly") && row.contains("0 3 * * *"),
        "{table}"
    );
    let all = srv.kubectl_ok(&["get", "all"]);
    assert!(all.contains("crontab.stable.example.com/nightly"), "{all}");

    // explain reads the published OpenAPI v3 schema.
    let explained = srv.kubectl_ok(&["explain", "crontab.spec"]);
    assert!(
        explained.contains("cronSpec") && explained.contains("-required-"),
        "{explained}"
    );

    // The status subresource: written through it, ignored through the main resource.
    srv.kubectl_ok(&[
        "patch",
        "ct",
        "nightly",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":2,"conditions":[{"type":"Ready","status":"True"}]}}"#,
    ]);
    srv.kubectl_ok(&[
        "patch",
        "ct",
        "nightly",
        "--type=merge",
        "-p",
        r#"{"spec":{"image":"backup:1.1"},"status":{"replicas":9}}"#,
    ]);
    let obj = srv.kubectl_json(&["get", "ct", "nightly", "-o", "json"]);
    assert_eq!(obj["status"]["replicas"], 2, "{obj}");
    assert_eq!(obj["spec"]["image"], "backup:1.1");
    assert_eq!(
        obj["metadata"]["generation"], 2,
        "a spec change bumps the generation"
    );
    let table = srv.kubectl_ok(&["get", "ct", "nightly", "--no-headers"]);
    assert!(
        table.split_whitespace().any(|c| c == "True"),
        "Ready column: {table}"
    );

    // A selectable field, and one the CRD does not declare.
    let picked = srv.kubectl_json(&[
        "get",
        "ct",
        "--field-selector",
        "spec.image=backup:1.1",
        "-o",
        "json",
    ]);
    assert_eq!(item_names(&picked), ["nightly"]);
    let none = srv.kubectl_json(&[
        "get",
        "ct",
        "--field-selector",
        "spec.image=other",
        "-o",
        "json",
    ]);
    assert!(item_names(&none).is_empty(), "{none}");
    let err = srv.kubectl_err(&["get", "ct", "--field-selector", "spec.cronSpec=x"]);
    assert!(err.contains("spec.cronSpec"), "{err}");

    // The scale subresource.
    srv.kubectl_ok(&["scale", "ct", "nightly", "--replicas=4"]);
    let obj = srv.kubectl_json(&["get", "ct", "nightly", "-o", "json"]);
    assert_eq!(obj["spec"]["replicas"], 4);
    let (code, scale) = http_json(
        "GET",
        &format!(
            "{}/apis/stable.example.com/v1/namespaces/default/crontabs/nightly/scale",
            srv.url
        ),
        None,
    );
    assert_eq!(code, 200, "{scale}");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 4);
    assert_eq!(scale["status"]["replicas"], 2);

    // Strategic merge patch is not for custom objects: 415.
    let err = srv.kubectl_err(&["patch", "ct", "nightly", "-p", r#"{"spec":{"image":"x"}}"#]);
    assert!(err.contains("strategic-merge-patch"), "{err}");

    // Breaking the schema: a 422 naming every field, and nothing stored.
    let bad = srv.write_file(
        "bad.yaml",
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: bad\nspec:\n  cronSpec: nope\n  replicas: 20\n",
    );
    let err = srv.kubectl_err(&["create", "-f", bad.to_str().unwrap()]);
    assert!(err.contains("is invalid"), "{err}");
    assert!(
        err.contains("spec.cronSpec") && err.contains("spec.replicas"),
        "{err}"
    );
    assert!(err.contains("less than or equal to 10"), "{err}");
    let (code, _) = http_json(
        "GET",
        &format!(
            "{}/apis/stable.example.com/v1/namespaces/default/crontabs/bad",
            srv.url
        ),
        None,
    );
    assert_eq!(code, 404, "a refused object is not stored");

    // Unknown fields: refused under kubectl's default (Strict), pruned without validation.
    let extra = srv.write_file(
        "extra.yaml",
        "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: extra\nspec:\n  cronSpec: '* * * * *'\n  colour: red\n",
    );
    let err = srv.kubectl_err(&["create", "-f", extra.to_str().unwrap()]);
    assert!(err.contains("unknown field \"spec.colour\""), "{err}");
    srv.kubectl_ok(&["create", "--validate=false", "-f", extra.to_str().unwrap()]);
    let obj = srv.kubectl_json(&["get", "ct", "extra", "-o", "json"]);
    assert!(obj["spec"].get("colour").is_none(), "pruned: {obj}");
    assert_eq!(obj["spec"]["replicas"], 1);

    // Deleting the CRD deletes its objects and stops serving the resource; a watch sees
    // the objects go.
    let mut watch = srv
        .kubectl_cmd(&[
            "get",
            "ct",
            "--watch-only",
            "--output-watch-events",
            "--no-headers",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting kubectl get --watch");
    std::thread::sleep(Duration::from_millis(500));
    srv.kubectl_ok(&[
        "delete",
        "crd",
        "crontabs.stable.example.com",
        "--timeout=30s",
    ]);
    let url = format!(
        "{}/apis/stable.example.com/v1/namespaces/default/crontabs",
        srv.url
    );
    eventually(
        Duration::from_secs(20),
        "the resource to stop being served",
        || http_json("GET", &url, None).0 == 404,
    );
    let crds = srv.kubectl_json(&["get", "crd", "-o", "json"]);
    assert!(item_names(&crds).is_empty(), "{crds}");
    let _ = watch.kill();
    let out = watch.wait_with_output().expect("kubectl watch output");
    let events = String::from_utf8_lossy(&out.stdout);
    for name in ["nightly", "extra"] {
        assert!(
            events
                .lines()
                .any(|l| l.starts_with("DELETED") && l.contains(name)),
            "no DELETED for {name} in:\n{events}"
        );
    }
    // Recreated, it starts empty.
    srv.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    established(&srv);
    let list = srv.kubectl_json(&["get", "ct", "-o", "json"]);
    assert!(item_names(&list).is_empty(), "{list}");
}

const GATES: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gates.rules.example.com
spec:
  group: rules.example.com
  scope: Namespaced
  names: {plural: gates, singular: gate, kind: Gate}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.replicas <= self.maxReplicas
              message: replicas must not exceed maxReplicas
            - rule: self.replicas <= oldSelf.replicas + 2
              messageExpression: "'replicas may grow by 2 at a time, not from ' + string(oldSelf.replicas) + ' to ' + string(self.replicas)"
            properties:
              replicas: {type: integer}
              maxReplicas: {type: integer}
              owner:
                type: string
                maxLength: 64
                x-kubernetes-validations:
                - rule: self == oldSelf
                  message: owner is immutable
                  reason: FieldValueForbidden
              tags:
                type: array
                maxItems: 10
                items: {type: string, maxLength: 32}
                x-kubernetes-validations:
                - rule: self.all(t, t.matches('^[a-z]+$'))
                  message: tags are lowercase words
"#;

#[test]
fn cel_rules_refuse_bad_writes_and_bad_definitions() {
    let srv = TestServer::start();
    let crd = srv.write_file("gates.yaml", GATES);
    srv.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    let url = format!(
        "{}/apis/rules.example.com/v1/namespaces/default/gates",
        srv.url
    );
    eventually(Duration::from_secs(20), "gates to be served", || {
        http_json("GET", &url, None).0 == 200
    });
    let gate = srv.write_file(
        "gate.yaml",
        "apiVersion: rules.example.com/v1\nkind: Gate\nmetadata:\n  name: g\nspec:\n  replicas: 1\n  maxReplicas: 5\n  owner: alice\n  tags: [web]\n",
    );
    srv.kubectl_ok(&["create", "-f", gate.to_str().unwrap()]);

    // A create that breaks a rule: the rule's message, on the rule's field, nothing stored.
    let over = srv.write_file(
        "over.yaml",
        "apiVersion: rules.example.com/v1\nkind: Gate\nmetadata:\n  name: over\nspec:\n  replicas: 9\n  maxReplicas: 5\n  tags: [Web]\n",
    );
    let err = srv.kubectl_err(&["create", "-f", over.to_str().unwrap()]);
    assert!(err.contains("is invalid"), "{err}");
    assert!(
        err.contains("spec: Invalid value: \"object\": replicas must not exceed maxReplicas"),
        "{err}"
    );
    assert!(
        err.contains("spec.tags: Invalid value: \"array\": tags are lowercase words"),
        "{err}"
    );
    assert_eq!(http_json("GET", &format!("{url}/over"), None).0, 404);

    // Bad updates: a transition rule (with its messageExpression), and an immutable field.
    let err = srv.kubectl_err(&[
        "patch",
        "gate",
        "g",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":4}}"#,
    ]);
    assert!(
        err.contains("replicas may grow by 2 at a time, not from 1 to 4"),
        "{err}"
    );
    let err = srv.kubectl_err(&[
        "patch",
        "gate",
        "g",
        "--type=merge",
        "-p",
        r#"{"spec":{"owner":"bob"}}"#,
    ]);
    assert!(
        err.contains("spec.owner: Forbidden: owner is immutable"),
        "{err}"
    );
    let obj = srv.kubectl_json(&["get", "gate", "g", "-o", "json"]);
    assert_eq!(
        (
            obj["spec"]["replicas"].clone(),
            obj["spec"]["owner"].clone()
        ),
        (json!(1), json!("alice"))
    );
    // A good one goes through.
    srv.kubectl_ok(&[
        "patch",
        "gate",
        "g",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ]);
    let obj = srv.kubectl_json(&["get", "gate", "g", "-o", "json"]);
    assert_eq!(obj["spec"]["replicas"], 3);

    // A rule that does not compile, and one whose cost has no bound, refuse the CRD.
    let broken = GATES
        .replace(
            "self.replicas <= self.maxReplicas",
            "self.replicas <= self.maxReplica",
        )
        .replace("                maxItems: 10\n", "");
    let broken = srv.write_file(
        "broken-gates.yaml",
        &broken.replace(
            "self.all(t, t.matches('^[a-z]+$'))",
            "self.all(t, self.exists(u, t == u))",
        ),
    );
    let err = srv.kubectl_err(&["apply", "-f", broken.to_str().unwrap()]);
    assert!(
        err.contains("x-kubernetes-validations[0].rule: Invalid value"),
        "{err}"
    );
    assert!(
        err.contains("compilation failed: ERROR: <input>:1:"),
        "{err}"
    );
    assert!(err.contains("undefined field 'maxReplica'"), "{err}");
    assert!(
        err.contains("properties[tags].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of"),
        "{err}"
    );
    // Refused: the stored definition still has its rules.
    let err = srv.kubectl_err(&[
        "patch",
        "gate",
        "g",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":9}}"#,
    ]);
    assert!(
        err.contains("replicas must not exceed maxReplicas"),
        "{err}"
    );

    // A rule calling a Kubernetes library this server lacks is accepted with a warning and
    // not enforced; the other rules still are.
    let quantity = GATES.replace(
        "            - rule: self.replicas <= self.maxReplicas\n",
        "            - rule: quantity(string(self.replicas)).isLessThan(quantity('100'))\n            - rule: self.replicas <= self.maxReplicas\n",
    );
    let quantity = srv.write_file("gates-quantity.yaml", &quantity);
    let out = srv.kubectl(&["apply", "-f", quantity.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("x-kubernetes-validations[0]: the rule calls quantity, isLessThan which this server does not have"),
        "warned: {said}"
    );
    let err = srv.kubectl_err(&[
        "patch",
        "gate",
        "g",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":9}}"#,
    ]);
    assert!(
        err.contains("replicas must not exceed maxReplicas"),
        "{err}"
    );
}

#[test]
fn conflicting_names_are_refused_in_the_conditions() {
    let srv = TestServer::start();
    let crd = srv.write_file("crd.yaml", CRD);
    srv.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    established(&srv);
    let other = CRD
        .replace("crontabs.stable.example.com", "timers.stable.example.com")
        .replace("plural: crontabs", "plural: timers")
        .replace("singular: crontab", "singular: timer")
        .replace("kind: CronTab", "kind: Timer");
    let other = srv.write_file("other.yaml", &other);
    srv.kubectl_ok(&["apply", "-f", other.to_str().unwrap()]);
    let mut got = Value::Null;
    eventually(
        Duration::from_secs(10),
        "the NamesAccepted condition",
        || {
            got = srv.kubectl_json(&["get", "crd", "timers.stable.example.com", "-o", "json"]);
            got["status"]["conditions"].is_array()
        },
    );
    let names = condition(&got, "NamesAccepted");
    assert_eq!(names["status"], "False", "{got}");
    assert_eq!(names["reason"], "ShortNamesConflict");
    assert_eq!(names["message"], "\"ct\" is already in use");
    assert_eq!(condition(&got, "Established")["status"], "False");
    let (code, _) = http_json(
        "GET",
        &format!("{}/apis/stable.example.com/v1/timers", srv.url),
        None,
    );
    assert_eq!(
        code, 404,
        "a CRD whose names are not accepted is not served"
    );
    // Renaming the short name resolves it.
    srv.kubectl_ok(&[
        "patch",
        "crd",
        "timers.stable.example.com",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/names/shortNames","value":["tm"]}]"#,
    ]);
    srv.kubectl_ok(&[
        "wait",
        "--for=condition=established",
        "--timeout=20s",
        "crd/timers.stable.example.com",
    ]);
    let list = srv.kubectl_json(&["get", "tm", "-o", "json"]);
    assert_eq!(list["kind"], "List");
}

#[test]
fn definitions_that_are_not_structural_or_valid_are_refused() {
    let srv = TestServer::start();
    let broken = CRD
        .replace(
            "          spec:\n            type: object\n",
            "          spec:\n",
        )
        .replace("shortNames: [ct]", "shortNames: [CT]")
        .replace("storage: true", "storage: false");
    let file = srv.write_file("broken.yaml", &broken);
    let err = srv.kubectl_err(&["create", "-f", file.to_str().unwrap()]);
    for field in [
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
        "spec.names.shortNames[0]",
        "spec.versions: Invalid value",
    ] {
        assert!(err.contains(field), "{field} not named in: {err}");
    }
    let crds = srv.kubectl_json(&["get", "crd", "-o", "json"]);
    assert!(item_names(&crds).is_empty(), "nothing stored: {crds}");
}

#[test]
fn crds_and_their_objects_survive_kill_9() {
    let srv = TestServer::start();
    let crd = srv.write_file("crd.yaml", CRD);
    srv.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    established(&srv);
    let ct = srv.write_file("ct.yaml", CRONTAB);
    srv.kubectl_ok(&["create", "-f", ct.to_str().unwrap()]);
    let dir = srv.kill9();
    let srv = TestServer::start_in(dir, &[]);
    // Served as soon as the server is ready: no wait needed.
    let obj = srv.kubectl_json(&[
        "get",
        "crontabs.stable.example.com",
        "nightly",
        "-o",
        "json",
    ]);
    assert_eq!(obj["spec"]["cronSpec"], "0 3 * * *");
    assert_eq!(obj["spec"]["replicas"], 1);
}

/// serde_json's private raw-value token as a key (the fuzzers' finding, first in ConfigMap
/// data, where keys are now validated): in a custom object whose schema leaves keys free it
/// would be stored as JSON the server no longer reads back (a create answered 201, then
/// every GET a 500). The create is refused with a 400 that names the key, and nothing is
/// stored; the same text as a value is an ordinary string.
#[test]
fn a_key_the_store_cannot_read_back_is_refused_in_custom_objects() {
    let srv = TestServer::start();
    let free = CRD.replace(
        "          spec:\n            type: object\n            required: [cronSpec]\n",
        "          spec:\n            type: object\n            x-kubernetes-preserve-unknown-fields: true\n            required: [cronSpec]\n",
    );
    assert_ne!(free, CRD, "the schema leaves spec's keys free");
    let crd = srv.write_file("crd.yaml", &free);
    srv.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()]);
    established(&srv);
    let token = "$serde_json::private::RawValue";
    let collection = "/apis/stable.example.com/v1/namespaces/default/crontabs";
    // `kubectl create --raw` names no media type, which the listener without authentication
    // refuses (a page in a browser could send such a write); the TLS listener reads it as
    // JSON, as kube-apiserver does.
    let tls = srv.dir().join("kubeconfig-tls");
    srv.write_admin_kubeconfig(&tls, &srv.https_url);
    let tls = tls.to_str().unwrap();
    // Sent as raw text, so that the token is not the first key of its map (serde_json would
    // take such a map for a raw value while reading the body).
    let body = |name: &str, free: &str| {
        format!(
            r#"{{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{{"name":"{name}"}},"spec":{{"cronSpec":"0 3 * * *","free":{free}}}}}"#
        )
    };
    // Writes `free` as spec.free of a new object `name`, with kubectl; its exit status, stderr.
    let create = |name: &str, free: String| {
        let file = srv.write_file(&format!("{name}.json"), &body(name, &free));
        let path = file.to_str().unwrap().to_string();
        let out = srv.kubectl(&[
            "--kubeconfig",
            tls,
            "create",
            "--raw",
            collection,
            "-f",
            &path,
        ]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (created, err) = create("token", format!(r#"{{"a":"b","{token}":"x"}}"#));
    assert!(
        !created && err.contains("BadRequest") && err.contains(token),
        "a 400 naming the key: {err}"
    );
    let (code, got) = http_json("GET", &format!("{}{collection}/token", srv.url), None);
    assert_eq!(code, 404, "nothing stored: {got}");
    let (created, err) = create("value", format!(r#"{{"a":"{token}"}}"#));
    assert!(created, "{err}");
    let (code, got) = http_json("GET", &format!("{}{collection}/value", srv.url), None);
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["spec"]["free"]["a"], token);
}
