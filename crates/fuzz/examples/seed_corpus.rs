//! Writes the hand-made seed inputs of every fuzz target into `fuzz/corpus/<target>/seed-*`
//! (overwriting earlier seeds, leaving the files the fuzzer found alone). The protobuf,
//! HPACK, HTTP/2 and WebSocket seeds are produced with the project's own encoders, so they
//! are what real peers send.
//!
//! Run: `cargo run -p fuzz --example seed_corpus`.

use api::continue_token::ContinueToken;
use api::managed_fields::apply::apply;
use api::managed_fields::Writer;
use api::patch::PatchKindHint;
use api::protobuf_wire::{put_delimited, MAGIC};
use apiserver::encoding::protobuf::unwrap_envelope;
use apiserver::encoding::protobuf_transcode::encode_object;
use apiserver::registry::resources::RESOURCES;
use apiserver::server::http2::frame::{
    self, flag, kind, put_frame, put_goaway, put_header_block, put_rst_stream, put_settings,
    put_window_update, setting, ErrorCode, PREFACE,
};
use apiserver::server::http2::hpack::encode_literal;
use bytes::BytesMut;
use std::path::{Path, PathBuf};

const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","namespace":"default","resourceVersion":"10","uid":"6f1c0e2a-1111-2222-3333-444455556666","labels":{"app":"web","tier":"front"},"annotations":{"a":"b"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web","uid":"u1","controller":true}],"finalizers":["x/y"]},"spec":{"nodeName":"node-1","containers":[{"name":"web","image":"nginx:1.27","ports":[{"containerPort":80,"protocol":"TCP"}],"env":[{"name":"A","value":"1"}],"resources":{"limits":{"cpu":"500m","memory":"128Mi"}}}],"tolerations":[{"key":"k","operator":"Exists","effect":"NoSchedule"}]},"status":{"phase":"Running","podIP":"10.0.0.5","conditions":[{"type":"Ready","status":"True"}]}}"#;
const DEPLOYMENT: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","labels":{"app":"web"},"finalizers":["a","b"]},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"nginx:1","ports":[{"containerPort":80,"protocol":"TCP"}],"env":[{"name":"A","value":"1"},{"name":"B","value":"2"}]},{"name":"side","image":"busybox"}],"volumes":[{"name":"v","emptyDir":{}}]}}}}"#;
const CONFIGMAP: &str = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"default"},"data":{"a":"1","b":"two"}}"#;
const NAMESPACE: &str =
    r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team-a","labels":{"x":"y"}}}"#;
const SERVICE: &str = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},"spec":{"selector":{"app":"web"},"ports":[{"port":80,"targetPort":8080,"protocol":"TCP"}],"type":"ClusterIP"}}"#;
const BINDING: &str = r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"web-1","namespace":"default"},"target":{"apiVersion":"v1","kind":"Node","name":"node-1"}}"#;
const EVICTION: &str = r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1","namespace":"default"},"deleteOptions":{"gracePeriodSeconds":0}}"#;

struct Seeds {
    root: PathBuf,
}

impl Seeds {
    fn put(&self, target: &str, name: &str, data: impl AsRef<[u8]>) {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        std::fs::write(dir.join(format!("seed-{name}")), data).expect("seed file");
    }
}

fn join(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The index in `RESOURCES` of a resource, as the protobuf_server target's first byte.
fn resource_index(group: &str, resource: &str) -> u8 {
    let i = RESOURCES
        .iter()
        .position(|r| r.group == group && r.resource == resource)
        .expect("a served resource");
    u8::try_from(i).expect("fewer than 256 resources")
}

fn protobuf(json: &str) -> Vec<u8> {
    encode_object(json.as_bytes())
        .expect("encodes")
        .expect("a kind with a protobuf message")
}

/// An HPACK block of literal fields.
fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        encode_literal(n.as_bytes(), v.as_bytes(), &mut out);
    }
    out
}

