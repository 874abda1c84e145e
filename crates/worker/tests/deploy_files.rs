//! The deploy files hold together without a Docker engine or a cluster: the Dockerfile copies
//! paths that exist and builds a package and binary that exist with a toolchain the workspace
//! accepts; docker-compose.yml and the Kubernetes manifests parse; the partition count agrees
//! everywhere (nats-server mapping, compose workers, StatefulSet replicas, env); and what each
//! of them runs, run here as a plain process (`toolstream run --print-config` with the same
//! environment), resolves to the configuration they intend.

// A test: a panic is its failure (the workspace denies unwrap/expect in runtime code only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_yaml::Value as Yaml;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// The `N` of `{{partition(N,1)}}` in deploy/nats-server.conf (every mapping must agree).
fn conf_partitions() -> u32 {
    let conf = read("deploy/nats-server.conf");
    let counts: Vec<u32> = conf
        .match_indices("{{partition(")
        .map(|(i, m)| {
            let rest = &conf[i + m.len()..];
            rest[..rest.find(',').expect("partition(N,")]
                .trim()
                .parse()
                .expect("partition count")
        })
        .collect();
    assert_eq!(
        counts.len(),
        4,
        "chunks, results, query.message, query.history"
    );
    assert!(counts.iter().all(|c| *c == counts[0]), "{counts:?}");
    counts[0]
}

/// One Dockerfile instruction: keyword and arguments (continuations joined).
fn dockerfile() -> Vec<(String, String)> {
    let text = read("deploy/Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(cont) = t.strip_suffix('\\') {
            current.push_str(cont);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (kw, args) = current.split_once(' ').unwrap_or((current.as_str(), ""));
        out.push((kw.to_ascii_uppercase(), args.trim().to_string()));
        current.clear();
    }
    out
}

/// `K=V K2=V2` of an ENV instruction.
fn env_pairs(args: &str) -> Vec<(String, String)> {
    args.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("ENV K=V form");
            (k.to_string(), v.trim_matches('"').to_string())
        })
        .collect()
}

/// The image's environment, with container paths that the image COPYs from the repository
/// replaced by their repository paths (so the real binary can read them here).
fn image_env() -> BTreeMap<String, String> {
    let instructions = dockerfile();
    let mut copied: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut env = BTreeMap::new();
    for (kw, args) in &instructions {
        if kw == "COPY" && !args.starts_with("--from") {
            let parts: Vec<&str> = args.split_whitespace().collect();
            if let [src, dst] = parts.as_slice() {
                copied.insert(dst.to_string(), repo().join(src));
            }
        }
        if kw == "ENV" {
            env.extend(env_pairs(args));
        }
    }
    for v in env.values_mut() {
        if let Some(src) = copied.get(v.as_str()) {
            *v = src.display().to_string();
        }
    }
    env
}

/// Runs `toolstream <args> --print-config` with exactly `env` (plus PATH) and parses the TOML.
fn print_config(args: &[&str], env: &BTreeMap<String, String>) -> toml::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolstream"));
    cmd.args(args).arg("--print-config").env_clear();
    cmd.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd.envs(env);
    let out = cmd.output().expect("run toolstream");
    assert!(
        out.status.success(),
        "toolstream {args:?} --print-config failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    toml::from_str(&String::from_utf8_lossy(&out.stdout)).expect("print-config is TOML")
}

fn get<'a>(v: &'a toml::Value, path: &str) -> &'a toml::Value {
    path.split('.').fold(v, |v, k| {
        v.get(k).unwrap_or_else(|| panic!("no {path} in {v}"))
    })
}

/// `cargo metadata --locked` of the resolved graph the image builds: Linux (the Dockerfile's
/// bookworm images) on this machine's architecture, with `cargo_home` as `CARGO_HOME` when
/// given. Not `--offline`: metadata needs the manifest of every package in the graph, and a
/// fresh machine has downloaded only what its builds needed (never the Windows-only crates of
/// the lock file), so an offline run failed there on the first `cargo test`.
/// `--filter-platform` keeps the graph to what a Linux build uses, so at most the few packages
/// a host build did not fetch are downloaded (crates.io must be reachable, as for any build).
fn locked_metadata(cargo_home: Option<&Path>) -> Vec<u8> {
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", &target])
        .current_dir(repo());
    if let Some(home) = cargo_home {
        cmd.env("CARGO_HOME", home);
    }
    let metadata = cmd.output().expect("cargo metadata");
    assert!(
        metadata.status.success(),
        "cargo metadata (CARGO_HOME {cargo_home:?}) failed: {}",
        String::from_utf8_lossy(&metadata.stderr)
    );
    metadata.stdout
}

/// The bug: `cargo metadata --offline` failed on a fresh machine whose cargo home lacked the
/// Windows-only crates of the lock file. With an empty cargo home (its registry settings
/// copied, so a mirror still applies; same toolchain) the check's metadata still resolves.
#[test]
fn cargo_metadata_resolves_with_an_empty_cargo_home() {
    let home = tempfile::tempdir().expect("temp cargo home");
    let real_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
    for name in ["config.toml", "config"] {
        if let Some(file) = real_home.as_ref().map(|h| h.join(name)) {
            if file.is_file() {
                std::fs::copy(&file, home.path().join(name)).expect("copy cargo config");
            }
        }
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&locked_metadata(Some(home.path()))).expect("metadata");
    assert!(
        meta["packages"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "async-nats")),
        "the resolved graph lists the locked dependencies"
    );
}

