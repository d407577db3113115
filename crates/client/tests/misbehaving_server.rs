//! The REST client against a hand-written HTTP/1.1 server that misbehaves: the client must
//! answer with an error in bounded time and memory, never loop or hang.

use client::rest::resource::CONFIGMAPS;
use client::rest::{Api, Client, Config, Error, ListParams};
use k8s_openapi::api::core::v1::ConfigMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What the server writes back: a whole response, or a head followed by chunks forever.
enum Answer {
    Whole(Vec<u8>),
    EndlessChunks { head: Vec<u8>, chunk: Vec<u8> },
}

impl Answer {
    async fn write(self, sock: &mut tokio::net::TcpStream) -> std::io::Result<()> {
        match self {
            Answer::Whole(bytes) => sock.write_all(&bytes).await,
            Answer::EndlessChunks { head, chunk } => {
                sock.write_all(&head).await?;
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                loop {
                    sock.write_all(&framed).await?;
                }
            }
        }
    }
}

/// Serves every request on every connection with what `answer` writes (the request itself
/// is read up to its blank line and otherwise ignored). Returns the base URL.
async fn serve(
    answer: impl Fn(&mut tokio::net::TcpStream) -> Answer + Send + Sync + 'static,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                loop {
                    let mut req = Vec::new();
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(n) if n > 0 => req.extend_from_slice(&buf[..n]),
                            _ => return,
                        }
                    }
                    if answer(&mut sock).write(&mut sock).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

fn json_response(code: &str, body: &str) -> Answer {
    Answer::Whole(
        format!(
            "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

fn client(url: &str) -> Client {
    Client::new(Config::new(url).unwrap()).unwrap()
}

#[tokio::test]
async fn a_server_repeating_its_continue_token_is_an_error_not_an_endless_list() {
    let url = serve(|_| {
        json_response(
            "200 OK",
            r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"same"},"items":[{"metadata":{"name":"a"}}]}"#,
        )
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(client(&url), CONFIGMAPS, "default");
    let e = tokio::time::timeout(
        Duration::from_secs(10),
        cms.list_all(&ListParams::default()),
    )
    .await
    .expect("list_all returns")
    .unwrap_err();
    assert!(e.to_string().contains("repeated continue token"), "{e}");
}

#[tokio::test]
async fn an_endless_error_body_is_read_only_in_part() {
    let url = serve(|_| Answer::EndlessChunks {
        head: b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
        chunk: vec![b'x'; 16 * 1024],
    })
    .await;
    let c = client(&url);
    let e = tokio::time::timeout(
        Duration::from_secs(10),
        c.request_bytes(http::Method::GET, "/api/v1/namespaces", None),
    )
    .await
    .expect("the error comes back while the body is still being sent")
    .unwrap_err();
    assert_eq!(e.code(), Some(503), "{e}");
    assert!(
        matches!(&e, Error::Api(_) | Error::UnexpectedResponse { .. }),
        "{e:?}"
    );
}
