//! The user of a client certificate, as kube-apiserver's x509 authenticator reads it: the
//! subject's common name is the user, each organization a group. The certificate has already
//! been verified by the TLS layer (it chains to the server's CA and is within its validity);
//! this only reads it.

use super::user_info::UserInfo;

/// The user a verified client certificate (DER) names; `None` if it cannot be parsed or has
/// no common name (such a certificate authenticates nobody).
pub fn user_of(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    if name.is_empty() {
        return None;
    }
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .filter(|o| !o.is_empty())
        .map(String::from)
        .collect();
    Some(UserInfo::authenticated(name, groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};

    fn cert(cn: Option<&str>, orgs: &[&str]) -> Vec<u8> {
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        if let Some(cn) = cn {
            dn.push(DnType::CommonName, cn);
        }
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        p.distinguished_name = dn;
        let key = KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn common_name_is_the_user_and_organizations_the_groups() {
        // rcgen keeps one value per attribute type: one organization here.
        let u = user_of(&cert(Some("alice"), &["developers"])).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["developers", "system:authenticated"]);
        assert!(user_of(&cert(None, &["x"])).is_none());
        assert!(user_of(b"not a certificate").is_none());
        assert!(user_of(&[]).is_none());
    }
}
