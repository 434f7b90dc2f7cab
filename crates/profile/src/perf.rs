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
//!
//! Four sources of samples are told apart by what their lines look like ([`classify`]):
//!
//! ```text
//!   PID/TID cycles:u: IP 0xFROM/0xTO/P/-/-/CYC/TYPE/SPEC ...   branch stacks: LBR, Arm BRBE,
//!                                                            a trace's --itrace=...l stacks
//!   PID/TID branches:u: FLAGS IP => ADDR                     every branch of a decoded trace
//!                                                            (CoreSight ETM, Intel PT: --itrace=b)
//!   PID/TID branch: FLAGS ADDR IP [stack]                    Arm SPE: a sampled branch and its
//!                                                            target (other SPE events: plain)
//!   PID cpu-clock:u: IP                                      plain samples
//! ```
//!
//! A trace's branches come in the order each thread ran them, so the run from one branch's
//! target to the thread's next branch is a trace as well, known rather than sampled: a
//! profile from them counts every branch of the traced stretches. SPE samples single
//! operations; a branch's target comes in the address field, whether it was taken in the
//! `flags` field or its one-entry branch stack. One text holds one source; a text that mixes
//! two is refused unless the caller names the one to read (`Aggregator::with_source`).

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
    /// The branch was not taken (the `N` of `PN`/`MN`, which perf prints for SPE's branch
    /// stacks since Leo Yan's 2025 series "perf script: Refactor branch flags for Arm SPE": Linux
    /// `tools/perf/builtin-script.c`, `bstack_event_str`). Such a
    /// record is a conditional branch that fell through, not a jump to `to`.
    pub not_taken: bool,
}

/// Where a sample came from, as far as the text tells (see [`classify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PerfSource {
    /// Branch stacks (`brstack`): x86 LBR, Arm BRBE (`perf record -j any,u`), and the last-branch
    /// stacks perf synthesizes from a trace (`--itrace=...l`). Sampled.
    BranchStacks,
    /// Branch samples decoded from a hardware trace (CoreSight ETM, Intel PT: `--itrace=...b`),
    /// printed `FROM => TO`: every taken branch of the traced stretches, in order.
    Trace,
    /// Arm SPE samples (`arm_spe` events): sampled operations, branches with their targets.
    Spe,
    /// Plain IP samples (timer or counter overflow), no branch information.
    Samples,
}

impl PerfSource {
    /// The name users give it (`--perf-source`) and messages use.
    pub fn name(self) -> &'static str {
        match self {
            PerfSource::BranchStacks => "branch-stacks",
            PerfSource::Trace => "trace",
            PerfSource::Spe => "spe",
            PerfSource::Samples => "samples",
        }
    }
}

/// The events perf synthesizes from Arm SPE records (Linux `tools/perf/util/arm-spe.c`,
/// `arm_spe_synth_events`): `branch` (every sampled branch; `branch-miss` before the 2025 series,
/// mispredicted ones only), the memory events, and `instructions`, which is left out here
/// because ETM and the PMU synthesize events of that name too.
const SPE_EVENTS: &[&str] = &[
    "branch",
    "branch-miss",
    "l1d-miss",
    "l1d-access",
    "llc-miss",
    "llc-access",
    "tlb-miss",
    "tlb-access",
    "remote-access",
    "memory",
];

/// SPE's branch events (see [`SPE_EVENTS`]).
const SPE_BRANCH_EVENTS: &[&str] = &["branch", "branch-miss"];

/// perf's `flags` field (`-F +flags`) comes between the event and the numbers: names of
/// branch kinds in lower-case words (`jcc`, `tr strt`, `hw int`...: Linux
/// `tools/perf/util/trace-event-scripting.c`, `sample_flags`), the last one optionally
/// followed by `/miss/`, `/not_taken/` or `/miss,not_taken/` (branch events), then `(x)`,
/// `(D)`, `(t)` for transaction and interrupt states. Any lower-case word there that is no
/// hex number is taken for one: only `tr strt` and `tr end` (and the events) change how a
/// sample is read, so the kinds need not be listed.
/// What a sample line's `flags` field says about its branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleFlags {
    /// The line has a `flags` field.
    pub present: bool,
    /// `tr strt`: the trace (re)starts at the target; the source is not a branch.
    pub trace_begin: bool,
    /// `tr end`: the trace stops after the source; there is no target.
    pub trace_end: bool,
    /// `/miss/`: mispredicted.
    pub miss: bool,
    /// `/not_taken/`: a conditional branch that fell through (SPE).
    pub not_taken: bool,
}