/// A masked client WebSocket frame.
fn ws_frame(fin: bool, op: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut out = vec![if fin { 0x80 } else { 0 } | op];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n <= 0xffff => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let s = Seeds { root };

    // Selectors.
    for (i, sel) in [
        "a in (x,y),!b",
        "app=web,tier!=db",
        "environment in (production, qa),tier notin (frontend)",
        "!canary",
        "example.com/app==web",
        "partition",
        "a>1,b<10",
        "k in (),x=",
    ]
    .iter()
    .enumerate()
    {
        s.put("label_selector", &i.to_string(), sel);
    }
    s.put(
        "label_selector",
        "object",
        r#"{"matchLabels":{"app":"web"},"matchExpressions":[{"key":"tier","operator":"In","values":["a","b"]},{"key":"x","operator":"DoesNotExist"},{"key":"y","operator":"NotIn","values":["z"]}]}"#,
    );
    for (i, sel) in [
        "metadata.name=foo",
        "spec.nodeName!=,status.phase==Running",
        r"metadata.name=a\,b\=c\\d",
        "a=b,,c=d",
        "metadata.namespace!=kube-system,involvedObject.kind=Pod",
    ]
    .iter()
    .enumerate()
    {
        s.put("field_selector", &i.to_string(), sel);
    }

    // resourceVersion, continue tokens, query strings.
    for (i, rv) in [
        "",
        "0",
        "12345",
        "18446744073709551615",
        "18446744073709551616",
        "-1",
        "007",
    ]
    .iter()
    .enumerate()
    {
        s.put("resource_version", &i.to_string(), rv);
    }
    let token = ContinueToken::after(42, "default/pod-7").encode();
    s.put("continue_token", "after", &token);
    s.put(
        "continue_token",
        "plain",
        ContinueToken {
            resource_version: 7,
            start_key: "kube-system/coredns".into(),
        }
        .encode(),
    );
    // kube-apiserver's own shape, padded (decoding accepts padding).
    s.put(
        "continue_token",
        "padded",
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NSwic3RhcnQiOiJucy94XHUwMDAwIn0=",
    );
    s.put(
        "continue_token",
        "dotdot",
        ContinueToken {
            resource_version: 3,
            start_key: "a/../b".into(),
        }
        .encode(),
    );
    for (i, q) in [
        "labelSelector=app%3Dweb&limit=500&resourceVersion=0".to_string(),
        "watch=true&allowWatchBookmarks=true&resourceVersion=123&timeoutSeconds=300".into(),
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
            .into(),
        format!("limit=2&continue={token}"),
        "fieldSelector=spec.nodeName%3Dnode-1&resourceVersion=10&resourceVersionMatch=Exact".into(),
        "labelSelector=a+in+(x,y),!b&fieldSelector=metadata.name!%3Dx&limit=0".into(),
    ]
    .iter()
    .enumerate()
    {
        s.put("list_options", &i.to_string(), q);
    }

    // Patches: base \0 patch.
    let deployment = DEPLOYMENT.as_bytes();
    let pod = POD.as_bytes();
    s.put(
        "json_patch",
        "ops",
        join(&[deployment, b"\0", br#"[{"op":"add","path":"/metadata/labels/b","value":"2"},{"op":"remove","path":"/metadata/finalizers/0"},{"op":"replace","path":"/spec/replicas","value":3},{"op":"test","path":"/spec/replicas","value":3},{"op":"move","from":"/metadata/labels/b","path":"/metadata/labels/c"},{"op":"copy","from":"/metadata/labels/c","path":"/metadata/annotations"}]"#]),
    );
    s.put(
        "json_patch",
        "escapes",
        join(&[pod, b"\0", br#"[{"op":"add","path":"/metadata/annotations/example.com~1x~0y","value":"v"},{"op":"add","path":"/spec/containers/-","value":{"name":"b","image":"b"}},{"op":"test","path":"/spec/containers/0/ports/0/containerPort","value":80.0}]"#]),
    );
    s.put(
        "json_patch",
        "default-base",
        br#"[{"op":"remove","path":"/spec/template/spec/containers/0/env"}]"#,
    );
    s.put(
        "merge_patch",
        "labels",
        join(&[deployment, b"\0", br#"{"metadata":{"labels":{"app":null,"b":"2"}},"spec":{"replicas":5,"template":{"spec":{"containers":[{"name":"x"}]}}}}"#]),
    );
    s.put("merge_patch", "replace", join(&[pod, b"\0", b"[1,2,null]"]));
    s.put(
        "merge_patch",
        "nested-null",
        br#"{"spec":{"template":null},"status":{"a":{"b":{"c":null}}}}"#,
    );
    s.put(
        "strategic_merge_patch",
        "containers",
        join(&[deployment, b"\0", br#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:2","env":[{"name":"A","$patch":"delete"},{"name":"C","value":"3"}]},{"name":"side","$patch":"delete"}],"$setElementOrder/containers":[{"name":"web"}]}}}}"#]),
    );
    s.put(
        "strategic_merge_patch",
        "directives",
        join(&[deployment, b"\0", br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["a"],"labels":{"$patch":"replace","x":"y"}},"spec":{"$retainKeys":["replicas","template"],"replicas":1}}"#]),
    );
    s.put(
        "strategic_merge_patch",
        "pod",
        join(&[pod, b"\0", br#"{"spec":{"containers":[{"name":"web","ports":[{"containerPort":443,"protocol":"TCP"}]}],"tolerations":[{"$patch":"replace"}]}}"#]),
    );
    s.put(
        "strategic_merge_patch",
        "unknown-kind",
        br#"{"kind":"Widget","spec":{"containers":[{"name":"z"}],"$patch":"merge"}}"#,
    );

    // Server-side apply: flags live \0 config, with a live object another manager applied.
    let writer = |manager: &'static str| Writer {
        manager,
        api_version: "apps/v1",
        kind: PatchKindHint::new("apps", "Deployment"),
        lists: None,
        status_only: false,
        has_status: true,
        now: "2026-01-01T00:00:00Z",
    };
    let config: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(DEPLOYMENT).expect("deployment");
    let live =
        apply(None, &config, &writer("kube-controller-manager"), false).expect("first apply");
    let live = serde_json::to_vec(&live).expect("live");
    let config2 = br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default","labels":{"app":"web2"}},"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"web","image":"nginx:2"}]}}}}"#;
    s.put("server_side_apply", "create", join(&[&[0], deployment]));
    s.put(
        "server_side_apply",
        "conflict",
        join(&[&[0], &live, b"\0", config2]),
    );
    s.put(
        "server_side_apply",
        "force",
        join(&[&[1], &live, b"\0", config2]),
    );
    s.put(
        "server_side_apply",
        "same-manager",
        join(&[&[8], &live, b"\0", config2]),
    );
    s.put(
        "server_side_apply",
        "status",
        join(&[&[6], &live, b"\0", br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"status":{"replicas":2,"conditions":[{"type":"Available","status":"True"}]}}"#]),
    );

    // JSON and YAML.
    s.put("json", "pod", POD);
    s.put("json", "huge-number", "[1e400,-1e400,18446744073709551616]");
    s.put(
        "json",
        "escapes",
        r#"{"a":"\ud83d\ude00\u00e9\n","b":"\ud800"}"#,
    );
    s.put("json", "deep", "[".repeat(129) + &"]".repeat(129));
    s.put("json", "trailing", "{\"a\":1} x");
    s.put(
        "yaml",
        "deployment",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  labels: {app: web}\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers:\n      - name: web\n        image: \"nginx:1\"\n        args: [\"-v\", '2']\n",
    );
    s.put(
        "yaml",
        "aliases",
        "a: &x [1, 2, 3]\nb: &y [*x, *x, *x]\nc: [*y, *y, *y]\nd: {<<: {k: v}, e: 1.5e3}\n",
    );
    s.put(
        "yaml",
        "scalars",
        "n: ~\nt: yes\nf: off\ni: 0x1f\no: 0o17\nfl: .inf\nnan: .nan\ns: !!str 12\nb: !!binary aGk=\nk: |\n  multi\n  line\n",
    );
    s.put("yaml", "multi-doc", "---\na: 1\n---\nb: 2\n");
    s.put("yaml", "json", CONFIGMAP);

    // Protobuf: resource subresource body, encoded by the server's own encoder.
    let pods = resource_index("", "pods");
    let configmaps = resource_index("", "configmaps");
    let deployments = resource_index("apps", "deployments");
    let namespaces = resource_index("", "namespaces");
    let services = resource_index("", "services");
    s.put(
        "protobuf_server",
        "pod",
        join(&[&[pods, 0], &protobuf(POD)]),
    );
    s.put(
        "protobuf_server",
        "configmap",
        join(&[&[configmaps, 0], &protobuf(CONFIGMAP)]),
    );
    s.put(
        "protobuf_server",
        "deployment",
        join(&[&[deployments, 0], &protobuf(DEPLOYMENT)]),
    );
    s.put(
        "protobuf_server",
        "namespace",
        join(&[&[namespaces, 0], &protobuf(NAMESPACE)]),
    );
    s.put(
        "protobuf_server",
        "service",
        join(&[&[services, 0], &protobuf(SERVICE)]),
    );
    s.put(
        "protobuf_server",
        "binding",
        join(&[&[pods, 1], &protobuf(BINDING)]),
    );
    s.put(
        "protobuf_server",
        "eviction",
        join(&[&[pods, 2], &protobuf(EVICTION)]),
    );

    // The client's protobuf readers: a bare object message, a watch stream (4-byte length +
    // WatchEvent{type, object: RawExtension{raw: enveloped object}}), a list.
    let (_, _, pod_message) = unwrap_envelope(&protobuf(POD)).expect("pod envelope");
    let event = |type_: &str, json: &str| {
        let mut raw_ext = Vec::new();
        put_delimited(&mut raw_ext, 1, &protobuf(json));
        let mut ev = Vec::new();
        put_delimited(&mut ev, 1, type_.as_bytes());
        put_delimited(&mut ev, 2, &raw_ext);
        let mut framed = (ev.len() as u32).to_be_bytes().to_vec();
        framed.extend_from_slice(&ev);
        framed
    };
    s.put("protobuf_client", "object", &pod_message);
    s.put(
        "protobuf_client",
        "stream",
        join(&[
            &[5],
            &event("ADDED", POD),
            &event("MODIFIED", CONFIGMAP),
            &event("DELETED", NAMESPACE),
        ]),
    );
    s.put("protobuf_client", "event", &event("ADDED", POD)[4..]);
    let mut list_message = Vec::new();
    let mut list_meta = Vec::new();
    put_delimited(&mut list_meta, 2, b"1234");
    put_delimited(&mut list_meta, 3, b"continue-token");
    put_delimited(&mut list_message, 1, &list_meta);
    put_delimited(&mut list_message, 2, &pod_message);
    put_delimited(&mut list_message, 2, &pod_message);
    let mut type_meta = Vec::new();
    put_delimited(&mut type_meta, 1, b"v1");
    put_delimited(&mut type_meta, 2, b"PodList");
    let mut unknown = Vec::new();
    put_delimited(&mut unknown, 1, &type_meta);
    put_delimited(&mut unknown, 2, &list_message);
    s.put("protobuf_client", "list", join(&[MAGIC, &unknown]));

    // JSON watch bodies: chunking, then lines.
    s.put(
        "watch_decoder",
        "events",
        join(&[
            &[3],
            br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"default","resourceVersion":"10","labels":{"app":"web"}}}}"#,
            b"\n",
            br#"{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"default","resourceVersion":"11"},"spec":{"containers":[{"name":"c","image":"i"}]}}}"#,
            b"\r\n\n",
            br#"{"object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"12"}},"type":"DELETED"}"#,
            b"\n",
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            b"\n",
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (12)","reason":"Expired","code":410}}"#,
        ]),
    );
    s.put(
        "watch_decoder",
        "typed",
        join(&[
            &[200],
            b"{\"type\":\"ADDED\",\"object\":",
            POD.as_bytes(),
            b"}\n",
        ]),
    );

    // HPACK: limit, then length-prefixed blocks sharing one dynamic table.
    let get = block(&[
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/api/v1/namespaces/default/pods?watch=1"),
        (":authority", "localhost"),
        ("accept", "application/json"),
    ]);
    // RFC 7541 C.4.1 (Huffman) and C.3.2 (indexed, with an incremental-indexing literal).
    let huffman: &[u8] = &[
        0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90,
        0xf4, 0xff,
    ];
    let indexed: &[u8] = &[
        0x82, 0x86, 0x84, 0xbe, 0x58, 0x08, 0x6e, 0x6f, 0x2d, 0x63, 0x61, 0x63, 0x68, 0x65,
    ];
    let size_update: &[u8] = &[0x3f, 0xe1, 0x1f, 0x82];
    let framed_blocks = |blocks: &[&[u8]]| {
        let mut out = vec![63u8];
        for b in blocks {
            out.push(u8::try_from(b.len()).expect("short block"));
            out.extend_from_slice(b);
        }
        out
    };
    s.put("hpack", "literals", framed_blocks(&[&get]));
    s.put("hpack", "huffman", framed_blocks(&[huffman, indexed]));
    s.put(
        "hpack",
        "size-update",
        framed_blocks(&[size_update, huffman]),
    );

    // HTTP/2 frames after the preface.
    let mut h2 = BytesMut::new();
    put_settings(
        &[
            (setting::INITIAL_WINDOW_SIZE, 1 << 20),
            (setting::MAX_FRAME_SIZE, 16_384),
        ],
        &mut h2,
    );
    put_frame(kind::SETTINGS, flag::ACK, 0, &[], &mut h2);
    put_window_update(0, 1 << 20, &mut h2);
    put_header_block(1, &get, true, frame::DEFAULT_MAX_FRAME, &mut h2);
    let post = block(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/api/v1/namespaces/default/configmaps"),
        ("content-type", "application/json"),
    ]);
    put_header_block(3, &post, false, 8, &mut h2);
    put_frame(kind::DATA, 0, 3, &CONFIGMAP.as_bytes()[..20], &mut h2);
    put_frame(
        kind::DATA,
        flag::END_STREAM | flag::PADDED,
        3,
        &join(&[&[2], &CONFIGMAP.as_bytes()[20..], &[0, 0]]),
        &mut h2,
    );
    put_frame(kind::PING, 0, 0, b"12345678", &mut h2);
    put_frame(kind::PRIORITY, 0, 5, &[0, 0, 0, 1, 16], &mut h2);
    put_rst_stream(1, ErrorCode::Cancel, &mut h2);
    let h2_requests = h2.to_vec();
    put_goaway(3, ErrorCode::NoError, b"bye", &mut h2);
    s.put("http2", "requests", &h2);
    let mut bad = BytesMut::new();
    put_frame(kind::CONTINUATION, flag::END_HEADERS, 1, &get, &mut bad);
    put_frame(kind::HEADERS, flag::END_HEADERS, 2, &get, &mut bad);
    s.put("http2", "protocol-errors", &bad);

    // WebSocket client frames.
    s.put(
        "websocket",
        "messages",
        join(&[
            &ws_frame(true, 0x1, b"hello"),
            &ws_frame(false, 0x1, b"frag"),
            &ws_frame(true, 0x0, b"ment"),
            &ws_frame(true, 0x9, b"ping"),
            &ws_frame(true, 0xA, b""),
            &ws_frame(true, 0x8, &[0x03, 0xe8]),
        ]),
    );
    s.put("websocket", "long", ws_frame(true, 0x2, &[7u8; 300]));
    s.put("websocket", "unmasked", [0x81, 0x02, b'h', b'i']);

    // Whole connections: HTTP/1.1 (and a WebSocket watch), and h2c with prior knowledge.
    let req = |head: &str, body: &[u8]| join(&[head.as_bytes(), body]);
    s.put(
        "connection",
        "get",
        "GET /api/v1/namespaces/default/pods?limit=1 HTTP/1.1\r\nHost: localhost\r\nAccept: application/json;as=Table;v=v1;g=meta.k8s.io\r\n\r\nGET /apis HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    s.put(
        "connection",
        "create",
        req(
            &format!(
                "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                CONFIGMAP.len()
            ),
            CONFIGMAP.as_bytes(),
        ),
    );
    let merge = br#"{"data":{"c":"3"}}"#;
    s.put(
        "connection",
        "patch",
        req(
            &format!(
                "PATCH /api/v1/namespaces/default/configmaps/cm HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/merge-patch+json\r\nContent-Length: {}\r\n\r\n",
                merge.len()
            ),
            merge,
        ),
    );
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: b\n";
    s.put(
        "connection",
        "apply",
        req(
            &format!(
                "PATCH /api/v1/namespaces/default/configmaps/applied?fieldManager=fuzz&force=true HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/apply-patch+yaml\r\nContent-Length: {}\r\n\r\n",
                yaml.len()
            ),
            yaml,
        ),
    );
    s.put(
        "connection",
        "chunked",
        req(
            "POST /api/v1/namespaces HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
            format!("{:x}\r\n{NAMESPACE}\r\n0\r\n\r\n", NAMESPACE.len()).as_bytes(),
        ),
    );
    let cm_pb = protobuf(CONFIGMAP);
    s.put(
        "connection",
        "protobuf",
        req(
            &format!(
                "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/vnd.kubernetes.protobuf\r\nAccept: application/vnd.kubernetes.protobuf\r\nContent-Length: {}\r\n\r\n",
                cm_pb.len()
            ),
            &cm_pb,
        ),
    );
    s.put(
        "connection",
        "watch",
        "GET /api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=5 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    s.put(
        "connection",
        "websocket",
        req(
            "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
            &join(&[&ws_frame(true, 0x9, b"p"), &ws_frame(true, 0x8, &[0x03, 0xe8])]),
        ),
    );
    s.put("connection", "h2c", join(&[PREFACE, &h2_requests]));
    println!("seeds written");
}
