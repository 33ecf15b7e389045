//! Times the post-link's stages on a generated module (development aid).
use std::time::Instant;
fn main() {
    let src = include_str!("../kernels/ptx/scalars.ptx");
    let entry = src.find(".visible .entry scalars(").unwrap();
    let (head, kernel) = src.split_at(entry);
    let mut ptx = head.to_string();
    for i in 0..2500 {
        ptx.push_str(&kernel.replace("scalars", &format!("scalars_{i}")));
    }
    let mb = ptx.len() as f64 / 1e6;
    let t = Instant::now();
    let m = ptxspec::ptx::parse("x", ptx.clone()).unwrap();
    let parse = t.elapsed().as_secs_f64();
    let stmts: usize = m
        .items
        .iter()
        .map(|i| match &i.kind {
            ptxspec::ptx::ItemKind::Function(f) => f.body.as_ref().map_or(0, |b| b.stmts.len()),
            _ => 0,
        })
        .sum();
    let t = Instant::now();
    let linked = ptxspec::postlink::link::link(vec![m]).unwrap();
    let a = ptxspec::postlink::analyze::analyze(&linked).unwrap();
    let analyze = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let opts = ptxspec::postlink::Options::default();
    let (_, stages) =
        ptxspec::postlink::post_link_timed(vec![("x".into(), ptx.clone())], &opts).unwrap();
    println!("{stages:?}");
    let _ = &t;
    let total = t.elapsed().as_secs_f64();
    println!(
        "{mb:.1} MB, {stmts} stmts, {} sites: parse {parse:.3}s ({:.0} MB/s), analyze {analyze:.3}s, total {total:.3}s ({:.0} MB/s)",
        a.sites.len(),
        mb / parse,
        mb / total
    );
}
