//! The embedded store on a disk that fails under it: a write the disk refused (full, or a
//! failed `fsync`) is answered with an error and never stored, reads and watches go on, and
//! writes work again once the disk does; after a restart exactly the acknowledged writes
//! are there. A store file that is damaged stops the open with a message that names the
//! file and says what to do.

use bytes::Bytes;
use std::time::Duration;
use storage::disk_faults::DiskFaults;
use storage::embedded::{EmbeddedOptions, EmbeddedStorage};
use storage::{Storage, StorageError, WatchMessage};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[tokio::test]
async fn writes_the_disk_refuses_are_never_acknowledged_and_work_again_after() {
    let dir = tempfile::tempdir().unwrap();
    let faults = DiskFaults::new();
    let store =
        EmbeddedStorage::open_with_faults(dir.path(), EmbeddedOptions::default(), faults.clone())
            .unwrap();
    let mut watch = store.watch(b("/k/"), 0).await.unwrap();
    let mut acked = vec![store.create(b("/k/1"), b("one")).await.unwrap()];

    for (what, set) in [
        ("full disk", DiskFaults::set_full as fn(&DiskFaults, bool)),
        ("failing fsync", DiskFaults::set_failing_sync),
    ] {
        set(&faults, true);
        let before = store.current_revision().await.unwrap();
        let key = format!("/k/refused-{}", what.replace(' ', "-"));
        match store.create(b(&key), b("lost")).await {
            Err(StorageError::Internal(msg)) => {
                assert!(msg.contains("not stored"), "{what}: {msg}")
            }
            other => panic!("{what}: a write on a failing disk answered {other:?}"),
        }
        // Nothing of it is visible, and everything else still is.
        assert_eq!(store.get(key.as_bytes()).await.unwrap(), None, "{what}");
        assert_eq!(store.current_revision().await.unwrap(), before, "{what}");
        assert!(store.get(b"/k/1").await.unwrap().is_some(), "{what}");
        // An update refused the same way leaves the old value.
        assert!(store
            .update(b("/k/1"), b("changed"), acked[0].mod_revision)
            .await
            .is_err());
        assert_eq!(
            store.get(b"/k/1").await.unwrap().map(|kv| kv.value),
            Some(b("one"))
        );
        set(&faults, false);
        // Writes work again at once.
        let kv = store
            .create(b(&format!("/k/after-{}", what.replace(' ', "-"))), b("ok"))
            .await
            .unwrap();
        assert_eq!(
            kv.mod_revision,
            before + 1,
            "{what}: no revision was used up"
        );
        acked.push(kv);
    }
    assert!(faults.injected() >= 2);

    // Watchers saw exactly the acknowledged writes, in order.
    let mut seen = Vec::new();
    while seen.len() < acked.len() {
        let msg = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("a watch event")
            .expect("the watch is open")
            .unwrap();
        if let WatchMessage::Events(evs) = msg {
            seen.extend(evs.into_iter().map(|e| (e.kv.key, e.revision)));
        }
    }
    let want: Vec<(Bytes, u64)> = acked
        .iter()
        .map(|kv| (kv.key.clone(), kv.mod_revision))
        .collect();
    assert_eq!(seen, want);

    // A restart finds what was acknowledged and nothing else.
    drop(watch);
    drop(store);
    let store = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
    let all = store
        .range(storage::RangeRequest::prefix(b("/k/")))
        .await
        .unwrap();
    let keys: Vec<Bytes> = all.kvs.iter().map(|kv| kv.key.clone()).collect();
    let mut want: Vec<Bytes> = acked.iter().map(|kv| kv.key.clone()).collect();
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(
        store.current_revision().await.unwrap(),
        acked.last().unwrap().mod_revision
    );
}

#[test]
fn a_damaged_store_file_stops_the_open_with_what_to_do() {
    for damage in ["truncated", "overwritten", "garbage"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let store = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
            rt.block_on(async {
                for i in 0..200 {
                    store
                        .create(b(&format!("/k/{i:04}")), Bytes::from(vec![b'x'; 2000]))
                        .await
                        .unwrap();
                }
            });
        }
        let file = dir.path().join("listwatch.redb");
        let bytes = std::fs::read(&file).unwrap();
        let mut mended_at = None;
        let damaged = match damage {
            "truncated" => bytes[..bytes.len() / 3].to_vec(),
            "overwritten" => {
                // Bytes inside a stored value changed (a bad sector, a stray write).
                let mut b = bytes.clone();
                let at = b
                    .windows(64)
                    .position(|w| w.iter().all(|&x| x == b'x'))
                    .expect("a stored value in the file");
                b[at + 32] = b'y';
                mended_at = Some(at + 32);
                b
            }
            _ => b"this is not a listwatch store".repeat(100),
        };
        std::fs::write(&file, &damaged).unwrap();
        match EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()) {
            Ok(store) => {
                // An open that succeeds must not have lost anything silently.
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let n = rt
                    .block_on(store.range(storage::RangeRequest::prefix(b("/k/"))))
                    .unwrap()
                    .kvs
                    .len();
                panic!("{damage}: the damaged store opened, with {n} of 200 keys");
            }
            Err(StorageError::Internal(msg)) => {
                assert!(msg.contains(&file.display().to_string()), "{damage}: {msg}");
                assert!(msg.contains("cannot be read"), "{damage}: {msg}");
                assert!(
                    msg.contains("Restore the data directory from a backup"),
                    "{damage}: {msg}"
                );
            }
            Err(e) => panic!("{damage}: {e:?}"),
        }
        // Nothing was changed by the failed open.
        // Nothing was lost by the failed open: with the damaged byte mended, every record
        // is there again.
        if let Some(at) = mended_at {
            let mut bytes = std::fs::read(&file).unwrap();
            bytes[at] = b'x';
            std::fs::write(&file, &bytes).unwrap();
            let store = EmbeddedStorage::open(dir.path(), EmbeddedOptions::default()).unwrap();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let kvs = rt
                .block_on(store.range(storage::RangeRequest::prefix(b("/k/"))))
                .unwrap()
                .kvs;
            assert_eq!(kvs.len(), 200);
            assert!(kvs.iter().all(|kv| kv.value.iter().all(|&x| x == b'x')));
        }
    }
}