#[test]
fn dockerfile_copies_existing_paths_and_builds_the_real_binary() {
    let instructions = dockerfile();
    let stages: Vec<String> = instructions
        .iter()
        .filter(|(kw, _)| kw == "FROM")
        .filter_map(|(_, a)| a.split_whitespace().nth(2).map(str::to_string))
        .collect();
    for (kw, args) in &instructions {
        if kw != "COPY" {
            continue;
        }
        let parts: Vec<&str> = args.split_whitespace().collect();
        if let Some(stage) = parts[0].strip_prefix("--from=") {
            assert!(stages.iter().any(|s| s == stage), "unknown stage {stage}");
            assert_eq!(
                parts[1], "/src/target/release/toolstream",
                "copies the binary the build stage builds"
            );
            continue;
        }
        for src in &parts[..parts.len() - 1] {
            assert!(repo().join(src).exists(), "Dockerfile copies missing {src}");
        }
    }
    // Every workspace member is copied, or `cargo build` cannot load the workspace.
    let root: toml::Value = toml::from_str(&read("Cargo.toml")).expect("root Cargo.toml");
    let copied: Vec<&str> = instructions
        .iter()
        .filter(|(kw, a)| kw == "COPY" && !a.starts_with("--from"))
        .flat_map(|(_, a)| a.split_whitespace().collect::<Vec<_>>())
        .collect();
    for member in get(&root, "workspace.members").as_array().expect("members") {
        let member = member.as_str().expect("member path");
        let top = member.split('/').next().expect("top dir");
        assert!(
            copied.contains(&top),
            "workspace member {member} not copied"
        );
    }
    // The build command names this package and binary.
    let worker: toml::Value =
        toml::from_str(&read("crates/worker/Cargo.toml")).expect("worker Cargo.toml");
    let run = instructions
        .iter()
        .find(|(kw, a)| kw == "RUN" && a.contains("cargo build"))
        .expect("a cargo build step");
    let package = get(&worker, "package.name").as_str().expect("name");
    assert!(run.1.contains(&format!("-p {package} ")), "{}", run.1);
    assert!(run.1.contains("--bin toolstream"), "{}", run.1);
    // The toolchain image builds the workspace and every locked dependency: at least the
    // highest rust-version declared anywhere in the resolved graph.
    let image = &instructions[0].1;
    let tag = image
        .split_whitespace()
        .next()
        .and_then(|i| i.strip_prefix("rust:"))
        .and_then(|t| t.split('-').next())
        .expect("FROM rust:<version>-...");
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
    let metadata = locked_metadata(None);
    let meta: serde_json::Value = serde_json::from_slice(&metadata).expect("metadata");
    let (need, who) = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| {
            let v = p["rust_version"].as_str()?;
            Some((parse(v), format!("{} {}", p["name"], p["version"])))
        })
        .max()
        .expect("some rust-version");
    assert!(
        parse(tag) >= need,
        "image rust {tag} is older than {need:?} required by {who}"
    );
}

#[test]
fn the_image_command_resolves_to_the_container_config() {
    let instructions = dockerfile();
    let json = |kw: &str| -> Vec<String> {
        let (_, a) = instructions
            .iter()
            .find(|(k, _)| k == kw)
            .unwrap_or_else(|| panic!("no {kw}"));
        serde_json::from_str(a).unwrap_or_else(|e| panic!("{kw} is not exec form: {e}"))
    };
    let mut argv = json("ENTRYPOINT");
    argv.extend(json("CMD"));
    assert_eq!(argv[0], "toolstream");
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    let config = print_config(&args, &image_env());
    assert_eq!(get(&config, "data_dir").as_str(), Some("/data"));
    assert_eq!(
        get(&config, "metrics_listen").as_str(),
        Some("0.0.0.0:9090")
    );
    assert_eq!(get(&config, "log_format").as_str(), Some("json"));
    let exposed: Vec<&str> = instructions
        .iter()
        .filter(|(k, _)| k == "EXPOSE")
        .map(|(_, a)| a.as_str())
        .collect();
    assert_eq!(exposed, ["9090"]);
}

fn yaml_docs(rel: &str) -> Vec<Yaml> {
    let text = read(rel);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            let mut v = <Yaml as serde::Deserialize>::deserialize(d)
                .unwrap_or_else(|e| panic!("{rel} does not parse: {e}"));
            v.apply_merge().expect("merge keys");
            v
        })
        .collect()
}

fn ystr<'a>(v: &'a Yaml, path: &str) -> &'a str {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_str()
        .unwrap_or_else(|| panic!("{path} is not a string"))
}

