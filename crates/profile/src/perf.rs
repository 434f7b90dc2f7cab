//! `perf` samples, read from `perf script` text, mapped to the addresses of one binary.
//!
//! Rivet reads perf.data through `perf script` (the CLI runs it) rather than parsing the file
//! format itself: perf's own reader knows every kernel's record layouts and compression, and
//! its text output is stable. Two lines matter:
//!
//! ```text
//!   PID  PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @ 0xPGOFF ...]: r-xp /path/to/object
//!   PID  EVENT:  IP [0xFROM/0xTO/P/-/-/CYCLES ...]        (a sample; the branch stack with -j)
//! ```
//!
//! (`perf script --show-mmap-events --show-task-events -F pid,event,ip[,brstack]`; a few more
//! or fewer fields are tolerated.) A sample's addresses are run-time addresses of some
//! process; the mappings of that process say which belong to the binary, and where it was
//! loaded, so each becomes a virtual address of the binary (`offset in file` -> `vaddr`
//! through its PT_LOADs). That is what makes PIE executables and shared libraries work.
//!
//! A forked process has its parent's mappings without any mmap record of its own, so the
//! task records matter too: `PERF_RECORD_FORK(CHILD:TID):(PARENT:TID)` copies the parent's
//! mappings to the child, and `PERF_RECORD_COMM exec: NAME:PID/TID` drops the mappings of a
//! process that replaced its program. Servers that fork a worker per connection
//! (PostgreSQL) run almost all their code in such children.
//!
//! A branch stack lists the most recent branch first. Between two consecutive branches the
//! program ran straight through: from the older branch's target to the newer branch's source,
//! a *trace*, which the caller turns into fall-through edges of the CFG.

use std::collections::{BTreeMap, HashMap};

/// A loadable segment of the binary: file range and where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
}

/// One mapping of a file into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub pid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: String,
}

/// One branch of a branch stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchRecord {
    pub from: u64,
    pub to: u64,
    pub mispredicted: bool,
}

/// A line of `perf script` output that matters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Mmap(Mapping),
    /// A new process `child` made by `parent` (or a new thread, when they are equal).
    Fork {
        child: u32,
        parent: u32,
    },
    /// Process `pid` replaced its program.
    Exec {
        pid: u32,
    },
    Sample {
        pid: u32,
        event: String,
        ip: u64,
        branches: Vec<BranchRecord>,
    },
}

fn hex(s: &str) -> Option<u64> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// Parses one line of `perf script` output; `None` for lines that are neither a mapping nor a
/// sample (other records, headers, blank lines).
pub fn parse_line(line: &str) -> Option<Line> {
    if let Some(at) = line.find("PERF_RECORD_MMAP") {
        return parse_mmap(&line[at..]).map(Line::Mmap);
    }
    if let Some(at) = line.find("PERF_RECORD_FORK(") {
        return parse_fork(&line[at + "PERF_RECORD_FORK(".len()..]);
    }
    if let Some(at) = line.find("PERF_RECORD_COMM exec:") {
        // NAME:PID/TID; the name may itself hold ':' or '/'.
        let task = line[at + "PERF_RECORD_COMM exec:".len()..].trim_end();
        let pid = task.rsplit_once(':')?.1.split('/').next()?.parse().ok()?;
        return Some(Line::Exec { pid });
    }
    if line.contains("PERF_RECORD_") {
        return None;
    }
    // PID [EVENT:] IP [branch ...]
    let mut words = line.split_whitespace();
    let pid: u32 = words.next()?.split('/').next()?.parse().ok()?;
    let mut event = String::new();
    let mut ip = None;
    let mut branches = Vec::new();
    for w in words {
        if w.contains('/') && w.starts_with("0x") {
            let mut parts = w.split('/');
            let from = hex(parts.next()?)?;
            let to = hex(parts.next()?)?;
            let flag = parts.next().unwrap_or("-");
            branches.push(BranchRecord {
                from,
                to,
                mispredicted: flag == "M",
            });
        } else if ip.is_none() && w.ends_with(':') {
            event = w.trim_end_matches(':').to_string();
        } else if ip.is_none() {
            ip = Some(hex(w)?);
        }
    }
    Some(Line::Sample {
        pid,
        event,
        ip: ip?,
        branches,
    })
}

