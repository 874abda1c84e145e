//! Writes every seed (see `fuzz_targets::seeds`) to `fuzz/seeds/<target>/<name>`, replacing
//! what is there: `cargo run -p toolstream-fuzz-targets --example make_seeds`.

use fuzz_targets::seeds;

fn main() -> std::io::Result<()> {
    let root = seeds::fuzz_dir().join("seeds");
    let all = seeds::all(&seeds::recordings_dir())?;
    for (target, _) in fuzz_targets::TARGETS {
        let dir = root.join(target);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
    }
    for seed in &all {
        std::fs::write(root.join(seed.target).join(&seed.name), &seed.data)?;
    }
    println!("{} seeds written under {}", all.len(), root.display());
    Ok(())
}
