//! [`ValueTransformer`]: how the stored values of one resource are encrypted and decrypted,
//! with the stored format of kube-apiserver's providers, so that a store written by one can
//! be read by the other given the same keys.
//!
//! A transformer is an ordered list of keys (the keys of each provider, providers in the
//! order of the configuration). The first key encrypts every write. A read picks the keys
//! whose prefix the stored value starts with, in order, and the first that decrypts it wins;
//! the value is *stale* unless that was the first key, so that an update rewrites it under
//! the first key even when the object did not change.
//!
//! Stored formats (the key name is the configuration's, the storage key is e.g.
//! `/registry/secrets/default/db`):
//! - aesgcm: `k8s:enc:aesgcm:v1:<name>:` + nonce (12 random bytes) + AES-GCM ciphertext and
//!   16-byte tag, with the storage key as additional authenticated data (a value copied to
//!   another key does not decrypt);
//! - secretbox: `k8s:enc:secretbox:v1:<name>:` + nonce (24 random bytes) + NaCl secretbox
//!   (XSalsa20-Poly1305: 16-byte tag, then the ciphertext);
//! - identity: the plaintext itself. It reads any value that does not start with
//!   `k8s:enc:`, and only when an identity provider is configured.

use bytes::Bytes;
use crypto_secretbox::aead::{AeadInPlace as _, KeyInit as _};
use crypto_secretbox::XSalsa20Poly1305;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom as _, SystemRandom};

/// What every encrypted value starts with (and no plaintext may).
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";
/// The prefix of aesgcm values, followed by `<key name>:`.
pub const AESGCM_PREFIX: &str = "k8s:enc:aesgcm:v1:";
/// The prefix of secretbox values, followed by `<key name>:`.
pub const SECRETBOX_PREFIX: &str = "k8s:enc:secretbox:v1:";

/// AES-GCM's tag length.
const GCM_TAG_LEN: usize = 16;
/// XSalsa20's nonce length.
const SECRETBOX_NONCE_LEN: usize = 24;
/// Poly1305's tag length.
const SECRETBOX_TAG_LEN: usize = 16;

/// Why a value could not be transformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransformError {
    /// The value is stored unencrypted and no identity provider is configured to read it.
    #[error("the value is stored unencrypted, and the encryption configuration has no identity provider to read it")]
    Unencrypted,
    /// The value is encrypted under a provider and key the configuration does not have.
    #[error("no key of the encryption configuration matches the stored prefix {0:?}")]
    UnknownKey(String),
    /// The keys whose prefix matched could not decrypt the value.
    #[error("{0} could not decrypt the stored value (a wrong key, or data altered or moved from another key)")]
    Decrypt(String),
    /// The cipher refused to encrypt (only for values far larger than any object).
    #[error("{0} could not encrypt the value")]
    Encrypt(String),
    /// The system's random source failed while making a nonce.
    #[error("no randomness available for an encryption nonce")]
    Random,
}

/// A secret and the cipher it is for.
enum Cipher {
    Identity,
    // Boxed: ring's expanded AES key is large beside the others.
    AesGcm(Box<LessSafeKey>),
    Secretbox(XSalsa20Poly1305),
}

/// One key of the configuration, as a read candidate.
struct Key {
    /// What values written with this key start with (empty for identity).
    prefix: Vec<u8>,
    /// `aesgcm key "k1"`, `identity`: for messages and logs.
    label: String,
    cipher: Cipher,
}

/// One provider of an encryption configuration, with its keys (in order) as bytes that have
/// been checked for size.
#[derive(Clone, PartialEq, Eq)]
pub enum ProviderKeys {
    /// Values are stored as they are.
    Identity,
    /// AES-GCM with 16- or 32-byte keys: (name, secret).
    AesGcm(Vec<(String, Vec<u8>)>),
    /// XSalsa20-Poly1305 with 32-byte keys: (name, secret).
    Secretbox(Vec<(String, Vec<u8>)>),
}

impl std::fmt::Debug for ProviderKeys {
    // Names only: secrets never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |keys: &Vec<(String, Vec<u8>)>| keys.iter().map(|(n, _)| n.clone()).collect();
        let (kind, names): (&str, Vec<String>) = match self {
            ProviderKeys::Identity => ("Identity", Vec::new()),
            ProviderKeys::AesGcm(k) => ("AesGcm", names(k)),
            ProviderKeys::Secretbox(k) => ("Secretbox", names(k)),
        };
        f.debug_tuple(kind).field(&names).finish()
    }
}

