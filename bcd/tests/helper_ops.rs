//! `bcd helper`'s five operations against a real swtpm over a real Unix socket, and the node's
//! checks of every answer: the helper's server (in this process, serving root, which the test
//! runs as) derives the same key twice, signs what verifies, certifies under its AK; a lying
//! helper (a test server speaking the protocol over a real TPM and tampering) is refused with the
//! exact messages, and at a renewal of an AK-naming identity nothing is stored.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use bcd::files::identity::load_in;
use bcd::files::{IDENTITY_FILE, NEXT_KEY_FILE};
use bcd::helper::keys::HelperTpm;
use bcd::helper::privilege::SystemUser;
use bcd::helper::protocol::{to_line, Answer, Blob, Request};
use bcd::node_key::{NodeKey, TpmHost};
use bcd::renewal::request::{prepare_renewal, PendingRenewal};
use bcd::tpm::Tpm;
use domain::attest::tpm::keys::{check_ak, verify_key_certification, KeyCertification};
use domain::attest::tpm::public::TpmPublic;
use domain::pki::NodeSigner;
use swtpm_fixture::swtpm::Swtpm;

use crate::common::{joined_with, keyset, now};

/// The helper's server in this process, on `dir/helper.sock`, serving root.
struct InProcess {
    socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl InProcess {
    fn start(dir: &Path, tpm: Tpm) -> InProcess {
        let socket = dir.join("helper.sock");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).unwrap();
                ready.send(()).unwrap();
                let root = SystemUser::by_name("root").unwrap();
                bcd::helper::server::serve(listener, root, tpm, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        is_ready.recv().unwrap();
        InProcess {
            socket,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn the_five_operations_answer_and_every_answer_checks() {
    let swtpm = Swtpm::start();
    let tpm = Tpm::open(&swtpm.tcti()).unwrap();
    let expected_ak = tpm.attestation_key().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let server = InProcess::start(tmp.path(), tpm.clone());
    let helper = HelperTpm::new(&server.socket);

    // tpm.ak: the TPM's AK, an AK by domain's check.
    let ak = helper.attestation_key().unwrap();
    assert_eq!(ak, expected_ak);
    let checked_ak = check_ak(&ak.public_area).unwrap();

    // tpm.nodekey twice: the same key.
    let key = helper.create_node_key().unwrap();
    assert!(key.is_remote());
    let again = helper.node_key(key.unique()).unwrap();
    assert_eq!(again.public_area(), key.public_area());
    assert_eq!(NodeSigner::public_key(&again), NodeSigner::public_key(&key));
    // The TPM itself derives that key from that unique.
    let local = tpm.load_node_key(key.unique()).unwrap();
    assert_eq!(local.public_area(), key.public_area());

    // tpm.sign: verifies under the key's public half.
    let signature = key.sign_es256(b"a message").unwrap();
    assert!(NodeSigner::public_key(&key).verify_es256(b"a message", &signature));

    // tpm.certify: verifies under the AK, for this key and this qualifying data.
    let qualifying = [7u8; 32];
    let certified = helper.certify(&ak, &key, &qualifying).unwrap();
    verify_key_certification(
        &checked_ak,
        KeyCertification {
            key_public: &certified.public,
            certify_info: &certified.certify_info,
            signature: &certified.signature,
        },
        &qualifying,
        NodeSigner::public_key(&key).uncompressed_point(),
    )
    .unwrap();

    // tpm.release, then the key signs again (derived anew).
    helper.release(key.unique()).unwrap();
    let after = key.sign_es256(b"after").unwrap();
    assert!(NodeSigner::public_key(&key).verify_es256(b"after", &after));

    // Through TpmHost: the record loads through the helper and the TPM is never opened.
    let host = TpmHost::through_helper(&server.socket);
    let loaded: NodeKey = host.load_node_key(key.unique()).unwrap().into();
    assert_eq!(loaded.public_key(), NodeSigner::public_key(&key));
    assert_eq!(loaded.kind().label(), "tpm");
    assert!(loaded
        .to_pem()
        .starts_with("-----BEGIN BCD TPM NODE KEY-----\n"));
    assert_eq!(
        host.open().unwrap_err().to_string(),
        format!(
            "the TPM (bcd helper at {0}) is unavailable: under [helper] this process does not \
             open the TPM; bcd helper ({0}) holds it",
            server.socket.display()
        )
    );
}

#[test]
fn an_unreachable_helper_names_its_socket_and_what_to_start() {
    let tmp = tempfile::tempdir().unwrap();
    let socket = tmp.path().join("none.sock");
    let err = HelperTpm::new(&socket).attestation_key().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "bcd helper is unreachable at {}: No such file or directory (os error 2) (start it: \
             systemctl start bcd-helper)",
            socket.display()
        )
    );
}

/// How the lying helper lies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lie {
    /// Nothing: every answer is the TPM's.
    Honest,
    /// `tpm.sign` is answered by another key.
    SignsWithAnotherKey,
    /// `tpm.nodekey` answers the AK's public area (restricted: not a node key).
    KeyWithoutNodeKeyAttributes,
    /// `tpm.ak` announces another TPM's AK.
    AnnouncesAnotherAk,
}

/// A test server speaking the protocol over `tpm` (and `other` for another AK), lying as `lie`
/// says; one thread per connection.
fn lying_helper(dir: &Path, tpm: Tpm, other: Tpm, lie: Lie) -> PathBuf {
    let socket = dir.join(format!("lying-{lie:?}.sock"));
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let (tpm, other) = (tpm.clone(), other.clone());
            std::thread::spawn(move || {
                let mut write = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    let request: Request = serde_json::from_str(&line).unwrap();
                    let answer = lie_to(request, &tpm, &other, lie);
                    if write.write_all(&to_line(&answer)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    socket
}

fn lie_to(request: Request, tpm: &Tpm, other: &Tpm, lie: Lie) -> Answer {
    match request {
        Request::NodeKey { .. } if lie == Lie::KeyWithoutNodeKeyAttributes => Answer::NodeKey {
            public_area: Blob(tpm.attestation_key().unwrap().public_area),
        },
        Request::NodeKey { unique } => Answer::NodeKey {
            public_area: Blob(tpm.load_node_key(&unique.0).unwrap().public_area().to_vec()),
        },
        Request::Sign { unique, digest } => {
            let mut signer = unique.0;
            if lie == Lie::SignsWithAnotherKey {
                signer[0] ^= 0xff;
            }
            let key = tpm.load_node_key(&signer).unwrap();
            Answer::Signature {
                signature: Blob(key.sign_digest(&digest.0).unwrap().to_vec()),
            }
        }
        Request::Ak {} => {
            let from = if lie == Lie::AnnouncesAnotherAk {
                other
            } else {
                tpm
            };
            Answer::Ak {
                public_area: Blob(from.attestation_key().unwrap().public_area),
            }
        }
        Request::Certify { unique, qualifying } => {
            let key = tpm.load_node_key(&unique.0).unwrap();
            let certified = tpm.certify(&key, &qualifying.0).unwrap();
            Answer::Certification {
                attest: Blob(certified.certify_info),
                signature: Blob(certified.signature),
            }
        }
        Request::Release { .. } => Answer::Released,
    }
}

/// The AK's attributes as the node-key check reports them.
fn attributes_of(public_area: &[u8]) -> u32 {
    TpmPublic::parse(public_area).unwrap().attributes
}

#[test]
fn a_lying_helpers_answers_are_refused_with_the_exact_messages() {
    let (a, b) = (Swtpm::start(), Swtpm::start());
    let (tpm, other) = (Tpm::open(&a.tcti()).unwrap(), Tpm::open(&b.tcti()).unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let honest_key = tpm.create_node_key().unwrap();

    let signs = HelperTpm::new(&lying_helper(
        tmp.path(),
        tpm.clone(),
        other.clone(),
        Lie::SignsWithAnotherKey,
    ));
    let key = signs.node_key(honest_key.unique()).unwrap();
    assert_eq!(
        key.sign_es256(b"m").unwrap_err().0,
        "the helper's signature is not the node key's"
    );

    let not_a_node_key = HelperTpm::new(&lying_helper(
        tmp.path(),
        tpm.clone(),
        other.clone(),
        Lie::KeyWithoutNodeKeyAttributes,
    ));
    let ak_attributes = attributes_of(&tpm.attestation_key().unwrap().public_area);
    assert_eq!(
        not_a_node_key
            .node_key(honest_key.unique())
            .unwrap_err()
            .to_string(),
        format!(
            "the helper's key lacks the node-key attributes: its attributes are \
             {ak_attributes:#010x}: fixedTPM, fixedParent, sensitiveDataOrigin, userWithAuth, \
             noDA and sign must be set, restricted and decrypt clear"
        )
    );

    let another_ak = HelperTpm::new(&lying_helper(
        tmp.path(),
        tpm.clone(),
        other.clone(),
        Lie::AnnouncesAnotherAk,
    ));
    let ak = another_ak.attestation_key().unwrap();
    assert_eq!(ak, other.attestation_key().unwrap());
    let key = another_ak.node_key(honest_key.unique()).unwrap();
    assert_eq!(
        another_ak
            .certify(&ak, &key, &[1u8; 32])
            .unwrap_err()
            .to_string(),
        "the helper certified with another AK"
    );
}

#[test]
fn a_renewal_through_a_lying_helper_stores_nothing() {
    let (a, b) = (Swtpm::start(), Swtpm::start());
    let (tpm, other) = (Tpm::open(&a.tcti()).unwrap(), Tpm::open(&b.tcti()).unwrap());
    let ak_attributes = attributes_of(&tpm.attestation_key().unwrap().public_area);
    let cases = [
        (
            Lie::SignsWithAnotherKey,
            "renewal: the next node key: the helper's signature is not the node key's".to_owned(),
        ),
        (
            Lie::KeyWithoutNodeKeyAttributes,
            format!(
                "renewal: the next node key in the TPM: the helper's key lacks the node-key \
                 attributes: its attributes are {ak_attributes:#010x}: fixedTPM, fixedParent, \
                 sensitiveDataOrigin, userWithAuth, noDA and sign must be set, restricted and \
                 decrypt clear"
            ),
        ),
        (
            Lie::AnnouncesAnotherAk,
            "renewal: the TPM's attestation key certifying the next key: the helper certified \
             with another AK"
                .to_owned(),
        ),
    ];
    for (lie, expected) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let ks = keyset();
        // The identity: a key of TPM a, the leaf naming the AK the helper announces.
        let announced = match lie {
            Lie::AnnouncesAnotherAk => other.attestation_key().unwrap(),
            _ => tpm.attestation_key().unwrap(),
        };
        let key: NodeKey = tpm.create_node_key().unwrap().into();
        let data_dir = tmp.path().join("data");
        std::fs::create_dir(&data_dir).unwrap();
        let (data, _) = joined_with(&data_dir, &ks, "n1", &key, &[&announced.statement()]);
        let socket = lying_helper(tmp.path(), tpm.clone(), other.clone(), lie);
        let host = TpmHost::through_helper(&socket);
        let identity_before = std::fs::read(data_dir.join(IDENTITY_FILE)).unwrap();
        // The current key loads through an honest helper; the renewal asks the lying one.
        let honest = lying_helper(tmp.path(), tpm.clone(), other.clone(), Lie::Honest);
        let mut current = load_in(&data, &TpmHost::through_helper(&honest)).unwrap();
        current.tpm = host.clone();
        let message = prepare_renewal(&data, &current, now(), &mut PendingRenewal::default())
            .err()
            .unwrap()
            .to_string();
        assert_eq!(message, expected, "{lie:?}");
        assert!(!data.exists(NEXT_KEY_FILE), "{lie:?}");
        assert_eq!(
            std::fs::read(data_dir.join(IDENTITY_FILE)).unwrap(),
            identity_before,
            "{lie:?}"
        );
    }
}

#[test]
fn the_server_refuses_what_is_not_a_request_and_lines_over_its_bound() {
    let swtpm = Swtpm::start();
    let tpm = Tpm::open(&swtpm.tcti()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let server = InProcess::start(tmp.path(), tpm);
    let stream = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    let mut write = stream.try_clone().unwrap();
    let mut read = BufReader::new(stream);
    let mut line = String::new();
    // An op the protocol does not have: refused, and the connection goes on.
    write.write_all(b"{\"op\":\"tpm.clear\"}\n").unwrap();
    read.read_line(&mut line).unwrap();
    let answer: Answer = serde_json::from_str(&line).unwrap();
    let Answer::Refused { error } = answer else {
        panic!("{line}")
    };
    assert!(
        error.starts_with("not a helper request: unknown variant `tpm.clear`"),
        "{error}"
    );
    line.clear();
    write.write_all(&to_line(&Request::Ak {})).unwrap();
    read.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("{\"answer\":\"ak\",\"publicArea\":\""),
        "{line}"
    );
    // A line over MAX_LINE: refused, and the connection closes.
    let long = vec![b'x'; bcd::helper::protocol::MAX_LINE + 1];
    let _ = write.write_all(&long);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut read, &mut rest).unwrap();
    assert_eq!(
        rest,
        "{\"answer\":\"refused\",\"error\":\"a request longer than 65536 bytes\"}\n"
    );
}

#[test]
fn a_connection_over_the_bound_is_refused_and_the_others_are_served() {
    use bcd::helper::server::MAX_CONNECTIONS;
    let swtpm = Swtpm::start();
    let tpm = Tpm::open(&swtpm.tcti()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let server = InProcess::start(tmp.path(), tpm);
    let ask = |stream: &std::os::unix::net::UnixStream| {
        let mut write = stream.try_clone().unwrap();
        write.write_all(&to_line(&Request::Ak {})).unwrap();
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        line
    };
    // MAX_CONNECTIONS held open, each served once (so each holds its place).
    let held: Vec<_> = (0..MAX_CONNECTIONS)
        .map(|_| std::os::unix::net::UnixStream::connect(&server.socket).unwrap())
        .collect();
    for stream in &held {
        assert!(ask(stream).starts_with("{\"answer\":\"ak\""));
    }
    // One more: a single refusal line, then the connection closes.
    let extra = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut BufReader::new(extra), &mut rest).unwrap();
    assert_eq!(
        rest,
        format!(
            "{{\"answer\":\"refused\",\"error\":\"bcd helper serves at most \
             {MAX_CONNECTIONS} connections at once\"}}\n"
        )
    );
    // The held ones are still served; once one closes, a new one is too.
    assert!(ask(&held[0]).starts_with("{\"answer\":\"ak\""));
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let again = std::os::unix::net::UnixStream::connect(&server.socket).unwrap();
    assert!(ask(&again).starts_with("{\"answer\":\"ak\""));
}

#[test]
fn a_key_loaded_through_the_helper_loads_again_while_it_restarts_but_signs_only_through_it() {
    let swtpm = Swtpm::start();
    let tpm = Tpm::open(&swtpm.tcti()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let server = InProcess::start(tmp.path(), tpm);
    let socket = server.socket.clone();
    let host = TpmHost::through_helper(&socket);
    let key = host.helper().unwrap().create_node_key().unwrap();
    let loaded = host.load_node_key(key.unique()).unwrap();
    drop(server);
    // The helper is gone: the record still loads (as this process checked it) ...
    let again = host.load_node_key(key.unique()).unwrap();
    assert_eq!(again.public_area(), loaded.public_area());
    // ... but nothing signs, and a key it never derived does not load.
    // (The in-process server leaves its socket file: nothing listens on it.)
    let unreachable = format!(
        "bcd helper is unreachable at {}: Connection refused (os error 111) (start it: \
         systemctl start bcd-helper)",
        socket.display()
    );
    assert_eq!(again.sign_es256(b"m").unwrap_err().0, unreachable);
    assert_eq!(
        host.load_node_key(&[9u8; 32]).unwrap_err().to_string(),
        unreachable
    );
}