/// `CHILD:TID):(PARENT:TID)`, what follows `PERF_RECORD_FORK(`.
fn parse_fork(text: &str) -> Option<Line> {
    let (child, rest) = text.split_once(')')?;
    let parent = rest.strip_prefix(":(")?.split(')').next()?;
    let pid = |task: &str| task.split(':').next()?.trim().parse().ok();
    Some(Line::Fork {
        child: pid(child)?,
        parent: pid(parent)?,
    })
}

/// `PERF_RECORD_MMAP2 PID/TID: [0xSTART(0xLEN) @ 0xPGOFF ...]: PERMS PATH`
fn parse_mmap(text: &str) -> Option<Mapping> {
    let after = text.split_once(' ')?.1.trim_start();
    let pid: u32 = after.split(['/', ':']).next()?.trim().parse().ok()?;
    let open = after.find('[')?;
    let close = open + after[open..].find("]:")?;
    let inner = &after[open + 1..close];
    let (range, rest) = inner.split_once('@')?;
    let (start, len) = range.trim().split_once('(')?;
    let start = hex(start.trim())?;
    let len = hex(len.trim().trim_end_matches(')'))?;
    let pgoff = hex(rest.split_whitespace().next()?)?;
    let tail = after[close + 2..].trim_start();
    // PERMS PATH (MMAP2) or just PATH (MMAP, no permissions).
    let path = match tail.split_once(' ') {
        Some((perms, path)) if perms.len() == 4 && perms.chars().all(|c| "rwxps-".contains(c)) => {
            path
        }
        _ => tail,
    };
    Some(Mapping {
        pid,
        start,
        len,
        pgoff,
        path: path.trim().to_string(),
    })
}

/// Samples of one binary, in its virtual addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregated {
    /// Any sample carried a branch stack.
    pub has_branch_stacks: bool,
    /// Event names seen.
    pub events: Vec<String>,
    /// Sample IPs in the binary: address -> samples.
    pub samples: BTreeMap<u64, u64>,
    /// Branches with both ends in the binary: (from, to) -> (count, mispredicted).
    pub branches: BTreeMap<(u64, u64), (u64, u64)>,
    /// Branches from elsewhere into the binary (calls from a library, returns): target -> count.
    pub entries: BTreeMap<u64, u64>,
    /// Straight-line runs inside the binary: (start, end) -> count, `end` being the address of
    /// the branch that ended the run.
    pub traces: BTreeMap<(u64, u64), u64>,
    pub total_samples: u64,
    /// Samples in processes that never mapped the binary, or outside it.
    pub samples_elsewhere: u64,
}

/// Turns `perf script` lines into `Aggregated` for one binary.
#[derive(Debug)]
pub struct Aggregator {
    segments: Vec<Segment>,
    paths: Vec<String>,
    /// Per process: (start, end, base) where vaddr = addr - start + base... as file offsets.
    maps: HashMap<u32, Vec<(u64, u64, u64)>>,
    pub result: Aggregated,
    /// Mappings of the binary seen.
    pub mappings: u64,
}

impl Aggregator {
    /// `segments`: the binary's PT_LOADs; `paths`: the names it may have in mmap records.
    pub fn new(segments: Vec<Segment>, paths: Vec<String>) -> Aggregator {
        Aggregator {
            segments,
            paths,
            maps: HashMap::new(),
            result: Aggregated::default(),
            mappings: 0,
        }
    }

