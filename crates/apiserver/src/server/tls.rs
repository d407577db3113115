//! TLS and authentication: the credentials `listwatch serve` keeps in its data directory (a
//! CA, a serving certificate, an admin token, the ServiceAccount token key), the rustls
//! server configuration, and client certificates. A client authenticates with a bearer token
//! (see [`crate::auth::authenticator`]) or with a certificate our CA issued ([`issue_client_certificate`]; kubeconfigs of kubeadm-style
//! clusters work this way); a certificate from any other CA fails the handshake.
//!
//! Layout under `<data-dir>/pki/`: `ca.crt`, `ca.key` (kept across restarts, so kubeconfigs
//! stay valid), `apiserver.crt`, `apiserver.key` (re-issued by the CA at each start for the
//! current set of host names), `admin.token`, `sa.key` (signs ServiceAccount tokens). The directory is created with mode 0700 and
//! every file in it with mode 0600 (written to a temporary file of that mode, then renamed),
//! so no credential is ever readable by other users.

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use ring::rand::SecureRandom as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why credentials could not be created, loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Generating or loading a key or certificate failed.
    #[error("certificate generation: {0}")]
    Cert(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The system random source failed.
    #[error("no randomness available")]
    Random,
    /// The CA certificate could not be used to verify clients.
    #[error("client certificate verification: {0}")]
    Verifier(String),
    /// The data directory has no CA (the server has not run there yet).
    #[error(
        "{0}: no CA certificate and key (run `listwatch serve` with this data directory first)"
    )]
    NoCa(PathBuf),
}

