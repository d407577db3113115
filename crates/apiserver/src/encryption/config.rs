//! [`EncryptionConfig`]: the file `listwatch serve --encryption-provider-config` reads, an
//! `EncryptionConfiguration` (`apiserver.config.k8s.io/v1`) as kube-apiserver takes it, in
//! YAML or JSON:
//!
//! ```yaml
//! apiVersion: apiserver.config.k8s.io/v1
//! kind: EncryptionConfiguration
//! resources:
//!   - resources: [secrets]          # or configmaps, deployments.apps, '*.apps', '*.', '*.*'
//!     providers:
//!       - aesgcm:                   # the first provider's first key encrypts every write
//!           keys:
//!             - name: key2
//!               secret: <base64 of 16 or 32 random bytes>
//!             - name: key1          # still read
//!               secret: <base64>
//!       - secretbox:
//!           keys: [{name: box1, secret: <base64 of 32 bytes>}]
//!       - identity: {}              # also read values stored unencrypted
//! ```
//!
//! It is decoded strictly (unknown or repeated fields are errors) and validated as
//! kube-apiserver validates it (resource names, overlapping or masked resources, one provider
//! per list element, keys present, secrets in base64 of the cipher's size); every problem is
//! reported at once, by field path, and secrets never appear in messages. Beyond
//! kube-apiserver: the `aescbc` and `kms` providers are refused as unsupported, so are
//! 24-byte (AES-192) aesgcm keys (ring has no AES-192), and a key name used twice by one
//! kind of provider in one list is an error (it would name two keys in the stored prefix).
//!
//! A served resource takes the providers of the entries that name it (in order), else those
//! of `*.<its group>` (`*.` for the core group), else those of `*.*`. Resources whose only
//! provider is `identity` are left alone, like resources not named at all; names of
//! resources this server does not serve are accepted (a configuration may be shared with a
//! cluster that has them) and logged.

use super::value_transformer::{ProviderKeys, ValueTransformer};
use crate::registry::RESOURCES;
use base64::Engine as _;
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The only `kind` accepted.
pub const KIND: &str = "EncryptionConfiguration";
/// The only `apiVersion` accepted.
pub const API_VERSION: &str = "apiserver.config.k8s.io/v1";

/// Why an encryption configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum EncryptionConfigError {
    /// The file could not be read.
    #[error("reading the encryption provider configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed EncryptionConfiguration (syntax, unknown or repeated
    /// fields, wrong types).
    #[error("decoding the encryption provider configuration {path}: {message}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        message: String,
    },
    /// The configuration is well-formed but invalid; every problem, by field path.
    #[error("invalid encryption provider configuration {path}: {}", .errors.join("; "))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// One message per problem, e.g. `resources[0].providers[0].aesgcm.keys[0].secret:
        /// ...`.
        errors: Vec<String>,
    },
}

/// A served resource whose stored values are transformed.
#[derive(Debug, Clone)]
pub struct EncryptedResource {
    /// The resource as a configuration names it: `secrets`, `deployments.apps`.
    pub resource: String,
    /// Its storage key prefix, e.g. `/registry/secrets/`.
    pub key_prefix: String,
    /// How its values are encrypted and decrypted (shared by the resources of one rule).
    pub transformer: Arc<ValueTransformer>,
}

/// A loaded, validated encryption configuration, resolved against the served resources.
#[derive(Debug, Clone, Default)]
pub struct EncryptionConfig {
    resources: Vec<EncryptedResource>,
}