    fn file_offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.filesz)
            .map(|s| s.vaddr + (offset - s.offset))
    }

    /// The binary's virtual address of run-time address `addr` in process `pid`.
    pub fn translate(&self, pid: u32, addr: u64) -> Option<u64> {
        let maps = self.maps.get(&pid)?;
        // The most recent mapping covering the address wins.
        let &(start, _, pgoff) = maps
            .iter()
            .rev()
            .find(|(start, end, _)| addr >= *start && addr < *end)?;
        self.file_offset_to_vaddr(addr - start + pgoff)
    }

    pub fn feed(&mut self, line: &str) {
        match parse_line(line) {
            Some(Line::Mmap(m)) => {
                let ours = self.paths.contains(&m.path);
                let maps = self.maps.entry(m.pid).or_default();
                // A new mapping over an old one hides it; only the binary's are kept.
                maps.retain(|(s, e, _)| *e <= m.start || *s >= m.start.saturating_add(m.len));
                if ours {
                    maps.push((m.start, m.start.saturating_add(m.len), m.pgoff));
                    self.mappings += 1;
                }
            }
            Some(Line::Fork { child, parent }) => {
                if child != parent
                    && let Some(inherited) = self.maps.get(&parent).cloned()
                {
                    self.maps.insert(child, inherited);
                }
            }
            Some(Line::Exec { pid }) => {
                self.maps.remove(&pid);
            }
            Some(Line::Sample {
                pid,
                event,
                ip,
                branches,
            }) => self.sample(pid, event, ip, &branches),
            None => {}
        }
    }

    fn sample(&mut self, pid: u32, event: String, ip: u64, branches: &[BranchRecord]) {
        let r = &mut self.result;
        r.total_samples += 1;
        if !event.is_empty() && !r.events.contains(&event) {
            r.events.push(event);
        }
        if !branches.is_empty() {
            r.has_branch_stacks = true;
        }
        match self.translate(pid, ip) {
            Some(v) => *self.result.samples.entry(v).or_default() += 1,
            None => self.result.samples_elsewhere += 1,
        }
        let translated: Vec<(Option<u64>, Option<u64>, bool)> = branches
            .iter()
            .map(|b| {
                (
                    self.translate(pid, b.from),
                    self.translate(pid, b.to),
                    b.mispredicted,
                )
            })
            .collect();
        let r = &mut self.result;
        for (i, &(from, to, mispredicted)) in translated.iter().enumerate() {
            match (from, to) {
                (Some(from), Some(to)) => {
                    let c = r.branches.entry((from, to)).or_default();
                    c.0 += 1;
                    c.1 += u64::from(mispredicted);
                }
                (None, Some(to)) => *r.entries.entry(to).or_default() += 1,
                _ => {}
            }
            // The run from this (older) branch's target to the newer branch's source.
            if i > 0
                && let (Some(start), Some(end)) = (to, translated[i - 1].0)
                && start <= end
            {
                *r.traces.entry((start, end)).or_default() += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mmap_and_sample_lines() {
        let m = parse_line(
            "   22433  PERF_RECORD_MMAP2 22433/22433: [0x559d550b8000(0x2b000) @ 0x7000 fe:00 10127006 3858165709]: r-xp /root/lua",
        );
        assert_eq!(
            m,
            Some(Line::Mmap(Mapping {
                pid: 22433,
                start: 0x559d550b8000,
                len: 0x2b000,
                pgoff: 0x7000,
                path: "/root/lua".into()
            }))
        );
        let s = parse_line("   22433 cpu-clock:u:      559d550d84a1");
        assert_eq!(
            s,
            Some(Line::Sample {
                pid: 22433,
                event: "cpu-clock:u".into(),
                ip: 0x559d550d84a1,
                branches: vec![]
            })
        );
        let b = parse_line(
            "  77  cycles:u:  401136 0x40113e/0x401130/P/-/-/0  0x401150/0x401139/M/-/-/12 ",
        );
        let Some(Line::Sample { branches, .. }) = b else {
            panic!("{b:?}")
        };
        assert_eq!(
            branches,
            vec![
                BranchRecord {
                    from: 0x40113e,
                    to: 0x401130,
                    mispredicted: false
                },
                BranchRecord {
                    from: 0x401150,
                    to: 0x401139,
                    mispredicted: true
                },
            ]
        );
        assert_eq!(parse_line("garbage here"), None);
        // Found by fuzzing: a "]:" before the "[".
        assert_eq!(
            parse_line("  1 PERF_RECORD_MMAP2 1/1]: r-xp 42: [0x400000(0x2000) @ 0 fe:01 1 0]"),
            None
        );
        assert_eq!(parse_line(""), None);
        assert_eq!(
            parse_line("  12 PERF_RECORD_COMM exec: lua:12/12"),
            Some(Line::Exec { pid: 12 })
        );
        assert_eq!(
            parse_line(" 1246 PERF_RECORD_FORK(1256:1257):(1246:1246)"),
            Some(Line::Fork {
                child: 1256,
                parent: 1246
            })
        );
        assert_eq!(parse_line("  12 PERF_RECORD_COMM: perf-exec:12/12"), None);
        assert_eq!(parse_line("  12 PERF_RECORD_FORK(12:12"), None);
        assert_eq!(parse_line("  12 PERF_RECORD_EXIT(13:13):(12:12)"), None);
    }

    #[test]
    fn forked_processes_inherit_the_mappings_and_exec_drops_them() {
        let mut a = Aggregator::new(
            vec![Segment {
                vaddr: 0x1000,
                offset: 0x1000,
                filesz: 0x2000,
            }],
            vec!["/bin/server".into()],
        );
        a.feed("  5 PERF_RECORD_COMM exec: server:5/5");
        a.feed("  5 PERF_RECORD_MMAP2 5/5: [0x555500001000(0x2000) @ 0x1000 fe:00 1 2]: r-xp /bin/server");
        a.feed("  5 PERF_RECORD_FORK(6:6):(5:5)");
        a.feed("  6 cpu-clock:u: 555500001234"); // the worker, without an mmap record of its own
        a.feed("  5 PERF_RECORD_FORK(7:7):(5:5)");
        a.feed("  7 PERF_RECORD_COMM exec: sh:7/7"); // a child that runs another program
        a.feed("  7 cpu-clock:u: 555500001234");
        a.feed("  5 cpu-clock:u: 555500001238");
        assert_eq!(a.result.samples, BTreeMap::from([(0x1234, 1), (0x1238, 1)]));
        assert_eq!(a.result.samples_elsewhere, 1);
    }

    #[test]
    fn pie_addresses_map_through_the_mapping_and_segments() {
        // Text at file offset 0x1000, vaddr 0x1000; mapped at 0x5555_0000_1000 from pgoff 0x1000.
        let mut a = Aggregator::new(
            vec![Segment {
                vaddr: 0x1000,
                offset: 0x1000,
                filesz: 0x2000,
            }],
            vec!["/bin/prog".into()],
        );
        a.feed("  5 PERF_RECORD_MMAP2 5/5: [0x555500001000(0x2000) @ 0x1000 fe:00 1 2]: r-xp /bin/prog");
        a.feed("  5 PERF_RECORD_MMAP2 5/5: [0x7f0000001000(0x2000) @ 0x1000 fe:00 1 2]: r-xp /lib/other.so");
        a.feed("  5 cpu-clock:u: 555500001234");
        a.feed("  5 cpu-clock:u: 7f0000001234");
        a.feed("  6 cpu-clock:u: 555500001234"); // another process: not mapped there
        assert_eq!(a.result.samples, BTreeMap::from([(0x1234, 1)]));
        assert_eq!(a.result.samples_elsewhere, 2);
        assert_eq!(a.result.total_samples, 3);
        assert!(!a.result.has_branch_stacks);
    }

    #[test]
    fn branch_stacks_give_branches_and_traces() {
        let mut a = Aggregator::new(
            vec![Segment {
                vaddr: 0x400000,
                offset: 0,
                filesz: 0x10000,
            }],
            vec!["/bin/prog".into()],
        );
        a.feed("  9 PERF_RECORD_MMAP2 9/9: [0x400000(0x10000) @ 0 fe:00 1 2]: r-xp /bin/prog");
        // Newest first: ... -> 0x401130 ran to 0x40113e, jumped to 0x401130 again.
        a.feed("  9 cycles:u: 401136 0x40113e/0x401130/P/-/-/0 0x40113e/0x401130/M/-/-/0 0x7f00/0x401100/P/-/-/0");
        assert!(a.result.has_branch_stacks);
        assert_eq!(a.result.branches[&(0x40113e, 0x401130)], (2, 1));
        assert_eq!(a.result.entries[&0x401100], 1);
        assert_eq!(
            a.result.traces,
            BTreeMap::from([((0x401130, 0x40113e), 1), ((0x401100, 0x40113e), 1)])
        );
    }
}
