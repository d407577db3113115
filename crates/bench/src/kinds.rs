//! The kinds of object the write and read benchmarks (`creates`, `list`, `fanout`) can use:
//! pods (the default), ConfigMaps, and `Widget`s — a custom resource of the same size as a
//! ConfigMap, installed by its CRD, so that custom resources can be measured side by side
//! with a built-in kind of the same size (`--kind configmap` against `--kind widget`).

use super::http::HttpConn;
use super::{pod_body, BENCH_NAMESPACE};
use anyhow::{bail, Context as _};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Which kind of object a benchmark writes and reads.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// Pods (core/v1).
    #[default]
    Pod,
    /// ConfigMaps (core/v1): the data in `data`.
    Configmap,
    /// Widgets (`bench.listwatch.dev/v1`, a custom resource): the same data in `spec.data`,
    /// checked against a structural schema with a bound and a default.
    Widget,
}

/// The Widget CRD: `spec.data` a map of strings, `spec.replicas` defaulted and bounded.
const WIDGET_CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.bench.listwatch.dev"},
"spec":{"group":"bench.listwatch.dev","scope":"Namespaced",
"names":{"plural":"widgets","singular":"widget","kind":"Widget"},
"versions":[{"name":"v1","served":true,"storage":true,
"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{
"data":{"type":"object","additionalProperties":{"type":"string"}},
"replicas":{"type":"integer","minimum":0,"default":1}}}}}}}]}}"#;

/// The bytes of a ConfigMap or Widget around its padding.
const OVERHEAD: usize = 220;

impl Kind {
    /// The plural resource name.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Pod => "pods",
            Kind::Configmap => "configmaps",
            Kind::Widget => "widgets",
        }
    }

    /// The URL prefix of the kind's group version.
    fn group_version_path(self) -> &'static str {
        match self {
            Kind::Pod | Kind::Configmap => "/api/v1",
            Kind::Widget => "/apis/bench.listwatch.dev/v1",
        }
    }

    /// The collection in the bench namespace.
    pub fn collection_path(self) -> String {
        format!(
            "{}/namespaces/{BENCH_NAMESPACE}/{}",
            self.group_version_path(),
            self.plural()
        )
    }

    /// The collection across namespaces.
    pub fn all_namespaces_path(self) -> String {
        format!("{}/{}", self.group_version_path(), self.plural())
    }

    /// One object in the bench namespace.
    pub fn item_path(self, name: &str) -> String {
        format!("{}/{name}", self.collection_path())
    }

    /// An object named `name` of about `object_size` bytes, carrying `seq` (for latency
    /// measurement) in an annotation when given.
    pub fn body(self, name: &str, object_size: usize, seq: Option<u64>) -> Vec<u8> {
        if self == Kind::Pod {
            return pod_body(name, object_size, seq);
        }
        let pad = "x".repeat(object_size.saturating_sub(OVERHEAD));
        let seq = seq.map_or(String::new(), |s| {
            format!(",\"annotations\":{{\"lwb-seq\":\"{s}\"}}")
        });
        let meta = format!(
            "\"metadata\":{{\"name\":\"{name}\",\"namespace\":\"{BENCH_NAMESPACE}\",\"labels\":{{\"app\":\"lwbench\"}}{seq}}}"
        );
        match self {
            Kind::Widget => format!(
                "{{\"apiVersion\":\"bench.listwatch.dev/v1\",\"kind\":\"Widget\",{meta},\"spec\":{{\"data\":{{\"payload\":\"{pad}\"}}}}}}"
            ),
            _ => format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",{meta},\"data\":{{\"payload\":\"{pad}\"}}}}"
            ),
        }
        .into_bytes()
    }

    /// Makes the kind servable: for Widgets, creates the CRD (an existing one is fine) and
    /// waits until it is served.
    pub async fn install(self, addr: SocketAddr) -> anyhow::Result<()> {
        if self != Kind::Widget {
            return Ok(());
        }
        let mut conn = HttpConn::connect(addr).await?;
        let mut out = Vec::new();
        let status = conn
            .request(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                Some(WIDGET_CRD.as_bytes()),
                &mut out,
            )
            .await?;
        if status != 201 && status != 409 {
            bail!(
                "creating the Widget CRD: HTTP {status}: {}",
                String::from_utf8_lossy(&out)
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = conn
                .request(
                    "GET",
                    &format!("{}?limit=1", self.collection_path()),
                    None,
                    &mut out,
                )
                .await
                .context("waiting for the Widget CRD")?;
            if status == 200 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the Widget CRD was not served within 20 s (last HTTP {status})");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_of_about_the_size_asked_for() {
        for kind in [Kind::Configmap, Kind::Widget] {
            let body = kind.body("w-1", 2048, Some(7));
            let v: serde_json::Value = serde_json::from_slice(&body).expect("valid JSON");
            assert_eq!(v["metadata"]["name"], "w-1");
            assert!(
                (1900..2200).contains(&body.len()),
                "{kind:?}: {} bytes",
                body.len()
            );
        }
        assert_eq!(
            Kind::Widget.item_path("a"),
            "/apis/bench.listwatch.dev/v1/namespaces/bench/widgets/a"
        );
        let crd: serde_json::Value = serde_json::from_str(WIDGET_CRD).expect("the CRD is JSON");
        assert_eq!(crd["spec"]["names"]["plural"], "widgets");
    }
}
