//! The end-to-end setup the worker's integration tests share: a nats-server, a data directory,
//! `toolstream run` started on them, a client, the streams and consumer provisioned, a producer.

use super::{client, wait_provisioned, Producer, Worker};
use crate::NatsServer;
use async_nats::jetstream;
use std::path::{Path, PathBuf};

/// A started worker on its own server, provisioned and ready for input. Dropping it stops the
/// worker, then the server, then removes the data directory.
pub struct E2e {
    /// The worker (its store is [`E2e::store`]).
    pub worker: Worker,
    /// Publishes input with the contract's headers.
    pub producer: Producer,
    /// JetStream on `client`.
    pub js: jetstream::Context,
    /// A plain client of the server.
    pub client: async_nats::Client,
    /// Holds the store directory and the worker's log.
    pub dir: tempfile::TempDir,
    /// The server.
    pub server: NatsServer,
}

impl E2e {
    /// Starts the `toolstream` binary `bin` with `flags` on a fresh nats-server and returns
    /// once the worker has provisioned its streams and consumer `toolstream`.
    pub async fn start(bin: &Path, flags: &[&str]) -> E2e {
        E2e::start_with_env(bin, flags, &[]).await
    }

    /// [`E2e::start`] with extra environment variables for the worker.
    pub async fn start_with_env(bin: &Path, flags: &[&str], env: &[(&str, &str)]) -> E2e {
        let server = NatsServer::start().expect("nats-server");
        E2e::start_on(server, bin, flags, env).await
    }

    /// [`E2e::start`] on a given server, with extra environment variables for the worker.
    pub async fn start_on(
        server: NatsServer,
        bin: &Path,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> E2e {
        let dir = tempfile::tempdir().expect("temporary directory");
        let worker = Worker::start_bin(bin, &server.url(), &dir.path().join("store"), flags, env);
        let client = client(&server.url()).await;
        let js = jetstream::new(client.clone());
        wait_provisioned(&js, "toolstream").await;
        E2e {
            worker,
            producer: Producer::new(js.clone()),
            js,
            client,
            dir,
            server,
        }
    }

    /// What most tests use: the worker, JetStream and the producer.
    pub fn parts(&mut self) -> (&mut Worker, &jetstream::Context, &Producer) {
        (&mut self.worker, &self.js, &self.producer)
    }

    /// The worker's data directory.
    pub fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }
}