/// A sample line of `perf script` output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub pid: u32,
    /// The thread (`PID/TID`, from `-F pid,tid`), when printed.
    pub tid: Option<u32>,
    /// The event's name with its modifiers (`cycles:u`).
    pub event: String,
    pub ip: u64,
    /// The sample's address field: a branch's target (`IP => ADDR` for trace branches; for
    /// SPE, which prints `ADDR IP`, the target of a branch), when printed.
    pub addr: Option<u64>,
    /// The branch stack, most recent branch first.
    pub branches: Vec<BranchRecord>,
    pub flags: SampleFlags,
}

impl Sample {
    /// The event's name without modifiers (`branches` of `branches:u`).
    pub fn event_name(&self) -> &str {
        self.event.split(':').next().unwrap_or("")
    }
}

/// The source a sample is evidence of: SPE by its event's name, a trace branch by its `=>`
/// form, a branch stack by its stack; anything else is a plain sample. Reliable as far as
/// perf's event names are: `instructions` samples come from the PMU, ETM and SPE alike,
/// which is why they count as plain samples (they are: sampled IPs, whatever made them).
pub fn classify(sample: &Sample, arrow: bool) -> PerfSource {
    if SPE_EVENTS.contains(&sample.event_name()) {
        PerfSource::Spe
    } else if arrow {
        PerfSource::Trace
    } else if !sample.branches.is_empty() {
        PerfSource::BranchStacks
    } else {
        PerfSource::Samples
    }
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
        sample: Sample,
        /// The line had the `FROM => TO` form perf prints for trace branches.
        arrow: bool,
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
    parse_sample(line)
}

/// `PID[/TID] [EVENT:] [FLAGS] NUMBER [NUMBER] [=> NUMBER] [branch ...]`, in the order perf
/// prints the fields whatever the order of `-F` (Linux `tools/perf/builtin-script.c`,
/// `process_event`: the address before the IP, except for branch samples of a trace, printed
/// `IP => ADDR` by `perf_sample__fprintf_bts`); symbols and other fields after the numbers
/// are skipped.
fn parse_sample(line: &str) -> Option<Line> {
    let mut words = line.split_whitespace();
    let mut task = words.next()?.split('/');
    let pid: u32 = task.next()?.parse().ok()?;
    let tid = match task.next() {
        Some(tid) => Some(tid.parse().ok()?),
        None => None,
    };
    let mut event = String::new();
    let mut flags = SampleFlags::default();
    // The leading run of bare hex numbers (before `=>`), and the one after `=>`.
    let mut numbers: Vec<u64> = Vec::new();
    let mut numbers_done = false;
    let mut arrow = false;
    let mut after_arrow = None;
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
                mispredicted: flag.starts_with('M'),
                not_taken: flag.len() == 2 && flag.ends_with('N'),
            });
        } else if w == "=>" && !numbers.is_empty() && !arrow {
            arrow = true;
        } else if arrow {
            if after_arrow.is_none() {
                after_arrow = Some(hex(w)?);
            }
        } else if numbers.is_empty() && w.ends_with(':') {
            event = w.trim_end_matches(':').to_string();
        } else if numbers.is_empty() && flag_word(w, &mut flags) {
        } else if numbers.is_empty() {
            numbers.push(hex(w)?);
        } else if !numbers_done {
            match hex(w) {
                Some(n) if numbers.len() < 2 => numbers.push(n),
                _ => numbers_done = true,
            }
        }
    }
    let mut sample = Sample {
        pid,
        tid,
        event,
        ip: *numbers.first()?,
        addr: None,
        branches,
        flags,
    };
    if arrow {
        sample.addr = Some(after_arrow?);
    } else if let [addr, ip] = numbers[..]
        && (SPE_EVENTS.contains(&sample.event_name()) || sample.event_name() == "instructions")
    {
        // Only SPE's samples (its `instructions` too; ETM's and PT's carry no address) are
        // read with an address before the IP: elsewhere a second number is a symbol that
        // looks like one (`add`, `beef`).
        sample.ip = ip;
        sample.addr = Some(addr);
    }
    Some(Line::Sample { sample, arrow })
}

