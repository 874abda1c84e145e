//! [`Report`]: what one or more checks found, its verdict ([`Report::ok`]) and its text.

use std::fmt;

/// The outcome of one or more checks. [`Report::ok`] is the verdict.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Messages of the workload(s).
    pub messages: usize,
    /// Events the reference says must be published.
    pub events_expected: usize,
    /// Events read from the events stream for the workload(s) and checked.
    pub events_checked: usize,
    /// Reference events never published.
    pub lost: usize,
    /// Extra copies of an `event_id`.
    pub duplicated: usize,
    /// Published events the reference does not have.
    pub ghosts: usize,
    /// Events with the reference's id but other content.
    pub mismatched: usize,
    /// Per-message order broken.
    pub order_violations: usize,
    /// Calls the reference completes that ended `abandoned`/`invalid` instead.
    pub should_have_completed: usize,
    /// `tool_call.abandoned` events published (expected or not).
    pub abandoned: usize,
    /// `tool_call.invalid` events published (expected or not).
    pub invalid: usize,
    /// Query answers that differ from the reference snapshot (or never came).
    pub snapshot_mismatches: usize,
    /// Dead letters published for the workload(s).
    pub dead_letters: usize,
    /// Dead letters the reference has.
    pub dead_letters_expected: usize,
    /// Events of an already checked workload that arrived after its check.
    pub late: usize,
    /// Events and query answers published in their small form with `payload_ref` (too large
    /// for the server's max_payload), compared after fetching the whole payload.
    pub by_reference: usize,
    /// Whether every wait found every expected event (false: timed out or gave up).
    pub complete: bool,
    /// The first problems, described.
    pub details: Vec<String>,
}

/// Most problem descriptions kept in a report.
const MAX_DETAILS: usize = 40;

impl Report {
    /// Whether every target was met.
    pub fn ok(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.ghosts == 0
            && self.mismatched == 0
            && self.order_violations == 0
            && self.should_have_completed == 0
            && self.snapshot_mismatches == 0
            && self.dead_letters == self.dead_letters_expected
            && self.late == 0
            && self.events_checked > 0
    }

    pub(super) fn note(&mut self, what: String) {
        if self.details.len() < MAX_DETAILS {
            self.details.push(what);
        }
    }

    /// Adds another report's counts (and details, up to the cap).
    pub fn add(&mut self, other: &Report) {
        self.messages += other.messages;
        self.events_expected += other.events_expected;
        self.events_checked += other.events_checked;
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.ghosts += other.ghosts;
        self.mismatched += other.mismatched;
        self.order_violations += other.order_violations;
        self.should_have_completed += other.should_have_completed;
        self.abandoned += other.abandoned;
        self.invalid += other.invalid;
        self.snapshot_mismatches += other.snapshot_mismatches;
        self.dead_letters += other.dead_letters;
        self.dead_letters_expected += other.dead_letters_expected;
        self.late += other.late;
        self.by_reference += other.by_reference;
        self.complete = if self.messages == other.messages {
            other.complete
        } else {
            self.complete && other.complete
        };
        for d in &other.details {
            self.note(d.clone());
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: messages {}, events expected {}, events checked {}, lost {}, duplicated {}, \
             ghosts {}, mismatched {}, order violations {}, abandoned/invalid that should have \
             completed {}, abandoned {}, invalid {}, snapshot mismatches {}, dead letters {} \
             (expected {}), late {}, by reference {}{}",
            if self.ok() { "PASS" } else { "FAIL" },
            self.messages,
            self.events_expected,
            self.events_checked,
            self.lost,
            self.duplicated,
            self.ghosts,
            self.mismatched,
            self.order_violations,
            self.should_have_completed,
            self.abandoned,
            self.invalid,
            self.snapshot_mismatches,
            self.dead_letters,
            self.dead_letters_expected,
            self.late,
            self.by_reference,
            if self.complete {
                ""
            } else {
                " (gave up waiting for missing events)"
            }
        )?;
        for d in &self.details {
            writeln!(f, "  - {d}")?;
        }
        Ok(())
    }
}
