//! The race rule: do two recorded accesses race?
//!
//! DESIGN.md: two accesses race when they come from different threads, their
//! byte ranges overlap, at least one is a write, both PCs are in covered
//! functions, and they are not both atomic. A plain access against an atomic
//! one is a race unless `report_atomic_races=0`. Pure and allocation-free.

use crate::event::AccessRecord;
use crate::index::Access;

/// One side of a pair, as the rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Side {
    pub tid: i32,
    /// First byte accessed.
    pub addr: u64,
    /// Bytes accessed.
    pub size: u8,
    pub is_write: bool,
    /// What the index says about the accessing PC (a LOCK-prefixed instruction counts as atomic).
    pub class: Access,
}

impl Side {
    /// The side of a recorded access; `covered` is whether its PC is in a covered function.
    pub fn of(record: &AccessRecord, covered: bool) -> Side {
        let class = match (covered, record.is_atomic) {
            (false, _) => Access::Uncovered,
            (true, true) => Access::Atomic,
            (true, false) => Access::Plain,
        };
        Side { tid: record.tid, addr: record.addr, size: record.size, is_write: record.is_write, class }
    }

    fn end(&self) -> u64 {
        self.addr.saturating_add(u64::from(self.size))
    }
}

/// The outcome of judging a pair, with the reason when it is not a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Race,
    SameThread,
    /// The byte ranges do not overlap (e.g. adjacent fields of one word).
    Disjoint,
    /// Both are reads.
    NoWrite,
    /// At least one PC is outside covered code: never judged.
    Uncovered,
    BothAtomic,
    /// Atomic against plain with `report_atomic_races=0`.
    AtomicIgnored,
}

impl Verdict {
    pub fn is_race(self) -> bool {
        self == Verdict::Race
    }
}

/// Applies the rule to accesses `a` and `b`.
pub fn judge(a: &Side, b: &Side, report_atomic_races: bool) -> Verdict {
    if a.class == Access::Uncovered || b.class == Access::Uncovered {
        return Verdict::Uncovered;
    }
    if a.tid == b.tid {
        return Verdict::SameThread;
    }
    if a.size == 0 || b.size == 0 || a.addr >= b.end() || b.addr >= a.end() {
        return Verdict::Disjoint;
    }
    if !a.is_write && !b.is_write {
        return Verdict::NoWrite;
    }
    match (a.class == Access::Atomic, b.class == Access::Atomic) {
        (true, true) => Verdict::BothAtomic,
        (false, false) => Verdict::Race,
        _ if report_atomic_races => Verdict::Race,
        _ => Verdict::AtomicIgnored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::{Atomic, Plain, Uncovered};

    fn side(tid: i32, addr: u64, size: u8, is_write: bool, class: Access) -> Side {
        Side { tid, addr, size, is_write, class }
    }

    #[test]
    fn the_rule_case_by_case() {
        const W: bool = true;
        const R: bool = false;
        #[rustfmt::skip]
        let cases: &[(&str, Side, Side, bool, Verdict)] = &[
            ("write/write same word", side(1, 0x1000, 8, W, Plain), side(2, 0x1000, 8, W, Plain), true, Verdict::Race),
            ("read/write same word", side(1, 0x1000, 8, R, Plain), side(2, 0x1000, 8, W, Plain), true, Verdict::Race),
            ("write/read same word", side(1, 0x1000, 4, W, Plain), side(2, 0x1000, 4, R, Plain), true, Verdict::Race),
            ("read/read", side(1, 0x1000, 8, R, Plain), side(2, 0x1000, 8, R, Plain), true, Verdict::NoWrite),
            ("same thread", side(1, 0x1000, 8, W, Plain), side(1, 0x1000, 8, W, Plain), true, Verdict::SameThread),
            ("adjacent u32 fields of one word", side(1, 0x1000, 4, W, Plain), side(2, 0x1004, 4, W, Plain), true, Verdict::Disjoint),
            ("adjacent bytes", side(1, 0x1003, 1, W, Plain), side(2, 0x1004, 1, W, Plain), true, Verdict::Disjoint),
            ("byte inside a word", side(1, 0x1000, 8, R, Plain), side(2, 0x1007, 1, W, Plain), true, Verdict::Race),
            ("partial overlap", side(1, 0x1002, 4, W, Plain), side(2, 0x1004, 4, R, Plain), true, Verdict::Race),
            ("wide vector store over a word", side(1, 0x1000, 32, W, Plain), side(2, 0x1018, 8, R, Plain), true, Verdict::Race),
            ("zero-size access", side(1, 0x1000, 0, W, Plain), side(2, 0x1000, 8, W, Plain), true, Verdict::Disjoint),
            ("both atomic", side(1, 0x1000, 8, W, Atomic), side(2, 0x1000, 8, W, Atomic), true, Verdict::BothAtomic),
            ("atomic vs plain write", side(1, 0x1000, 8, W, Atomic), side(2, 0x1000, 8, W, Plain), true, Verdict::Race),
            ("plain read vs atomic rmw", side(1, 0x1000, 8, R, Plain), side(2, 0x1000, 8, W, Atomic), true, Verdict::Race),
            ("atomic vs plain, option off", side(1, 0x1000, 8, W, Atomic), side(2, 0x1000, 8, W, Plain), false, Verdict::AtomicIgnored),
            ("plain vs plain, option off", side(1, 0x1000, 8, W, Plain), side(2, 0x1000, 8, W, Plain), false, Verdict::Race),
            ("uncovered first", side(1, 0x1000, 8, W, Uncovered), side(2, 0x1000, 8, W, Plain), true, Verdict::Uncovered),
            ("uncovered second", side(1, 0x1000, 8, W, Plain), side(2, 0x1000, 8, W, Uncovered), true, Verdict::Uncovered),
            ("range ending at u64::MAX", side(1, u64::MAX - 3, 4, W, Plain), side(2, u64::MAX - 1, 1, W, Plain), true, Verdict::Race),
        ];
        for (name, a, b, report_atomic, expected) in cases {
            assert_eq!(judge(a, b, *report_atomic), *expected, "{name}");
            assert_eq!(judge(b, a, *report_atomic), *expected, "{name} (swapped)");
        }
    }

    #[test]
    fn sides_of_records() {
        let record =
            AccessRecord { tid: 3, addr: 0x10, size: 4, is_write: true, is_atomic: true, ..Default::default() };
        assert_eq!(Side::of(&record, true).class, Atomic);
        assert_eq!(Side::of(&record, false).class, Uncovered);
        let plain = AccessRecord { is_atomic: false, ..record };
        assert_eq!(Side::of(&plain, true), side(3, 0x10, 4, true, Plain));
        assert!(judge(&Side::of(&record, true), &Side::of(&AccessRecord { tid: 4, ..plain }, true), true).is_race());
    }
}
