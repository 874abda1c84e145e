//! How client commands talk to a person: progress on stderr (only on a terminal, one line
//! redrawn), color (only when stdout is a terminal and `NO_COLOR` is unset), aligned columns.
//! `--json` output never goes through here.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Whether stdout is a terminal a person reads (color and alignment for people).
pub fn stdout_is_terminal() -> bool {
    std::io::stdout().is_terminal()
}

/// Colors for a person's terminal; plain text when redirected or `NO_COLOR` is set.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    on: bool,
}

impl Style {
    /// For stdout.
    pub fn stdout() -> Style {
        Style {
            on: stdout_is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    /// Good news (completed).
    pub fn good(&self, text: &str) -> String {
        self.paint("32", text)
    }

    /// Bad news (invalid, dead letter, a difference).
    pub fn bad(&self, text: &str) -> String {
        self.paint("31", text)
    }

    /// Worth a look (abandoned, orphaned, parked).
    pub fn warn(&self, text: &str) -> String {
        self.paint("33", text)
    }

    /// Less important (ids, sequence numbers).
    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    /// Headings.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    /// A call or event status, colored by what it means.
    pub fn status(&self, status: &str) -> String {
        match status {
            "completed" | "matched" => self.good(status),
            "invalid" | "dead_letter" => self.bad(status),
            "abandoned" | "orphaned" | "open" | "pending" => self.warn(status),
            other => other.to_string(),
        }
    }
}

/// A progress line on stderr for long work, shown only on a terminal and only once the work
/// takes longer than a moment.
#[derive(Debug)]
pub struct Progress {
    what: &'static str,
    started: Instant,
    shown: std::cell::Cell<bool>,
    on: bool,
}

impl Progress {
    /// Progress of `what` (the command's name).
    pub fn new(what: &'static str) -> Progress {
        Progress {
            what,
            started: Instant::now(),
            shown: std::cell::Cell::new(false),
            on: std::io::stderr().is_terminal(),
        }
    }

    /// `read` of `total` `unit` done.
    pub fn show(&self, read: u64, total: u64, unit: &str) {
        if !self.on || self.started.elapsed() < Duration::from_millis(300) {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{}: {read}/{total} {unit}\x1b[K", self.what);
        let _ = err.flush();
        self.shown.set(true);
    }

    /// Clears the line.
    pub fn done(&self) {
        if self.shown.get() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// Rows as aligned columns (each column as wide as its widest cell, by characters).
pub fn columns(rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = visible_width(cell);
            if widths.len() <= i {
                widths.push(w);
            } else if widths[i] < w {
                widths[i] = w;
            }
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i].saturating_sub(visible_width(cell)) + 2;
                    line.push_str(&" ".repeat(pad));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// Characters a person sees (escape sequences of [`Style`] not counted).
fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut in_escape = false;
    for ch in text.chars() {
        match (in_escape, ch) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => width += 1,
        }
    }
    width
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_visible_width_even_when_colored() {
        let on = Style { on: true };
        let rows = vec![
            vec!["#0".to_string(), on.good("completed"), "a".to_string()],
            vec!["#10".to_string(), "open".to_string(), "b".to_string()],
        ];
        let lines = columns(&rows);
        assert_eq!(lines[1], "#10  open       b");
        assert!(
            lines[0].starts_with("#0   \x1b[32mcompleted\x1b[0m  a"),
            "{:?}",
            lines[0]
        );
        assert_eq!(Style { on: false }.bad("x"), "x");
    }
}