/// The encryption of one resource's values: the keys of its providers, the first of which
/// encrypts. Cheap to share (`Arc`); safe to use from many threads.
pub struct ValueTransformer {
    /// Read candidates in order; `keys[0]` writes. Never empty.
    keys: Vec<Key>,
    rng: SystemRandom,
}

impl std::fmt::Debug for ValueTransformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueTransformer")
            .field(
                "keys",
                &self.keys.iter().map(|k| &k.label).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl ValueTransformer {
    /// A transformer over `providers`, in order; `None` if there are none. The secrets must
    /// have the sizes the ciphers take (aesgcm 16 or 32 bytes, secretbox 32), as the
    /// configuration loader checks; a key of another size is an error naming it.
    pub fn new(providers: &[ProviderKeys]) -> Result<Option<ValueTransformer>, String> {
        let mut keys = Vec::new();
        for p in providers {
            match p {
                ProviderKeys::Identity => keys.push(Key {
                    prefix: Vec::new(),
                    label: "identity".into(),
                    cipher: Cipher::Identity,
                }),
                ProviderKeys::AesGcm(named) => {
                    for (name, secret) in named {
                        let alg = match secret.len() {
                            16 => &AES_128_GCM,
                            32 => &AES_256_GCM,
                            n => return Err(format!("aesgcm key {name:?}: {n}-byte secret")),
                        };
                        let key = UnboundKey::new(alg, secret)
                            .map_err(|_| format!("aesgcm key {name:?}: unusable secret"))?;
                        keys.push(Key {
                            prefix: format!("{AESGCM_PREFIX}{name}:").into_bytes(),
                            label: format!("aesgcm key {name:?}"),
                            cipher: Cipher::AesGcm(Box::new(LessSafeKey::new(key))),
                        });
                    }
                }
                ProviderKeys::Secretbox(named) => {
                    for (name, secret) in named {
                        let cipher = XSalsa20Poly1305::new_from_slice(secret).map_err(|_| {
                            format!("secretbox key {name:?}: {}-byte secret", secret.len())
                        })?;
                        keys.push(Key {
                            prefix: format!("{SECRETBOX_PREFIX}{name}:").into_bytes(),
                            label: format!("secretbox key {name:?}"),
                            cipher: Cipher::Secretbox(cipher),
                        });
                    }
                }
            }
        }
        Ok((!keys.is_empty()).then(|| ValueTransformer {
            keys,
            rng: SystemRandom::new(),
        }))
    }

    /// What writes (`aesgcm key "k2"`, `identity`), and every key reads, for logs.
    pub fn describe(&self) -> String {
        let labels: Vec<&str> = self.keys.iter().map(|k| k.label.as_str()).collect();
        format!(
            "written with {}; read with {}",
            labels[0],
            labels.join(", ")
        )
    }

    /// Whether values are written unencrypted (the first provider is identity).
    pub fn writes_plaintext(&self) -> bool {
        matches!(self.keys[0].cipher, Cipher::Identity)
    }

    /// The form of `value` to store at `storage_key`: encrypted with the first key (a fresh
    /// random nonce each time), or `value` itself when that is identity.
    pub fn to_storage(&self, storage_key: &[u8], value: &Bytes) -> Result<Bytes, TransformError> {
        let key = &self.keys[0];
        match &key.cipher {
            Cipher::Identity => Ok(value.clone()),
            Cipher::AesGcm(aead) => {
                let mut nonce = [0u8; NONCE_LEN];
                self.rng
                    .fill(&mut nonce)
                    .map_err(|_| TransformError::Random)?;
                let mut out =
                    Vec::with_capacity(key.prefix.len() + NONCE_LEN + value.len() + GCM_TAG_LEN);
                out.extend_from_slice(&key.prefix);
                out.extend_from_slice(&nonce);
                let start = out.len();
                out.extend_from_slice(value);
                let tag = aead
                    .seal_in_place_separate_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(storage_key),
                        &mut out[start..],
                    )
                    // Only for inputs beyond AES-GCM's limit (64 GiB).
                    .map_err(|_| TransformError::Encrypt(key.label.clone()))?;
                out.extend_from_slice(tag.as_ref());
                Ok(out.into())
            }
            Cipher::Secretbox(cipher) => {
                let mut nonce = [0u8; SECRETBOX_NONCE_LEN];
                self.rng
                    .fill(&mut nonce)
                    .map_err(|_| TransformError::Random)?;
                let mut out = Vec::with_capacity(
                    key.prefix.len() + SECRETBOX_NONCE_LEN + SECRETBOX_TAG_LEN + value.len(),
                );
                out.extend_from_slice(&key.prefix);
                out.extend_from_slice(&nonce);
                let tag_at = out.len();
                out.extend_from_slice(&[0; SECRETBOX_TAG_LEN]);
                out.extend_from_slice(value);
                let tag = cipher
                    .encrypt_in_place_detached(
                        (&nonce).into(),
                        b"",
                        &mut out[tag_at + SECRETBOX_TAG_LEN..],
                    )
                    .map_err(|_| TransformError::Encrypt(key.label.clone()))?;
                out[tag_at..tag_at + SECRETBOX_TAG_LEN].copy_from_slice(&tag);
                Ok(out.into())
            }
        }
    }

    /// The plaintext of `stored`, read at `storage_key`, and whether it is stale (not stored
    /// under the first key, so an update should rewrite it). Identity hands `stored` back
    /// without copying.
    pub fn from_storage(
        &self,
        storage_key: &[u8],
        stored: &Bytes,
    ) -> Result<(Bytes, bool), TransformError> {
        let mut failed: Vec<&str> = Vec::new();
        for (i, key) in self.keys.iter().enumerate() {
            let Some(body) = stored.strip_prefix(key.prefix.as_slice()) else {
                continue;
            };
            let plain = match &key.cipher {
                Cipher::Identity if stored.starts_with(ENCRYPTED_PREFIX) => None,
                Cipher::Identity => Some(stored.clone()),
                Cipher::AesGcm(aead) => open_aesgcm(aead, storage_key, body),
                Cipher::Secretbox(cipher) => open_secretbox(cipher, body),
            };
            match plain {
                Some(p) => return Ok((p, i != 0)),
                None if matches!(key.cipher, Cipher::Identity) => {}
                None => failed.push(&key.label),
            }
        }
        if !failed.is_empty() {
            return Err(TransformError::Decrypt(failed.join(" and ")));
        }
        if stored.starts_with(ENCRYPTED_PREFIX) {
            Err(TransformError::UnknownKey(stored_prefix(stored)))
        } else {
            Err(TransformError::Unencrypted)
        }
    }
}

