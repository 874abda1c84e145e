//! CPU time and peak resident memory of a process, read from `/proc` (Linux).

use std::time::Duration;

/// User + system CPU time of process `pid` so far (`/proc/<pid>/stat`, fields 14 and 15).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the command name (field 2) is in parentheses and may contain spaces: count after it
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ticks(utime + stime))
}

/// CPU time of this process so far.
pub fn own_cpu_time() -> Option<Duration> {
    cpu_time(std::process::id())
}

/// Peak resident set size of process `pid` in bytes (`VmHWM` in `/proc/<pid>/status`).
pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Clock ticks to a duration (`sysconf(_SC_CLK_TCK)` is 100 on every Linux this runs on).
fn ticks(n: u64) -> Duration {
    Duration::from_millis(n * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let start = own_cpu_time().expect("own stat");
        // burn a little CPU so the figure moves
        let mut x = 0u64;
        let until = std::time::Instant::now() + Duration::from_millis(60);
        while std::time::Instant::now() < until {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let end = own_cpu_time().expect("own stat");
        assert!(end >= start);
        assert!(end > Duration::ZERO);
        let rss = peak_rss(std::process::id()).expect("own status");
        assert!(
            rss > 1024 * 1024,
            "a running test binary holds more than 1 MiB: {rss}"
        );
    }
}