/// Reads `w` into `flags` if it is a word of perf's `flags` field.
fn flag_word(w: &str, flags: &mut SampleFlags) -> bool {
    if w.starts_with('(') && w.ends_with(')') {
        flags.present = true;
        return true;
    }
    let (name, events) = w.split_once('/').unwrap_or((w, ""));
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase()) || hex(name).is_some() {
        return false;
    }
    flags.present = true;
    match name {
        "strt" => flags.trace_begin = true,
        "end" => flags.trace_end = true,
        _ => {}
    }
    for event in events.split([',', '/']) {
        match event {
            "miss" => flags.miss = true,
            "not_taken" => flags.not_taken = true,
            _ => {}
        }
    }
    true
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
    /// Any sample carried a branch stack (and was read as one).
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
    /// Conditional branches seen not taken (SPE): address of the branch -> count.
    pub not_taken: BTreeMap<u64, u64>,
    pub total_samples: u64,
    /// Samples in processes that never mapped the binary, or outside it.
    pub samples_elsewhere: u64,
    /// Samples by the source they are evidence of ([`classify`]).
    pub sources: BTreeMap<PerfSource, u64>,
    /// The source the user named (`--perf-source`), if any.
    pub forced_source: Option<PerfSource>,
    /// Samples whose branch information was not read because they are of another source
    /// than the one named.
    pub samples_of_other_sources: u64,
    /// SPE branch samples read as branches (with their targets).
    pub spe_branches: u64,
    /// SPE branch samples without a target (no `addr` field): counted as plain samples.
    pub spe_branches_without_target: u64,
    /// SPE branch samples with neither `flags` nor a branch stack, which would say whether
    /// the branch was taken: read as taken.
    pub spe_branches_without_outcome: u64,
}

/// Two branch sources in one text, which Rivet does not mix into one profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixedSources(pub Vec<PerfSource>);

impl Aggregated {
    /// The source the profile is made from: the one the user named, else the one source of
    /// branch information the samples hold (plain samples when none does).
    pub fn source(&self) -> Result<PerfSource, MixedSources> {
        if let Some(forced) = self.forced_source {
            return Ok(forced);
        }
        let branchy: Vec<PerfSource> = self
            .sources
            .keys()
            .copied()
            .filter(|s| *s != PerfSource::Samples)
            .collect();
        match branchy[..] {
            [] => Ok(PerfSource::Samples),
            [one] => Ok(one),
            _ => Err(MixedSources(branchy)),
        }
    }
}

/// Turns `perf script` lines into `Aggregated` for one binary.
#[derive(Debug)]
pub struct Aggregator {
    segments: Vec<Segment>,
    paths: Vec<String>,
    /// Per process: (start, end, base) where vaddr = addr - start + base... as file offsets.
    maps: HashMap<u32, Vec<(u64, u64, u64)>>,
    /// Per thread of a trace: the run-time target of its last branch, where the straight run
    /// that the thread's next branch ends began.
    trace_runs: HashMap<(u32, u32), u64>,
    pub result: Aggregated,
    /// Mappings of the binary seen.
    pub mappings: u64,
    /// Lines that were a mapping, task or sample record (what tells perf script text from
    /// anything else).
    pub records: u64,
}

impl Aggregator {
    /// `segments`: the binary's PT_LOADs; `paths`: the names it may have in mmap records.
    pub fn new(segments: Vec<Segment>, paths: Vec<String>) -> Aggregator {
        Aggregator {
            segments,
            paths,
            maps: HashMap::new(),
            trace_runs: HashMap::new(),
            result: Aggregated::default(),
            mappings: 0,
            records: 0,
        }
    }

