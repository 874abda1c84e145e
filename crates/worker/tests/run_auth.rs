//! Connecting with every kind of NATS authentication the worker offers, against real servers
//! configured for it: token, user/password (password from the environment), nkey seed file,
//! and mutual TLS with a custom CA (certificates made with the `openssl` CLI). A worker with a
//! wrong password does not get in. (`.creds` needs an operator/account JWT setup and is not
//! exercised here.)

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

use toolstream_testkit::NatsServer;

/// Starts a worker with `extra` flags and `env`, and waits for "JetStream ready" (provisioned
/// through the authenticated connection).
fn ready_with(url: &str, data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Worker {
    let mut w = Worker::start_with_env(url, data, extra, env);
    w.wait_ready();
    assert!(w.terminate(), "{}", tail(&w.log(), 20));
    w
}

#[test]
fn token_authentication() {
    let server = NatsServer::start_with_config("authorization { token: \"s3cret-token\" }\n")
        .expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    ready_with(
        &server.url(),
        &dir.path().join("s"),
        &["--token", "s3cret-token"],
        &[],
    );
}

#[test]
fn user_and_password_with_the_password_from_the_environment() {
    let server = NatsServer::start_with_config(
        "authorization { users = [ { user: \"ts\", password: \"pw-123\" } ] }\n",
    )
    .expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    ready_with(
        &server.url(),
        &dir.path().join("s"),
        &["--user", "ts"],
        &[("TOOLSTREAM_PASSWORD", "pw-123")],
    );

    // A wrong password never gets to provision; the worker keeps retrying and says why.
    let mut w = Worker::start(
        &server.url(),
        &dir.path().join("t"),
        &["--user", "ts", "--password", "wrong"],
    );
    eventually(WAIT, || w.log().to_lowercase().contains("authorization"))
        .unwrap_or_else(|| panic!("no auth error logged:\n{}", w.log()));
    assert!(!w.log().contains("JetStream ready"));
    assert!(w.terminate(), "stops cleanly even before provisioning");
}

#[test]
fn nkey_seed_file() {
    let kp = nkeys::KeyPair::new_user();
    let server = NatsServer::start_with_config(&format!(
        "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}\n",
        kp.public_key()
    ))
    .expect("nats-server");
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("user.nk");
    std::fs::write(&seed, format!("{}\n", kp.seed().unwrap())).unwrap();
    ready_with(
        &server.url(),
        &dir.path().join("s"),
        &["--nkey-seed-file", seed.to_str().unwrap()],
        &[],
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl CLI is needed for the TLS test (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA.
fn make_certs(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=toolstream test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, cn) in [("server", "127.0.0.1"), ("client", "toolstream")] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
}

#[test]
fn mutual_tls_with_a_custom_ca() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let p = |f: &str| certs.path().join(f).to_str().unwrap().to_string();
    let server = NatsServer::start_with_config(&format!(
        "tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        p("server.pem"),
        p("server.key"),
        p("ca.pem")
    ))
    .expect("nats-server with TLS");
    let url = format!("tls://127.0.0.1:{}", server.port());
    let dir = tempfile::tempdir().unwrap();
    ready_with(
        &url,
        &dir.path().join("s"),
        &[
            "--tls-ca-file",
            &p("ca.pem"),
            "--tls-cert-file",
            &p("client.pem"),
            "--tls-key-file",
            &p("client.key"),
        ],
        &[],
    );
}
