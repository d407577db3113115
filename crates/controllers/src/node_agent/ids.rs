//! Identifiers a container runtime would hand out — container IDs, image digests, machine
//! IDs — made up deterministically from what they identify, so that a restarted agent
//! computes the same ones and tests can predict them.

use std::hash::{DefaultHasher, Hash, Hasher};

/// `len` lower-case hex digits derived from `parts` (stable across processes: the std
/// `DefaultHasher` built with `new` always uses the same keys).
pub(crate) fn hex_digest(parts: &[&str], len: usize) -> String {
    let mut out = String::with_capacity(len + 16);
    let mut round = 0u64;
    while out.len() < len {
        let mut h = DefaultHasher::new();
        round.hash(&mut h);
        parts.hash(&mut h);
        out.push_str(&format!("{:016x}", h.finish()));
        round += 1;
    }
    out.truncate(len);
    out
}

/// The runtime's ID of the `restart`-th run of container `name` of the pod with `pod_uid`,
/// as the kubelet reports it (`containerd://` and 64 hex digits).
pub(crate) fn container_id(pod_uid: &str, name: &str, restart: i32) -> String {
    format!(
        "containerd://{}",
        hex_digest(&[pod_uid, name, &restart.to_string()], 64)
    )
}

/// `image` as the runtime names it: registry and repository spelled out
/// (`nginx:1.27` → `docker.io/library/nginx:1.27`), `:latest` when no tag or digest is given.
pub(crate) fn normalized_image(image: &str) -> String {
    let (name, suffix) = split_reference(image);
    let first = name.split('/').next().unwrap_or("");
    let has_registry =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        name.to_string()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    match suffix {
        Some(s) => format!("{full}{s}"),
        None => format!("{full}:latest"),
    }
}

/// The image's repository and its `:tag` or `@digest` suffix, if any.
fn split_reference(image: &str) -> (&str, Option<&str>) {
    if let Some(at) = image.find('@') {
        return (&image[..at], Some(&image[at..]));
    }
    // A ':' after the last '/' starts a tag (one before it belongs to a registry port).
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].find(':') {
        Some(colon) => {
            let at = last_slash + colon;
            (&image[..at], Some(&image[at..]))
        }
        None => (image, None),
    }
}

/// The image ID the runtime reports for `image`: its repository with a (made-up) digest.
pub(crate) fn image_id(image: &str) -> String {
    let normalized = normalized_image(image);
    let (repo, _) = split_reference(&normalized);
    format!("{repo}@sha256:{}", hex_digest(&[&normalized], 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = container_id("uid-1", "web", 0);
        assert_eq!(a, container_id("uid-1", "web", 0));
        assert_ne!(a, container_id("uid-1", "web", 1));
        assert_ne!(a, container_id("uid-2", "web", 0));
        assert_eq!(a.len(), "containerd://".len() + 64);
        assert!(a["containerd://".len()..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn images_are_spelled_out_as_the_runtime_does() {
        assert_eq!(normalized_image("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            normalized_image("nginx:1.27"),
            "docker.io/library/nginx:1.27"
        );
        assert_eq!(
            normalized_image("bitnami/redis:7"),
            "docker.io/bitnami/redis:7"
        );
        assert_eq!(
            normalized_image("registry.k8s.io/pause:3.10"),
            "registry.k8s.io/pause:3.10"
        );
        assert_eq!(
            normalized_image("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        let id = image_id("nginx:1.27");
        assert!(id.starts_with("docker.io/library/nginx@sha256:"), "{id}");
        assert_eq!(id, image_id("docker.io/library/nginx:1.27"));
    }
}