    /// Reads only the branch information of `source` (see [`Aggregated::source`]).
    pub fn with_source(mut self, source: PerfSource) -> Aggregator {
        self.result.forced_source = Some(source);
        self
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
        let parsed = parse_line(line);
        if parsed.is_some() {
            self.records += 1;
        }
        match parsed {
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
                self.trace_runs.retain(|(p, _), _| *p != pid);
            }
            Some(Line::Sample { sample, arrow }) => self.sample(sample, arrow),
            None => {}
        }
    }

    fn sample(&mut self, sample: Sample, arrow: bool) {
        let class = classify(&sample, arrow);
        let r = &mut self.result;
        r.total_samples += 1;
        *r.sources.entry(class).or_default() += 1;
        if !sample.event.is_empty() && !r.events.contains(&sample.event) {
            r.events.push(sample.event.clone());
        }
        match self.translate(sample.pid, sample.ip) {
            Some(v) => *self.result.samples.entry(v).or_default() += 1,
            None => self.result.samples_elsewhere += 1,
        }
        let read_as = match self.result.forced_source {
            // Plain samples named: every sample is one, branch stacks or not.
            Some(PerfSource::Samples) => return,
            Some(forced) if forced != class && class != PerfSource::Samples => {
                self.result.samples_of_other_sources += 1;
                return;
            }
            _ => class,
        };
        match read_as {
            PerfSource::BranchStacks => self.branch_stack(sample.pid, &sample.branches),
            PerfSource::Trace => self.trace_branch(&sample),
            PerfSource::Spe => self.spe_sample(&sample),
            PerfSource::Samples => {}
        }
    }

    /// A sampled branch stack (LBR, BRBE, a trace's synthesized last branches).
    fn branch_stack(&mut self, pid: u32, branches: &[BranchRecord]) {
        if !branches.is_empty() {
            self.result.has_branch_stacks = true;
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

    /// One branch of a decoded trace: `ip` the branch, `addr` its target. A thread's
    /// branches come in the order it ran them, so the run between the previous target and
    /// this branch is a straight run too: the trace says it, rather than a sample implying
    /// it (CoreSight's `tr strt` has source 0, `tr end` target 0: Linux
    /// `tools/perf/util/cs-etm.c`, `cs_etm__synth_branch_sample`).
    fn trace_branch(&mut self, sample: &Sample) {
        let pid = sample.pid;
        let thread = (pid, sample.tid.unwrap_or(pid));
        let (from, to) = (sample.ip, sample.addr.unwrap_or(0));
        let begin = sample.flags.trace_begin || from == 0;
        let end = sample.flags.trace_end || to == 0;
        if !begin
            && let Some(start) = self.trace_runs.get(&thread).copied()
            && let (Some(start), Some(end)) =
                (self.translate(pid, start), self.translate(pid, from))
            && start <= end
        {
            *self.result.traces.entry((start, end)).or_default() += 1;
        }
        if !begin && !end {
            match (self.translate(pid, from), self.translate(pid, to)) {
                (Some(from), Some(to)) => {
                    let c = self.result.branches.entry((from, to)).or_default();
                    c.0 += 1;
                    c.1 += u64::from(sample.flags.miss);
                }
                (None, Some(to)) => *self.result.entries.entry(to).or_default() += 1,
                _ => {}
            }
        }
        if end {
            self.trace_runs.remove(&thread);
        } else {
            self.trace_runs.insert(thread, to);
        }
    }

    /// An SPE sample: a branch (event `branch`, or `branch-miss` in older perf) with its
    /// target in `addr`, and in recent perf (`--itrace=...l`) a branch stack of the branch
    /// itself and the previous branch's target (source 0; `arm_spe__prep_branch_stack`), which
    /// bounds a straight run ending at this branch. Other SPE samples are plain samples.
    fn spe_sample(&mut self, sample: &Sample) {
        if !SPE_BRANCH_EVENTS.contains(&sample.event_name()) {
            return;
        }
        let pid = sample.pid;
        let this = sample
            .branches
            .iter()
            .find(|b| b.from == sample.ip && b.from != 0);
        let previous_target = sample.branches.iter().find(|b| b.from == 0).map(|b| b.to);
        let target = sample.addr.or(this.map(|b| b.to));
        let Some(target) = target else {
            self.result.spe_branches_without_target += 1;
            return;
        };
        self.result.spe_branches += 1;
        if !sample.flags.present && this.is_none() {
            self.result.spe_branches_without_outcome += 1;
        }
        let not_taken = sample.flags.not_taken || this.is_some_and(|b| b.not_taken);
        let mispredicted = sample.event_name() == "branch-miss"
            || sample.flags.miss
            || this.is_some_and(|b| b.mispredicted);
        let Some(from) = self.translate(pid, sample.ip) else {
            return;
        };
        if let Some(start) = previous_target.and_then(|t| self.translate(pid, t))
            && start <= from
        {
            *self.result.traces.entry((start, from)).or_default() += 1;
        }
        if not_taken {
            *self.result.not_taken.entry(from).or_default() += 1;
        } else if let Some(to) = self.translate(pid, target) {
            let c = self.result.branches.entry((from, to)).or_default();
            c.0 += 1;
            c.1 += u64::from(mispredicted);
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
                sample: Sample {
                    pid: 22433,
                    tid: None,
                    event: "cpu-clock:u".into(),
                    ip: 0x559d550d84a1,
                    addr: None,
                    branches: vec![],
                    flags: SampleFlags::default(),
                },
                arrow: false,
            })
        );
        let b = parse_line(
            "  77  cycles:u:  401136 0x40113e/0x401130/P/-/-/0  0x401150/0x401139/M/-/-/12 ",
        );
        let Some(Line::Sample { sample, .. }) = b else {
            panic!("{b:?}")
        };
        assert_eq!(
            sample.branches,
            vec![
                BranchRecord {
                    from: 0x40113e,
                    to: 0x401130,
                    mispredicted: false,
                    not_taken: false,
                },
                BranchRecord {
                    from: 0x401150,
                    to: 0x401139,
                    mispredicted: true,
                    not_taken: false,
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

    fn aggregator() -> Aggregator {
        let mut a = Aggregator::new(
            vec![Segment {
                vaddr: 0x400000,
                offset: 0,
                filesz: 0x10000,
            }],
            vec!["/bin/prog".into()],
        );
        a.feed("  9 PERF_RECORD_MMAP2 9/9: [0x400000(0x10000) @ 0 fe:00 1 2]: r-xp /bin/prog");
        a
    }

    #[test]
    fn brbe_branch_stacks_with_types_read_as_lbr_ones() {
        // Linux tools/perf/builtin-script.c, print_bstack_flags: FROM/TO/EVENTS/IN_TX/ABORT/
        // CYCLES/TYPE/SPEC since 6.1 (types `CALL`, `COND`... from util/branch.c); what BRBE
        // (`perf record -j any,u` on Armv9.2) prints.
        let mut a = aggregator();
        a.feed("  9/9 cycles:u: 401136 0x40113e/0x401130/P/-/-/4/COND/- 0x401120/0x401100/M/-/-/17/CALL/- 0x7f00/0x401100/-/-/-/0/RET/-");
        assert_eq!(a.result.source(), Ok(PerfSource::BranchStacks));
        assert_eq!(a.result.branches[&(0x40113e, 0x401130)], (1, 0));
        assert_eq!(a.result.branches[&(0x401120, 0x401100)], (1, 1));
        assert_eq!(a.result.traces[&(0x401100, 0x40113e)], 1);
        assert_eq!(a.result.entries[&0x401100], 1);
    }

    #[test]
    fn trace_branches_give_every_branch_and_the_runs_between_them() {
        // `perf script -F pid,tid,event,flags,ip,addr --itrace=b` of a CoreSight ETM trace:
        // `IP => ADDR` (builtin-script.c, perf_sample__fprintf_bts), flags names from
        // util/trace-event-scripting.c; `tr strt` from 0 and `tr end` to 0 (util/cs-etm.c).
        let mut a = aggregator();
        for line in [
            "  9/9   branches:u:   tr strt                          0 =>           401100",
            "  9/9   branches:u:   jcc                         401110 =>           401130",
            "  9/10  branches:u:   tr strt                          0 =>           401200",
            "  9/9   branches:u:   call                        401134 =>           7f0010",
            "  9/10  branches:u:   jmp                         401208 =>           401200",
            "  9/9   branches:u:   return                      7f0020 =>           401138",
            "  9/9   branches:u:   jcc/miss/                   401140 =>           401130",
            "  9/9   branches:u:   tr end                      401136 =>                0",
            "  9/9   branches:u:   tr strt                          0 =>           401138",
            "  9/9   branches:u:   jmp                         401140 =>           401130",
        ] {
            a.feed(line);
        }
        let r = &a.result;
        assert_eq!(r.source(), Ok(PerfSource::Trace));
        assert_eq!(
            r.branches,
            BTreeMap::from([
                ((0x401110, 0x401130), (1, 0)),
                ((0x401140, 0x401130), (2, 1)),
                ((0x401208, 0x401200), (1, 0)),
            ])
        );
        assert_eq!(r.entries, BTreeMap::from([(0x401138, 1)]));
        // Thread 10's runs do not mix with thread 9's; the run into the library is no run
        // of the binary, the run after `tr end` starts over at `tr strt`.
        assert_eq!(
            r.traces,
            BTreeMap::from([
                ((0x401100, 0x401110), 1),
                ((0x401130, 0x401134), 1),
                ((0x401138, 0x401140), 2),
                ((0x401130, 0x401136), 1),
                ((0x401200, 0x401208), 1),
            ])
        );
    }

    #[test]
    fn spe_branches_carry_their_target_and_outcome() {
        // Linux tools/perf/util/arm-spe.c: `branch` samples (ip = the branch, addr = its
        // target, printed before the ip by builtin-script.c's process_event), flags `/miss/`
        // and `/not_taken/`, and with `--itrace=bl` a branch stack of the branch itself and
        // the previous branch's target (source 0).
        let mut a = aggregator();
        for line in [
            "  9/9  branch:   jcc                    401130           401140",
            "  9/9  branch:   jcc/miss,not_taken/    401130           401140",
            "  9/9  branch:   jcc/not_taken/         401130           401140 0x401140/0x401130/PN/-/-/3/COND/- 0x0/0x401120/-/-/-/0/-/-",
            "  9/9  branch-miss:                     401150           401160",
            "  9/9  l1d-access:                      7ffd0010         401144",
            "  9/9  branch:                                           401170",
        ] {
            a.feed(line);
        }
        let r = &a.result;
        assert_eq!(r.source(), Ok(PerfSource::Spe));
        assert_eq!(
            r.branches,
            BTreeMap::from([
                ((0x401140, 0x401130), (1, 0)),
                ((0x401160, 0x401150), (1, 1))
            ])
        );
        assert_eq!(r.not_taken, BTreeMap::from([(0x401140, 2)]));
        assert_eq!(r.traces, BTreeMap::from([((0x401120, 0x401140), 1)]));
        assert_eq!(r.spe_branches, 4);
        assert_eq!(r.spe_branches_without_target, 1);
        assert_eq!(r.spe_branches_without_outcome, 1);
        // Every sample is a PC sample too (the memory access's IP, not its data address).
        assert_eq!(r.samples[&0x401144], 1);
        assert_eq!(r.total_samples, 6);
    }

    #[test]
    fn mixed_sources_are_refused_unless_one_is_named() {
        let lines = [
            "  9/9 cycles:u: 401136 0x40113e/0x401130/P/-/-/4/COND/-",
            "  9/9   branches:u:   jcc   401110 =>   401130",
            "  9/9 cpu-clock:u: 401136",
        ];
        let mut a = aggregator();
        lines.iter().for_each(|l| a.feed(l));
        assert_eq!(
            a.result.source(),
            Err(MixedSources(vec![
                PerfSource::BranchStacks,
                PerfSource::Trace
            ]))
        );
        let mut a = aggregator().with_source(PerfSource::Trace);
        a.feed("  9 PERF_RECORD_MMAP2 9/9: [0x400000(0x10000) @ 0 fe:00 1 2]: r-xp /bin/prog");
        lines.iter().for_each(|l| a.feed(l));
        assert_eq!(a.result.source(), Ok(PerfSource::Trace));
        assert_eq!(a.result.branches.len(), 1);
        assert_eq!(a.result.samples_of_other_sources, 1);
        assert!(!a.result.has_branch_stacks);
        // Symbols after the IP that look like numbers stay symbols outside SPE.
        let Some(Line::Sample { sample, .. }) = parse_line("  9 cycles:u: 401136 add (/bin/prog)")
        else {
            panic!()
        };
        assert_eq!((sample.ip, sample.addr), (0x401136, None));
    }
}