impl EncryptionConfig {
    /// Reads, decodes and validates the configuration at `path`.
    ///
    /// # Errors
    /// [`EncryptionConfigError`] naming the file and every problem found.
    pub fn load(path: &Path) -> Result<EncryptionConfig, EncryptionConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| EncryptionConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            Problem::Decode(message) => EncryptionConfigError::Decode {
                path: path.to_path_buf(),
                message,
            },
            Problem::Invalid(errors) => EncryptionConfigError::Invalid {
                path: path.to_path_buf(),
                errors,
            },
        })
    }

    /// The served resources that are transformed, in discovery order.
    pub fn resources(&self) -> &[EncryptedResource] {
        &self.resources
    }

    fn parse(text: &str) -> Result<EncryptionConfig, Problem> {
        if text.trim().is_empty() {
            return Err(Problem::Decode("the file is empty".into()));
        }
        // YAML is a superset of JSON, so one decoder reads both.
        let file: FileV1 =
            serde_yaml_ng::from_str(text).map_err(|e| Problem::Decode(e.to_string()))?;
        let mut errors = Vec::new();
        if file.kind != KIND {
            errors.push(format!(
                "kind: Invalid value: {:?}: must be {KIND}",
                file.kind
            ));
        }
        if file.api_version != API_VERSION {
            errors.push(format!(
                "apiVersion: Invalid value: {:?}: must be {API_VERSION}",
                file.api_version
            ));
        }
        if file.resources.is_empty() {
            errors.push("resources: Required value: at least one resources is required".into());
        }
        // (group, resource) of each name, with the providers of every entry naming it.
        let mut rules: Vec<(GroupResource, Vec<ProviderKeys>)> = Vec::new();
        for (i, entry) in file.resources.iter().enumerate() {
            let at = format!("resources[{i}]");
            let providers = validate_providers(&at, &entry.providers, &mut errors);
            let names = validate_resource_names(&at, &entry.resources, &rules, &mut errors);
            for gr in names {
                match rules.iter_mut().find(|(g, _)| *g == gr) {
                    Some((_, list)) => list.extend(providers.iter().cloned()),
                    None => rules.push((gr, providers.clone())),
                }
            }
        }
        if !errors.is_empty() {
            return Err(Problem::Invalid(errors));
        }
        let mut transformers: Vec<(GroupResource, Option<Arc<ValueTransformer>>)> = Vec::new();
        for (gr, providers) in &rules {
            let only_identity = providers.iter().all(|p| *p == ProviderKeys::Identity);
            let t = if only_identity {
                None
            } else {
                ValueTransformer::new(providers)
                    .map_err(|e| Problem::Invalid(vec![e]))?
                    .map(Arc::new)
            };
            transformers.push((gr.clone(), t));
        }
        let lookup = |gr: &GroupResource| transformers.iter().find(|(g, _)| g == gr);
        let mut resources: Vec<EncryptedResource> = Vec::new();
        for info in RESOURCES {
            let exact = GroupResource::new(info.group, info.resource);
            let rule = lookup(&exact)
                .or_else(|| lookup(&GroupResource::new(info.group, "*")))
                .or_else(|| lookup(&GroupResource::new("*", "*")));
            let Some((_, Some(transformer))) = rule else {
                continue;
            };
            let key_prefix = info.key_prefix();
            if resources.iter().any(|r| r.key_prefix == key_prefix) {
                continue; // another version of the same resource
            }
            resources.push(EncryptedResource {
                resource: exact.to_string(),
                key_prefix,
                transformer: transformer.clone(),
            });
        }
        let unserved: Vec<String> = rules
            .iter()
            .map(|(gr, _)| gr)
            .filter(|gr| gr.resource != "*" && gr.group != "*")
            .filter(|gr| {
                !RESOURCES
                    .iter()
                    .any(|r| r.group == gr.group && r.resource == gr.resource)
            })
            .map(|gr| gr.to_string())
            .collect();
        if !unserved.is_empty() {
            tracing::warn!(
                resources = unserved.join(", "),
                "the encryption configuration names resources this server does not serve; they are ignored"
            );
        }
        Ok(EncryptionConfig { resources })
    }
}

/// Why [`EncryptionConfig::parse`] failed (the caller adds the file name).
enum Problem {
    Decode(String),
    Invalid(Vec<String>),
}

/// A resource as a configuration names it: `secrets` is ("", "secrets"), `*.apps` is
/// ("apps", "*"), `*.` is ("", "*"), `*.*` is ("*", "*").
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupResource {
    group: String,
    resource: String,
}