/// What a server needs to serve TLS with token authentication, and what a kubeconfig embeds.
#[derive(Clone)]
pub struct Credentials {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The serving certificate, DER.
    pub cert_der: CertificateDer<'static>,
    /// The serving certificate's key, PKCS#8 DER.
    pub key_der: Vec<u8>,
    /// The admin bearer token.
    pub token: String,
    /// The P-256 key ServiceAccount tokens are signed with (PKCS#8 DER), kept in
    /// `sa.key` so that tokens stay valid across restarts.
    pub service_account_key: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

/// The directory holding the credentials of data directory `data_dir`.
pub fn pki_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("pki")
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TlsError + '_ {
    move |source| TlsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn read(path: &Path) -> Result<Option<String>, TlsError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Writes `contents` to `path` atomically, readable by the owner only (mode 0600).
fn write(path: &Path, contents: &str) -> Result<(), TlsError> {
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write as _;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(io_err(&tmp))?;
        f.write_all(contents.as_bytes()).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// The CA's certificate parameters; the same every time, so a reloaded CA key signs with the
/// same issuer name.
fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "listwatch-ca");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

/// A fresh random token: 32 random bytes, base64url without padding.
fn new_token() -> Result<String, TlsError> {
    let mut b = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut b)
        .map_err(|_| TlsError::Random)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// Loads the credentials of `data_dir`, creating the CA and token on first use, and issues a
/// serving certificate for `localhost`, `127.0.0.1`, `::1` and `extra_hosts` (IP addresses or
/// DNS names; unspecified addresses such as `0.0.0.0` are skipped).
pub fn ensure_credentials(
    data_dir: &Path,
    extra_hosts: &[String],
) -> Result<Credentials, TlsError> {
    let dir = pki_dir(data_dir);
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(&dir).map_err(io_err(&dir))?;
    let (ca_crt, ca_key) = (dir.join("ca.crt"), dir.join("ca.key"));
    let (ca_pem, ca_keypair) = match (read(&ca_crt)?, read(&ca_key)?) {
        (Some(c), Some(k)) => (c, KeyPair::from_pem(&k)?),
        _ => {
            let key = KeyPair::generate()?;
            let cert = ca_params().self_signed(&key)?;
            write(&ca_key, &key.serialize_pem())?;
            write(&ca_crt, &cert.pem())?;
            (cert.pem(), key)
        }
    };
    let token_path = dir.join("admin.token");
    let token = match read(&token_path)? {
        Some(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => {
            let t = new_token()?;
            write(&token_path, &t)?;
            t
        }
    };
    let sa_path = dir.join("sa.key");
    let service_account_key = match read(&sa_path)? {
        Some(k) => KeyPair::from_pem(&k)?.serialize_der(),
        None => {
            // rcgen's default key is P-256 (ES256), the algorithm the tokens use.
            let key = KeyPair::generate()?;
            write(&sa_path, &key.serialize_pem())?;
            key.serialize_der()
        }
    };
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    for h in extra_hosts {
        let unspecified = h
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        if !unspecified && !h.is_empty() && !hosts.contains(h) {
            hosts.push(h.clone());
        }
    }
    let mut params = CertificateParams::new(hosts)?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "listwatch-apiserver");
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let issuer = Issuer::new(ca_params(), ca_keypair);
    let cert = params.signed_by(&key, &issuer)?;
    write(&dir.join("apiserver.crt"), &cert.pem())?;
    write(&dir.join("apiserver.key"), &key.serialize_pem())?;
    Ok(Credentials {
        ca_pem,
        cert_der: cert.der().clone(),
        key_der: key.serialize_der(),
        token,
        service_account_key,
    })
}

/// Reads the CA (PEM) and admin token of `data_dir`, if `serve` has created them.
pub fn read_client_credentials(data_dir: &Path) -> Result<Option<(String, String)>, TlsError> {
    let dir = pki_dir(data_dir);
    match (read(&dir.join("ca.crt"))?, read(&dir.join("admin.token"))?) {
        (Some(ca), Some(token)) => Ok(Some((ca, token.trim().to_string()))),
        _ => Ok(None),
    }
}

/// Issues a client certificate from the CA of `data_dir`: (certificate PEM, PKCS#8 key PEM)
/// for the user `common_name` in the groups `organizations`.
///
/// # Errors
/// [`TlsError::NoCa`] if `serve` has not created the CA there; I/O or generation errors.
pub fn issue_client_certificate(
    data_dir: &Path,
    common_name: &str,
    organizations: &[&str],
) -> Result<(String, String), TlsError> {
    let dir = pki_dir(data_dir);
    let (Some(_), Some(ca_key)) = (read(&dir.join("ca.crt"))?, read(&dir.join("ca.key"))?) else {
        return Err(TlsError::NoCa(dir));
    };
    let issuer = Issuer::new(ca_params(), KeyPair::from_pem(&ca_key)?);
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for o in organizations {
        dn.push(DnType::OrganizationName, *o);
    }
    params.distinguished_name = dn;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A rustls server configuration for `creds`, offering ALPN `h2` and `http/1.1`. Client
/// certificates are optional; one that is presented must chain to our CA.
pub fn server_config(creds: &Credentials) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    use rustls::pki_types::pem::PemObject as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_slice(creds.ca_pem.as_bytes())
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    roots.add(ca)?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![creds.cert_der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(creds.key_der.clone())),
        )?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_created_once_and_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let a = ensure_credentials(&data, &["10.1.2.3".into(), "0.0.0.0".into()]).unwrap();
        let b = ensure_credentials(&data, &[]).unwrap();
        assert_eq!(a.ca_pem, b.ca_pem, "the CA survives restarts");
        assert_eq!(a.token, b.token, "the token survives restarts");
        assert_eq!(
            a.service_account_key, b.service_account_key,
            "the ServiceAccount token key survives restarts"
        );
        assert!(
            crate::auth::service_account_token::ServiceAccountTokens::from_pkcs8(
                &a.service_account_key
            )
            .is_ok(),
            "the key is a P-256 key"
        );
        assert!(a.token.len() >= 40);
        assert_ne!(a.cert_der, b.cert_der, "serving certificate re-issued");
        assert!(server_config(&a).is_ok());
        let (ca, tok) = read_client_credentials(&data).unwrap().unwrap();
        assert_eq!((ca, tok), (a.ca_pem.clone(), a.token.clone()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            let pki = pki_dir(&data);
            assert_eq!(mode(&data), 0o700, "the data directory is private");
            assert_eq!(mode(&pki), 0o700, "the pki directory is private");
            let files: Vec<_> = std::fs::read_dir(&pki)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            assert_eq!(files.len(), 6, "{files:?}");
            for f in files {
                assert_eq!(mode(&f), 0o600, "{} is private", f.display());
            }
        }
        let empty = tempfile::tempdir().unwrap();
        assert!(read_client_credentials(empty.path()).unwrap().is_none());
    }
}