#[test]
fn compose_runs_one_worker_per_partition_each_with_its_own_store() {
    let partitions = conf_partitions();
    let docs = yaml_docs("deploy/docker-compose.yml");
    let compose = &docs[0];
    let services = compose["services"].as_mapping().expect("services");
    let nats = &compose["services"]["nats"];
    let volumes: Vec<&str> = nats["volumes"]
        .as_sequence()
        .expect("nats volumes")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert!(
        volumes.iter().any(|v| v.starts_with("./nats-server.conf:")
            && repo().join("deploy/nats-server.conf").exists()),
        "nats mounts deploy/nats-server.conf: {volumes:?}"
    );
    let mut seen = Vec::new();
    let mut stores = Vec::new();
    for (name, svc) in services {
        let name = name.as_str().expect("service name");
        if !name.starts_with("toolstream-") {
            continue;
        }
        let context = repo().join("deploy").join(ystr(svc, "build.context"));
        assert!(
            context.join(ystr(svc, "build.dockerfile")).is_file(),
            "{name}: Dockerfile"
        );
        let mut env = image_env();
        for (k, v) in svc["environment"].as_mapping().expect("environment") {
            env.insert(
                k.as_str().expect("key").to_string(),
                v.as_str()
                    .expect("string value (quote numbers)")
                    .to_string(),
            );
        }
        let config = print_config(&["run"], &env);
        assert_eq!(
            get(&config, "consumer.partitions").as_integer(),
            Some(i64::from(partitions))
        );
        seen.push(
            get(&config, "consumer.partition")
                .as_integer()
                .expect("partition"),
        );
        assert_eq!(get(&config, "nats_url").as_str(), Some("nats://nats:4222"));
        let vols = svc["volumes"].as_sequence().expect("volumes");
        stores.push(vols[0].as_str().expect("volume").to_string());
    }
    seen.sort();
    assert_eq!(
        seen,
        (0..i64::from(partitions)).collect::<Vec<_>>(),
        "one worker per partition"
    );
    stores.sort();
    stores.dedup();
    assert_eq!(
        stores.len(),
        partitions as usize,
        "each worker has its own sled volume"
    );
}

#[test]
fn kubernetes_manifests_agree_with_the_server_config_and_pick_the_partition_from_the_pod() {
    let partitions = conf_partitions();
    let nats = yaml_docs("deploy/kubernetes/nats.yaml");
    let config_map = nats
        .iter()
        .find(|d| ystr(d, "kind") == "ConfigMap")
        .expect("ConfigMap");
    assert_eq!(
        config_map["data"]["nats-server.conf"]
            .as_str()
            .expect("data.nats-server.conf"),
        read("deploy/nats-server.conf"),
        "the ConfigMap must carry deploy/nats-server.conf verbatim"
    );
    let kustomization = yaml_docs("deploy/kubernetes/kustomization.yaml");
    for r in kustomization[0]["resources"]
        .as_sequence()
        .expect("resources")
    {
        let r = r.as_str().expect("resource");
        assert!(repo().join("deploy/kubernetes").join(r).is_file(), "{r}");
    }

    let docs = yaml_docs("deploy/kubernetes/toolstream.yaml");
    let sts = docs
        .iter()
        .find(|d| ystr(d, "kind") == "StatefulSet")
        .expect("StatefulSet");
    assert_eq!(
        sts["spec"]["replicas"].as_u64(),
        Some(u64::from(partitions))
    );
    assert!(
        sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as_str() == Some("data"),
        "a PVC per pod for sled"
    );
    let container = &sts["spec"]["template"]["spec"]["containers"][0];
    let mounts = container["volumeMounts"].as_sequence().expect("mounts");
    assert!(mounts
        .iter()
        .any(|m| m["name"].as_str() == Some("data") && m["mountPath"].as_str() == Some("/data")));
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(
            ystr(container, &format!("{probe}.httpGet.path")),
            "/healthz"
        );
    }
    let mut env = image_env();
    for e in container["env"].as_sequence().expect("env") {
        env.insert(ystr(e, "name").to_string(), ystr(e, "value").to_string());
    }
    // Run the container command as a plain process, as pod toolstream-3 would.
    let command: Vec<&str> = container["command"]
        .as_sequence()
        .expect("command")
        .iter()
        .map(|c| c.as_str().expect("string"))
        .collect();
    assert_eq!(&command[..2], ["/bin/sh", "-c"]);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_toolstream"))
        .parent()
        .expect("bin dir");
    let out = Command::new(command[0])
        .arg(command[1])
        .arg(format!("{} --print-config", command[2]))
        .env_clear()
        .envs(&env)
        .env("HOSTNAME", "toolstream-3")
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .output()
        .expect("run the container command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: toml::Value = toml::from_str(&String::from_utf8_lossy(&out.stdout)).expect("TOML");
    assert_eq!(get(&config, "consumer.partition").as_integer(), Some(3));
    assert_eq!(
        get(&config, "consumer.partitions").as_integer(),
        Some(i64::from(partitions))
    );
    assert_eq!(
        get(&config, "metrics_listen").as_str(),
        Some("0.0.0.0:9090")
    );
}