impl GroupResource {
    fn new(group: &str, resource: &str) -> Self {
        GroupResource {
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// Splits at the first dot, as Kubernetes' ParseGroupResource does.
    fn parse(name: &str) -> Self {
        match name.split_once('.') {
            Some((resource, group)) => GroupResource::new(group, resource),
            None => GroupResource::new("", name),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() && self.resource != "*" {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// Checks the resource names of entry `at`; the parsed names (valid or not, for the checks
/// of later entries) are returned. `earlier` holds the names of the entries before it.
fn validate_resource_names(
    at: &str,
    names: &[String],
    earlier: &[(GroupResource, Vec<ProviderKeys>)],
    errors: &mut Vec<String>,
) -> Vec<GroupResource> {
    let path = format!("{at}.resources");
    if names.is_empty() {
        errors.push(format!(
            "{path}: Required value: at least one resource is required"
        ));
    }
    let parsed: Vec<GroupResource> = names.iter().map(|n| GroupResource::parse(n)).collect();
    for (k, (name, gr)) in names.iter().zip(&parsed).enumerate() {
        let problem = if name.to_lowercase() != *name {
            Some("resource name should not contain capital letters")
        } else if name == "*" {
            Some("use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources")
        } else if matches!(
            name.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            Some("resources which do not have REST API/s cannot be encrypted")
        } else if gr.group == "events.k8s.io" {
            Some("'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file")
        } else if gr.group == "extensions" {
            Some("'extensions' group has been removed and cannot be used for encryption")
        } else if gr.group == "*" && gr.resource != "*" {
            Some("encrypting the same resource across groups is not supported")
        } else if gr.resource.is_empty() {
            Some("a resource name is required")
        } else {
            None
        };
        if let Some(p) = problem {
            errors.push(format!("{path}[{k}]: Invalid value: {name:?}: {p}"));
        }
    }
    let any = GroupResource::new("*", "*");
    let duplicate = parsed
        .iter()
        .enumerate()
        .any(|(i, a)| parsed[i + 1..].contains(a));
    let overlap = parsed.iter().enumerate().any(|(i, a)| {
        parsed.iter().enumerate().any(|(j, b)| {
            i != j
                && a != b
                && (*a == any || (a.group == b.group && (a.resource == "*" || b.resource == "*")))
        })
    });
    if duplicate {
        errors.push(format!(
            "{path}: Invalid value: {names:?}: the same resource cannot be specified multiple times"
        ));
    }
    if overlap {
        errors.push(format!(
            "{path}: Invalid value: {names:?}: using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked"
        ));
    }
    for gr in &parsed {
        let group_rule = GroupResource::new(&gr.group, "*");
        for mask in [&group_rule, &any] {
            if earlier.iter().any(|(g, _)| g == mask) {
                errors.push(format!(
                    "{path}: resource {:?} is masked by earlier rule {:?}",
                    gr.to_string(),
                    mask.to_string()
                ));
                break;
            }
        }
    }
    parsed
}

/// Checks the providers of entry `at`; the usable ones are returned in order.
fn validate_providers(
    at: &str,
    providers: &[ProviderV1],
    errors: &mut Vec<String>,
) -> Vec<ProviderKeys> {
    if providers.is_empty() {
        errors.push(format!(
            "{at}.providers: Required value: at least one provider is required"
        ));
    }
    let mut out = Vec::new();
    // Key names already used, per kind of provider: (kind, name, path).
    let mut names: Vec<(&str, &str, String)> = Vec::new();
    for (j, p) in providers.iter().enumerate() {
        let path = format!("{at}.providers[{j}]");
        let given = [
            p.aesgcm.is_some(),
            p.secretbox.is_some(),
            p.identity.is_some(),
            p.aescbc.is_some(),
            p.kms.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if given == 0 {
            errors.push(format!(
                "{path}: Invalid value: provider does not contain any of the expected providers: aesgcm, secretbox, identity"
            ));
            continue;
        }
        if given > 1 {
            errors.push(format!(
                "{path}: Invalid value: more than one provider specified in a single element, should split into different list elements"
            ));
            continue;
        }
        if p.aescbc.is_some() || p.kms.is_some() {
            let which = if p.aescbc.is_some() { "aescbc" } else { "kms" };
            errors.push(format!(
                "{path}.{which}: Unsupported value: the {which} provider is not supported by this server (supported: aesgcm, secretbox, identity)"
            ));
            continue;
        }
        if p.identity.is_some() {
            out.push(ProviderKeys::Identity);
            continue;
        }
        let (kind, keys, sizes): (&str, &KeysV1, &[usize]) = match (&p.aesgcm, &p.secretbox) {
            (Some(k), _) => ("aesgcm", k, &[16, 32]),
            (_, Some(k)) => ("secretbox", k, &[32]),
            _ => continue,
        };
        let keys_path = format!("{path}.{kind}.keys");
        if keys.keys.is_empty() {
            errors.push(format!(
                "{keys_path}: Required value: at least one keys is required"
            ));
            continue;
        }
        let mut checked = Vec::new();
        for (k, key) in keys.keys.iter().enumerate() {
            let kp = format!("{keys_path}[{k}]");
            if key.name.is_empty() {
                errors.push(format!(
                    "{kp}.name: Required value: name is a mandatory field for a key"
                ));
            } else if let Some((_, _, first)) = names
                .iter()
                .find(|(kd, n, _)| *kd == kind && *n == key.name)
            {
                errors.push(format!(
                    "{kp}.name: Duplicate value: {:?}: already the name of {first}; the stored prefix k8s:enc:{kind}:v1:{}: must name one key",
                    key.name, key.name
                ));
            } else {
                names.push((kind, &key.name, kp.clone()));
            }
            if key.secret.is_empty() {
                errors.push(format!(
                    "{kp}.secret: Required value: secret is a mandatory field for a key"
                ));
                continue;
            }
            let Ok(secret) = base64::engine::general_purpose::STANDARD.decode(&key.secret) else {
                errors.push(format!(
                    "{kp}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"
                ));
                continue;
            };
            if !sizes.contains(&secret.len()) {
                let aes192 = if kind == "aesgcm" && secret.len() == 24 {
                    " (24-byte AES-192 keys are not supported by this server)"
                } else {
                    ""
                };
                errors.push(format!(
                    "{kp}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {sizes:?}{aes192}",
                    secret.len()
                ));
                continue;
            }
            checked.push((key.name.clone(), secret));
        }
        out.push(if kind == "aesgcm" {
            ProviderKeys::AesGcm(checked)
        } else {
            ProviderKeys::Secretbox(checked)
        });
    }
    out
}

/// The file as written: `EncryptionConfiguration` of `apiserver.config.k8s.io/v1`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileV1 {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    resources: Vec<ResourceV1>,
}

/// `ResourceConfiguration`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceV1 {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderV1>,
}

/// `ProviderConfiguration`: exactly one of its fields is meant to be set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderV1 {
    aesgcm: Option<KeysV1>,
    secretbox: Option<KeysV1>,
    identity: Option<IdentityV1>,
    aescbc: Option<IgnoredAny>,
    kms: Option<IgnoredAny>,
}

/// `AESConfiguration` and `SecretboxConfiguration`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysV1 {
    #[serde(default)]
    keys: Vec<KeyV1>,
}

/// `Key`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyV1 {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

/// `IdentityConfiguration`: empty.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityV1 {}

#[cfg(test)]
mod tests {
    use super::*;

    /// base64 of 32 bytes (`0..32`) and of 16 bytes.
    const K32: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K16: &str = "AAECAwQFBgcICQoLDA0ODw==";

    fn parse(text: &str) -> Result<EncryptionConfig, Vec<String>> {
        EncryptionConfig::parse(text).map_err(|p| match p {
            Problem::Decode(m) => vec![format!("decode: {m}")],
            Problem::Invalid(e) => e,
        })
    }

    fn config(resources: &str) -> String {
        format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n{resources}")
    }

    fn prefixes(c: &EncryptionConfig) -> Vec<&str> {
        c.resources()
            .iter()
            .map(|r| r.key_prefix.as_str())
            .collect()
    }

    #[test]
    fn secrets_with_two_providers() {
        let c = parse(&config(&format!(
            "- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n      - name: k2\n        secret: {K16}\n      - name: k1\n        secret: {K32}\n  - secretbox:\n      keys: [{{name: b, secret: {K32}}}]\n  - identity: {{}}\n"
        )))
        .unwrap();
        assert_eq!(prefixes(&c), ["/registry/secrets/"]);
        let r = &c.resources()[0];
        assert_eq!(r.resource, "secrets");
        assert_eq!(
            r.transformer.describe(),
            "written with aesgcm key \"k2\"; read with aesgcm key \"k2\", aesgcm key \"k1\", secretbox key \"b\", identity"
        );
    }

    #[test]
    fn json_is_accepted() {
        let c = parse(&format!(
            r#"{{"kind":"EncryptionConfiguration","apiVersion":"apiserver.config.k8s.io/v1","resources":[{{"resources":["configmaps","deployments.apps"],"providers":[{{"secretbox":{{"keys":[{{"name":"a","secret":"{K32}"}}]}}}}]}}]}}"#
        ))
        .unwrap();
        assert_eq!(
            prefixes(&c),
            ["/registry/configmaps/", "/registry/apps/deployments/"]
        );
        assert_eq!(c.resources()[1].resource, "deployments.apps");
    }

    #[test]
    fn wildcards_and_precedence() {
        let aes = format!("  providers: [{{aesgcm: {{keys: [{{name: a, secret: {K16}}}]}}}}]\n");
        // `events` stays unencrypted although `*.*` follows; `*.apps` covers the apps group.
        let c = parse(&config(&format!(
            "- resources: [events]\n  providers: [{{identity: {{}}}}]\n- resources: ['*.apps']\n{aes}- resources: ['*.*']\n{aes}"
        )))
        .unwrap();
        let p = prefixes(&c);
        assert!(p.contains(&"/registry/secrets/"));
        assert!(p.contains(&"/registry/apps/deployments/"));
        assert!(p.contains(&"/registry/rbac.authorization.k8s.io/roles/"));
        assert!(!p.contains(&"/registry/events/"));
        assert_eq!(
            p.len(),
            RESOURCES.len() - 1,
            "every served resource but events (each served in one version)"
        );
        // `*.` is the core group only.
        let c = parse(&config(&format!("- resources: ['*.']\n{aes}"))).unwrap();
        let p = prefixes(&c);
        assert!(p.contains(&"/registry/pods/"));
        assert!(!p.iter().any(|p| p.starts_with("/registry/apps/")));
        // Identity alone encrypts nothing; unknown resources are accepted.
        let c = parse(&config(
            "- resources: [secrets, pandas.awesome.bears.example]\n  providers: [{identity: {}}]\n",
        ))
        .unwrap();
        assert!(c.resources().is_empty());
    }

    #[test]
    fn bad_configurations_are_refused_with_every_problem_named() {
        let cases: &[(&str, &str)] = &[
            ("", "the file is empty"),
            ("kind: [", "decode"),
            ("kind: EncryptionConfiguration\napiVersion: v1\nresources: []\n", "apiVersion: Invalid value: \"v1\": must be apiserver.config.k8s.io/v1"),
            ("apiVersion: apiserver.config.k8s.io/v1\nresources: []\n", "kind: Invalid value: \"\": must be EncryptionConfiguration"),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: []\n", "resources: Required value"),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: []\nextra: 1\n", "unknown field `extra`"),
            ("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nkind: EncryptionConfiguration\nresources: []\n", "duplicate"),
        ];
        let entry = |providers: &str| {
            config(&format!(
                "- resources: [secrets]\n  providers: {providers}\n"
            ))
        };
        let owned: Vec<(String, String)> = vec![
            (entry(&format!("[{{aesgcm: {{keys: [{{name: a, secret: {K16}, extra: x}}]}}}}]")), "unknown field `extra`".into()),
            (entry("[{aesgcm: {keys: [{name: a, secret: 'not base64!'}]}}]"), "resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: \"REDACTED\": secrets must be base64 encoded".into()),
            (entry("[{aesgcm: {keys: [{name: a, secret: c2hvcnQ=}]}}]"), "secret is not of the expected length, got 5, expected one of [16, 32]".into()),
            (entry("[{aesgcm: {keys: [{name: a, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYX}]}}]"), "got 24, expected one of [16, 32] (24-byte AES-192 keys are not supported by this server)".into()),
            (entry(&format!("[{{secretbox: {{keys: [{{name: a, secret: {K16}}}]}}}}]")), "resources[0].providers[0].secretbox.keys[0].secret: Invalid value: \"REDACTED\": secret is not of the expected length, got 16, expected one of [32]".into()),
            (entry(&format!("[{{aesgcm: {{keys: [{{name: a, secret: {K16}}}, {{name: a, secret: {K32}}}]}}}}]")), "resources[0].providers[0].aesgcm.keys[1].name: Duplicate value: \"a\"".into()),
            (entry(&format!("[{{aesgcm: {{keys: [{{secret: {K16}}}]}}}}]")), "keys[0].name: Required value".into()),
            (entry("[{aesgcm: {keys: [{name: a}]}}]"), "keys[0].secret: Required value".into()),
            (entry("[{aesgcm: {keys: []}}]"), "resources[0].providers[0].aesgcm.keys: Required value".into()),
            (entry(&format!("[{{aescbc: {{keys: [{{name: a, secret: {K32}}}]}}}}]")), "resources[0].providers[0].aescbc: Unsupported value: the aescbc provider is not supported by this server".into()),
            (entry("[{kms: {apiVersion: v2, name: x, endpoint: 'unix:///k.sock'}}]"), "the kms provider is not supported".into()),
            (entry(&format!("[{{identity: {{}}, aesgcm: {{keys: [{{name: a, secret: {K16}}}]}}}}]")), "more than one provider specified in a single element".into()),
            (entry("[{}]"), "provider does not contain any of the expected providers".into()),
            (entry("[]"), "resources[0].providers: Required value".into()),
            (entry("[{identity: {x: 1}}]"), "unknown field `x`".into()),
            (config("- resources: [Secrets]\n  providers: [{identity: {}}]\n"), "resources[0].resources[0]: Invalid value: \"Secrets\": resource name should not contain capital letters".into()),
            (config("- resources: ['*']\n  providers: [{identity: {}}]\n"), "use '*.' to encrypt all the resources".into()),
            (config("- resources: [secrets, secrets]\n  providers: [{identity: {}}]\n"), "the same resource cannot be specified multiple times".into()),
            (config("- resources: [secrets, '*.']\n  providers: [{identity: {}}]\n"), "using overlapping resources".into()),
            (config("- resources: ['*.*']\n  providers: [{identity: {}}]\n- resources: [secrets]\n  providers: [{identity: {}}]\n"), "resources[1].resources: resource \"secrets\" is masked by earlier rule \"*.*\"".into()),
            (config("- resources: [events.events.k8s.io]\n  providers: [{identity: {}}]\n"), "Use 'events' instead".into()),
            (config("- resources: [secrets.*]\n  providers: [{identity: {}}]\n"), "across groups is not supported".into()),
            (config("- resources: []\n  providers: [{identity: {}}]\n"), "resources[0].resources: Required value".into()),
        ];
        for (text, want) in cases
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .chain(owned)
        {
            let errs = match parse(&text) {
                Ok(_) => panic!("accepted:\n{text}"),
                Err(e) => e.join("; "),
            };
            assert!(
                errs.contains(&want),
                "for\n{text}\nwant {want:?} in {errs:?}"
            );
            assert!(
                !errs.contains(K16) && !errs.contains(K32),
                "a secret leaked: {errs}"
            );
        }
        // Every problem at once.
        let errs = parse(&config(
            "- resources: [Secrets]\n  providers: [{aesgcm: {keys: [{name: a, secret: c2hvcnQ=}]}}, {aescbc: {}}]\n",
        ))
        .unwrap_err();
        assert_eq!(errs.len(), 3, "{errs:?}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("enc.yaml");
        let err = EncryptionConfig::load(&path).unwrap_err().to_string();
        assert!(err.contains("enc.yaml"), "{err}");
        std::fs::write(&path, config("- resources: [secrets]\n  providers: [{aesgcm: {keys: [{name: a, secret: eA==}]}}]\n")).unwrap();
        let err = EncryptionConfig::load(&path).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid encryption provider configuration"),
            "{err}"
        );
        assert!(
            err.contains("enc.yaml") && err.contains("got 1, expected one of [16, 32]"),
            "{err}"
        );
    }
}