/// `nonce ‖ ciphertext ‖ tag` opened with `aead`, or `None`.
fn open_aesgcm(aead: &LessSafeKey, storage_key: &[u8], body: &[u8]) -> Option<Bytes> {
    if body.len() < NONCE_LEN + GCM_TAG_LEN {
        return None;
    }
    let (nonce, sealed) = body.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let mut buf = sealed.to_vec();
    let len = aead
        .open_in_place(nonce, Aad::from(storage_key), &mut buf)
        .ok()?
        .len();
    buf.truncate(len);
    Some(buf.into())
}

/// `nonce ‖ tag ‖ ciphertext` opened with `cipher`, or `None`.
fn open_secretbox(cipher: &XSalsa20Poly1305, body: &[u8]) -> Option<Bytes> {
    if body.len() < SECRETBOX_NONCE_LEN + SECRETBOX_TAG_LEN {
        return None;
    }
    let (nonce, rest) = body.split_at(SECRETBOX_NONCE_LEN);
    let (tag, sealed) = rest.split_at(SECRETBOX_TAG_LEN);
    let mut buf = sealed.to_vec();
    cipher
        .decrypt_in_place_detached(nonce.into(), b"", &mut buf, tag.into())
        .ok()?;
    Some(buf.into())
}

/// The provider-and-key part of an encrypted value (`k8s:enc:aesgcm:v1:k1:`), for messages:
/// up to its fifth colon, at most 80 bytes, lossily decoded.
fn stored_prefix(stored: &[u8]) -> String {
    let mut end = 0;
    for (colons, (i, _)) in stored
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b':')
        .enumerate()
    {
        end = i + 1;
        if colons == 4 {
            break;
        }
    }
    String::from_utf8_lossy(&stored[..end.min(80)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"/registry/secrets/default/db";
    const PLAIN: &[u8] = br#"{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}"#;

    fn aes(name: &str, byte: u8, len: usize) -> ProviderKeys {
        ProviderKeys::AesGcm(vec![(name.into(), vec![byte; len])])
    }

    fn sbox(name: &str, byte: u8) -> ProviderKeys {
        ProviderKeys::Secretbox(vec![(name.into(), vec![byte; 32])])
    }

    fn t(providers: &[ProviderKeys]) -> ValueTransformer {
        ValueTransformer::new(providers).unwrap().unwrap()
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn aesgcm_round_trip_and_layout() {
        for len in [16, 32] {
            let t = t(&[aes("k1", 7, len)]);
            let stored = t.to_storage(KEY, &Bytes::from_static(PLAIN)).unwrap();
            let prefix = b"k8s:enc:aesgcm:v1:k1:";
            assert!(stored.starts_with(prefix));
            assert_eq!(stored.len(), prefix.len() + 12 + PLAIN.len() + 16);
            assert!(!contains(&stored, b"aHVudGVyMg=="));
            assert!(!contains(&stored, b"Secret"));
            assert_eq!(
                t.from_storage(KEY, &stored).unwrap(),
                (Bytes::from_static(PLAIN), false)
            );
            // A fresh nonce for every write.
            assert_ne!(
                stored,
                t.to_storage(KEY, &Bytes::from_static(PLAIN)).unwrap()
            );
            // The storage key is authenticated: a value moved to another key does not open.
            assert_eq!(
                t.from_storage(b"/registry/secrets/default/other", &stored),
                Err(TransformError::Decrypt("aesgcm key \"k1\"".into()))
            );
        }
    }

    #[test]
    fn secretbox_round_trip_and_layout() {
        let t = t(&[sbox("s1", 9)]);
        let stored = t.to_storage(KEY, &Bytes::from_static(PLAIN)).unwrap();
        let prefix = b"k8s:enc:secretbox:v1:s1:";
        assert!(stored.starts_with(prefix));
        assert_eq!(stored.len(), prefix.len() + 24 + 16 + PLAIN.len());
        assert!(!contains(&stored, b"aHVudGVyMg=="));
        assert_eq!(
            t.from_storage(KEY, &stored).unwrap(),
            (Bytes::from_static(PLAIN), false)
        );
    }

    /// Values written by an independent implementation (Python's `cryptography` AESGCM and
    /// PyNaCl's SecretBox) in kube-apiserver's layout, with fixed keys and nonces: we read
    /// what kube-apiserver writes.
    #[test]
    fn reads_values_in_kube_apiserver_layout() {
        let aes_key = (0u8..32).collect::<Vec<_>>();
        let sbox_key = (100u8..132).collect::<Vec<_>>();
        let t = t(&[
            ProviderKeys::AesGcm(vec![("k".into(), aes_key)]),
            ProviderKeys::Secretbox(vec![("s".into(), sbox_key)]),
        ]);
        let hex = |s: &str| {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
        };
        let mut gcm = b"k8s:enc:aesgcm:v1:k:".to_vec();
        gcm.extend(hex(AESGCM_VECTOR));
        assert_eq!(
            t.from_storage(KEY, &gcm.into()).unwrap(),
            (Bytes::from_static(b"hello, secret"), false)
        );
        let mut sb = b"k8s:enc:secretbox:v1:s:".to_vec();
        sb.extend(hex(SECRETBOX_VECTOR));
        assert_eq!(
            t.from_storage(KEY, &sb.into()).unwrap(),
            (Bytes::from_static(b"hello, secret"), true)
        );
    }

    /// Nonce 00..0b, then ciphertext and tag; AAD = KEY.
    const AESGCM_VECTOR: &str =
        "000102030405060708090a0b2f67ba77aac9e268e822e5eec5ce9692c95fe9021bd7684b2b8fd85f91";
    /// Nonce 00..17, then tag and ciphertext.
    const SECRETBOX_VECTOR: &str = "000102030405060708090a0b0c0d0e0f1011121314151617\
        35288993ff04547d52dd19d1208a294eda5b6d709a1016d9a12e35f071";

    #[test]
    fn reads_pick_the_key_named_by_the_prefix_and_flag_stale_values() {
        let old = t(&[aes("old", 1, 32)]);
        let rotated = t(&[aes("new", 2, 32), aes("old", 1, 32), sbox("box", 3)]);
        let value = Bytes::from_static(PLAIN);
        let by_old = old.to_storage(KEY, &value).unwrap();
        assert_eq!(
            rotated.from_storage(KEY, &by_old).unwrap(),
            (value.clone(), true)
        );
        let by_new = rotated.to_storage(KEY, &value).unwrap();
        assert!(by_new.starts_with(b"k8s:enc:aesgcm:v1:new:"));
        assert_eq!(
            rotated.from_storage(KEY, &by_new).unwrap(),
            (value.clone(), false)
        );
        // Two keys of one name under one prefix: a failure of the first is not the end.
        let same_name = t(&[aes("k", 5, 16), aes("k", 6, 16)]);
        let by_second = t(&[aes("k", 6, 16)]).to_storage(KEY, &value).unwrap();
        assert_eq!(
            same_name.from_storage(KEY, &by_second).unwrap(),
            (value, true)
        );
    }

    #[test]
    fn unreadable_values_say_why() {
        let value = Bytes::from_static(PLAIN);
        let enc = t(&[aes("k1", 1, 16)]);
        let stored = enc.to_storage(KEY, &value).unwrap();
        // The same name with another secret.
        assert_eq!(
            t(&[aes("k1", 2, 16)]).from_storage(KEY, &stored),
            Err(TransformError::Decrypt("aesgcm key \"k1\"".into()))
        );
        // A key the configuration does not have.
        let err = t(&[aes("k2", 1, 16), ProviderKeys::Identity])
            .from_storage(KEY, &stored)
            .unwrap_err();
        assert_eq!(
            err,
            TransformError::UnknownKey("k8s:enc:aesgcm:v1:k1:".into())
        );
        assert!(err.to_string().contains("k8s:enc:aesgcm:v1:k1:"));
        // Plaintext without an identity provider.
        assert_eq!(
            enc.from_storage(KEY, &value),
            Err(TransformError::Unencrypted)
        );
        // Truncated values.
        for cut in [0, 5, 20] {
            let short = stored.slice(..b"k8s:enc:aesgcm:v1:k1:".len() + cut);
            assert!(enc.from_storage(KEY, &short).is_err());
        }
        let sb = t(&[sbox("s", 1)]);
        let short = Bytes::from_static(b"k8s:enc:secretbox:v1:s:0123456789");
        assert!(sb.from_storage(KEY, &short).is_err());
    }

    #[test]
    fn identity_first_writes_plaintext_and_still_reads_encrypted_values() {
        let value = Bytes::from_static(PLAIN);
        let enc = t(&[sbox("s", 4)]);
        let stored = enc.to_storage(KEY, &value).unwrap();
        let ident = t(&[ProviderKeys::Identity, sbox("s", 4)]);
        assert!(ident.writes_plaintext());
        let written = ident.to_storage(KEY, &value).unwrap();
        assert_eq!(written, value);
        assert_eq!(written.as_ptr(), value.as_ptr(), "identity does not copy");
        let (plain, stale) = ident.from_storage(KEY, &written).unwrap();
        assert_eq!((plain.as_ptr(), stale), (value.as_ptr(), false));
        assert_eq!(ident.from_storage(KEY, &stored).unwrap(), (value, true));
        // Identity never hands out ciphertext as plaintext.
        assert!(matches!(
            t(&[ProviderKeys::Identity]).from_storage(KEY, &stored),
            Err(TransformError::UnknownKey(_))
        ));
    }

    #[test]
    fn messages_name_the_stored_prefix_only() {
        assert_eq!(
            stored_prefix(b"k8s:enc:aesgcm:v1:k1:\x00:binary:::"),
            "k8s:enc:aesgcm:v1:k1:"
        );
        assert_eq!(stored_prefix(b"k8s:enc:x"), "k8s:enc:");
        assert_eq!(stored_prefix(&[b':'; 200][..]), ":::::");
    }

    #[test]
    fn construction() {
        assert!(ValueTransformer::new(&[]).unwrap().is_none());
        assert!(ValueTransformer::new(&[aes("k", 0, 24)]).is_err());
        assert!(
            ValueTransformer::new(&[ProviderKeys::Secretbox(vec![("s".into(), vec![0; 16])])])
                .is_err()
        );
        let t = t(&[aes("k2", 1, 32), sbox("s", 2), ProviderKeys::Identity]);
        assert_eq!(
            t.describe(),
            "written with aesgcm key \"k2\"; read with aesgcm key \"k2\", secretbox key \"s\", identity"
        );
        assert!(!format!("{:?}", aes("k", 0x41, 16)).contains("AAAA"));
    }
}
