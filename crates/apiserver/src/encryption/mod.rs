//! Encryption at rest, as kube-apiserver's `--encryption-provider-config` does it: the
//! stored values of the configured resources (typically Secrets) are encrypted with aesgcm or
//! secretbox keys, in kube-apiserver's stored format (`k8s:enc:aesgcm:v1:<key name>:…`).
//!
//! - [`config`]: the `EncryptionConfiguration` file, validated and resolved to the served
//!   resources;
//! - [`value_transformer`]: one resource's providers and keys: encrypt with the first,
//!   decrypt with the one the stored prefix names, tell stale values apart;
//! - [`encrypted_storage`]: the [`storage::Storage`] wrapper that applies them by key
//!   prefix, over the embedded store and etcd alike.
//!
//! Key rotation works as in Kubernetes: add the new key first (keeping the old one) and
//! restart; every write then uses the new key, and an update that changes nothing still
//! rewrites an object stored under another key ([`storage::Storage::get_for_update`]), so
//! `kubectl get secrets -A -o json | kubectl replace -f -` re-encrypts them all; then the
//! old key may go.

pub mod config;
pub mod encrypted_storage;
pub mod value_transformer;

pub use config::{EncryptionConfig, EncryptionConfigError};
pub use encrypted_storage::EncryptedStorage;
