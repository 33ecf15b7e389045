//! The processor's own counters per launch (`GPU_BENCH_COUNTERS=1
//! ./gpu_bench --launch-overhead`): instructions, cycles, branch misses and
//! cache misses of each way of launching, user space only, through Linux's
//! `perf_event_open` — where a launch's host time goes, beside what the
//! timed rounds say it costs. A machine without hardware counters (a
//! virtual one, or `perf_event_paranoid` above 2) says so and counts
//! nothing.

use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware};
use perf_event::{Builder, Group};

use super::R;

/// Counter sets, each counted in its own rounds: a group is scheduled
/// whole, and a processor has few programmable counters.
fn sets() -> Vec<Vec<(&'static str, Counted)>> {
    let miss = |which| Cache {
        which,
        operation: CacheOp::READ,
        result: CacheResult::MISS,
    };
    vec![
        vec![
            ("instructions", Counted::Hardware(Hardware::INSTRUCTIONS)),
            ("cycles", Counted::Hardware(Hardware::CPU_CYCLES)),
            ("branch misses", Counted::Hardware(Hardware::BRANCH_MISSES)),
        ],
        vec![
            ("L1 instruction misses", Counted::Cache(miss(CacheId::L1I))),
            ("L1 data read misses", Counted::Cache(miss(CacheId::L1D))),
            ("last-level read misses", Counted::Cache(miss(CacheId::LL))),
        ],
        vec![
            (
                "instruction TLB misses",
                Counted::Cache(miss(CacheId::ITLB)),
            ),
            ("data TLB read misses", Counted::Cache(miss(CacheId::DTLB))),
        ],
    ]
}

/// An event to count.
enum Counted {
    Hardware(Hardware),
    Cache(Cache),
}

/// Each counter's count per launch over `rounds` rounds of `per_round`
/// launches (the waits between rounds not counted), after one round
/// uncounted; `None` where the machine counts none of them.
pub(super) fn per_launch(
    wait: &dyn Fn() -> R<()>,
    launch: &mut dyn FnMut(i32) -> R<()>,
    rounds: usize,
    per_round: usize,
) -> R<Option<Vec<(&'static str, f64)>>> {
    let mut out = Vec::new();
    for set in sets() {
        let Ok(mut group) = Group::new() else {
            return Ok(None);
        };
        let mut counters = Vec::new();
        for (name, event) in set {
            // Not every processor counts every event: those it cannot are left out.
            let builder = match event {
                Counted::Hardware(e) => Builder::new(e),
                Counted::Cache(e) => Builder::new(e),
            };
            if let Ok(c) = group.add(&builder) {
                counters.push((name, c));
            }
        }
        let mut n = 0i32;
        for round in 0..=rounds {
            if round > 0 {
                group.enable()?;
            }
            for _ in 0..per_round {
                launch(n)?;
                n = n.wrapping_add(1);
            }
            group.disable()?;
            wait()?;
        }
        let data = group.read()?;
        // Shared with other groups in turns: scaled to the whole time.
        let scale = match (data.time_enabled(), data.time_running()) {
            (Some(e), Some(r)) if !r.is_zero() => e.as_secs_f64() / r.as_secs_f64(),
            _ => 1.0,
        };
        let launches = (rounds * per_round) as f64;
        for (name, c) in &counters {
            out.push((*name, data[c] as f64 * scale / launches));
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// Where a way's launches spend their time (`GPU_BENCH_PROFILE=FILE
/// ./gpu_bench --launch-overhead`): the instruction addresses that a
/// sampling clock found (Linux's software CPU clock, user space, every
/// `period_ns` of the thread's CPU time), counted, each with the file
/// mapped there and its offset in that file — `addr2line -f -e BINARY
/// OFFSET` names the function of an offset in an unstripped build. Works
/// where the processor's counters do not (a virtual machine).
pub(super) fn profile(
    wait: &dyn Fn() -> R<()>,
    launch: &mut dyn FnMut(i32) -> R<()>,
    launches: usize,
    period_ns: u64,
) -> R<Vec<(String, u64, u64)>> {
    use perf_event::SampleFlag;
    use perf_event::events::Software;
    let mut sampler = Builder::new(Software::CPU_CLOCK)
        .sample_period(period_ns)
        .sample(SampleFlag::IP)
        .build()?
        .sampled(64 << 20)?;
    let mut counts: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut drain = |sampler: &mut perf_event::Sampler| {
        while let Some(record) = sampler.next_record() {
            if let Ok(perf_event::data::Record::Sample(s)) = record.parse_record()
                && let Some(ip) = s.ip()
            {
                *counts.entry(ip).or_default() += 1;
            }
        }
    };
    for i in 0..launches {
        if i % 2_000 == 0 {
            sampler.disable()?;
            wait()?;
            drain(&mut sampler);
            sampler.enable()?;
        }
        launch(i as i32)?;
    }
    sampler.disable()?;
    drain(&mut sampler);
    // Each address's file and offset, from the process's own map.
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let regions: Vec<(u64, u64, u64, String)> = maps
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, _perms, offset) = (f.next()?, f.next()?, f.next()?);
            let path = f.nth(2).unwrap_or("?").to_string();
            let (lo, hi) = range.split_once('-')?;
            Some((
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
                u64::from_str_radix(offset, 16).ok()?,
                path,
            ))
        })
        .collect();
    let mut out: Vec<(String, u64, u64)> = counts
        .into_iter()
        .map(|(ip, count)| {
            match regions
                .iter()
                .find(|(lo, hi, _, _)| (*lo..*hi).contains(&ip))
            {
                Some((lo, _, offset, path)) => (path.clone(), ip - lo + offset, count),
                None => ("?".into(), ip, count),
            }
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.2));
    Ok(out)
}
