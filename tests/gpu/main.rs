//! Launches on a real GPU: every example kernel in every mode (native,
//! emulated with the values in the parameter space, LTO) and with the
//! buffer in global memory, with defaults, set values, values changed
//! between launches, composite constants; 8 threads at once; 10 000
//! launches without leaking; selectors, bundles bound to devices, JIT logs
//! and errors, dynamic parallelism, a debug (-G) build; with two GPUs, one
//! bundle on both from four threads.
//!
//! A harness of its own (`harness = false`): without a CUDA driver it says so
//! and reports every test as ignored, never as passed (CI has no GPU); with
//! a driver present it runs them all and any failure fails the run.

// A harness-less binary: `missing_docs` would ask for docs on what its macros
// (spec_struct!, criterion_group!) generate, which is no API.
#![allow(missing_docs)]

use std::sync::Arc;

use ptxspec::image::{Delivery, Image};
use ptxspec::runtime::{self, Arg, DeviceBuffer, LaunchConfig, Queue};
use ptxspec::{
    Bool, BuildOptions, Executable, KernelBundle, KernelId, SpecId, SpecMode, build, build_with,
    get_kernel_bundle_for,
};
use ptxspec_core::postlink::{BufferPlacement, Options};

ptxspec_kernels::register_example_kernels!();

#[path = "../support/atexit_counter.rs"]
mod atexit_counter;
#[path = "../support/child.rs"]
mod child;
#[path = "../support/gpu_harness.rs"]
mod gpu_harness;
#[path = "../support/matmul.rs"]
mod matmul;
#[path = "../support/scalars.rs"]
mod scalars;
use scalars::*;

use ptxspec_kernels::reference;

/// Every way a bundle delivers values; the example images carry LTO-IR
/// (build.rs compiles them with NVRTC where it is installed).
const MODES: [SpecMode; 4] = [
    SpecMode::Auto,
    SpecMode::Native,
    SpecMode::Emulated,
    SpecMode::Lto,
];

ptxspec::spec_struct! {
    pub struct A { pub x: i32, pub y: f32 }
}
ptxspec::spec_struct! {
    /// DPC++'s SYCL 1.2.1 spec-constant design's POD; CUDA's int2 is 8-aligned, which `[i32; 2]` after two
    /// 8-byte `A`s already is.
    pub struct Pod { pub a: [A; 2], pub b: [i32; 2] }
}

mod values;

use buffers::conv_launch;
use kernels::{BLOCK, COEFF, matmul_once};
use values::run_scalars;
mod arguments;
mod buffers;
mod bundles;
mod features;
mod handler;
mod kernels;
mod soundness;
mod source;
mod tiered;

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    let norm = b.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f32>()
        .sqrt()
        / norm
}

/// Compiles a source with NVRTC here (the GPU machine has it) and makes
/// its images.
fn compiled(name: &str, source: &str, extra: &[&str]) -> Vec<Image> {
    // compute_80: accepted by NVRTC 12 and 13 alike (13 dropped Volta).
    let opts = ptxspec_core::compile::CompileOptions {
        extra: extra.iter().map(|s| s.to_string()).collect(),
        arch: "compute_80".into(),
        ..Default::default()
    };
    let header = ptxspec_core::compile::header_dir(None).unwrap();
    let unit = ptxspec_core::compile::compile_unit(name, source, &opts, &header).unwrap();
    ptxspec_core::compile::post_link_units(&[unit], &Options::default())
        .unwrap()
        .into_iter()
        .map(|i| Image::new(i.stem, i.ptx, &i.props.to_text()).unwrap())
        .collect()
}

use gpu_harness::GpuTest;

/// How many GPUs a test needs; with fewer it is reported as ignored, not
/// as passed.
fn gpus_needed(name: &str) -> usize {
    if name == "one_bundle_on_two_gpus_from_four_threads" {
        2
    } else {
        1
    }
}

const TESTS: &[(&str, GpuTest)] = &[
    (
        "a_value_for_a_pointer_parameter_is_refused",
        soundness::a_value_for_a_pointer_parameter_is_refused,
    ),
    (
        "a_program_capture_never_takes_a_queue_launch",
        soundness::a_program_capture_never_takes_a_queue_launch,
    ),
    (
        "a_graph_dropped_during_a_capture_waits_for_its_replays",
        soundness::a_graph_dropped_during_a_capture_waits_for_its_replays,
    ),
    (
        "retirement_during_a_capture_is_deferred",
        soundness::retirement_during_a_capture_is_deferred,
    ),
    (
        "graph_replays_racing_captures_of_their_queue",
        soundness::graph_replays_racing_captures_of_their_queue,
    ),
    (
        "a_queue_dropped_during_a_global_capture_keeps_its_code",
        soundness::a_queue_dropped_during_a_global_capture_keeps_its_code,
    ),
    (
        "a_process_ends_cleanly_at_any_moment",
        soundness::a_process_ends_cleanly_at_any_moment,
    ),
    (
        "nvidia_libraries_start_on_the_program_threads",
        soundness::nvidia_libraries_start_on_the_program_threads,
    ),
    (
        "pinned_choices_time_nothing_and_repeat_a_run",
        arguments::pinned_choices_time_nothing_and_repeat_a_run,
    ),
    (
        "structs_holding_pointers_and_64_bit_data",
        soundness::structs_holding_pointers_and_64_bit_data,
    ),
    (
        "launches_beside_a_link_on_the_same_queue_never_wait",
        tiered::launches_beside_a_link_on_the_same_queue_never_wait,
    ),
    (
        "handler_values_and_defaults_launch_after_launch",
        handler::handler_values_and_defaults_launch_after_launch,
    ),
    (
        "global_buffers_written_over_give_each_launch_its_values",
        buffers::global_buffers_written_over_give_each_launch_its_values,
    ),
    (
        "buffers_used_across_queues",
        buffers::buffers_used_across_queues,
    ),
    (
        "buffers_are_written_and_filled",
        buffers::buffers_are_written_and_filled,
    ),
    ("bring_your_own_cudarc", buffers::bring_your_own_cudarc),
    (
        "cudarc_slices_take_the_short_path_where_cudarc_keeps_no_order",
        buffers::cudarc_slices_take_the_short_path_where_cudarc_keeps_no_order,
    ),
    (
        "vec_and_marray_values_in_every_mode",
        values::vec_and_marray_values_in_every_mode,
    ),
    (
        "each_cpp_entity_reads_its_own_value",
        values::each_cpp_entity_reads_its_own_value,
    ),
    (
        "tiered_bundles_switch_to_the_specialized_tier",
        tiered::tiered_bundles_switch_to_the_specialized_tier,
    ),
    (
        "a_second_queue_never_waits_for_a_tier_link",
        tiered::a_second_queue_never_waits_for_a_tier_link,
    ),
    (
        "kernel_handler_without_constants",
        handler::kernel_handler_without_constants,
    ),
    (
        "handler_values_for_other_kernels_and_handler_get",
        handler::handler_values_for_other_kernels_and_handler_get,
    ),
    (
        "scalars_and_composites_in_both_modes",
        values::scalars_and_composites_in_both_modes,
    ),
    ("seed000_pod", values::seed000_pod),
    (
        "convolution_matches_cpu_with_values_changed_between_launches",
        kernels::convolution_matches_cpu_with_values_changed_between_launches,
    ),
    (
        "blocked_matmul_for_each_block_size",
        kernels::blocked_matmul_for_each_block_size,
    ),
    (
        "matmul_with_its_block_size_fixed_matches_cpu",
        arguments::matmul_with_its_block_size_fixed_matches_cpu,
    ),
    (
        "convolution_with_its_arguments_fixed_matches_cpu",
        arguments::convolution_with_its_arguments_fixed_matches_cpu,
    ),
    (
        "divisions_by_fixed_arguments_match_the_division",
        arguments::divisions_by_fixed_arguments_match_the_division,
    ),
    (
        "adaptive_arguments_never_run_the_wrong_variant",
        arguments::adaptive_arguments_never_run_the_wrong_variant,
    ),
    (
        "adaptive_variants_are_kept_only_when_faster",
        arguments::adaptive_variants_are_kept_only_when_faster,
    ),
    (
        "a_graph_that_only_replays_adapts_guarded",
        arguments::a_graph_that_only_replays_adapts_guarded,
    ),
    (
        "a_graph_trial_verdict_warms_the_next_process",
        arguments::a_graph_trial_verdict_warms_the_next_process,
    ),
    (
        "a_kernel_with_an_empty_tag_adapts_through_lto",
        arguments::a_kernel_with_an_empty_tag_adapts_through_lto,
    ),
    (
        "adapting_bundles_say_why_a_kernel_is_not_adapted",
        arguments::adapting_bundles_say_why_a_kernel_is_not_adapted,
    ),
    (
        "adaptive_arguments_warm_the_next_process",
        arguments::adaptive_arguments_warm_the_next_process,
    ),
    (
        "two_translation_units_on_the_gpu",
        kernels::two_translation_units_on_the_gpu,
    ),
    (
        "handler_values_errors_and_eight_threads",
        handler::handler_values_errors_and_eight_threads,
    ),
    (
        "ten_thousand_launches_with_changing_values_leak_nothing",
        handler::ten_thousand_launches_with_changing_values_leak_nothing,
    ),
    (
        "launches_going_round_many_kernels_make_each_plan_once",
        handler::launches_going_round_many_kernels_make_each_plan_once,
    ),
    ("devices_are_listed", features::devices_are_listed),
    (
        "optional_features_run_where_supported",
        features::optional_features_run_where_supported,
    ),
    (
        "reqntid_kernel_with_the_wrong_block_size",
        features::reqntid_kernel_with_the_wrong_block_size,
    ),
    (
        "global_and_param_buffers_with_handler_values",
        buffers::global_and_param_buffers_with_handler_values,
    ),
    (
        "selector_chooses_between_native_and_emulated_images",
        bundles::selector_chooses_between_native_and_emulated_images,
    ),
    (
        "bundles_bound_to_devices_logs_and_jit_errors",
        bundles::bundles_bound_to_devices_logs_and_jit_errors,
    ),
    (
        "debug_build_of_the_convolution",
        bundles::debug_build_of_the_convolution,
    ),
    (
        "dynamic_parallelism_links_the_device_runtime",
        bundles::dynamic_parallelism_links_the_device_runtime,
    ),
    (
        "one_bundle_on_two_gpus_from_four_threads",
        bundles::one_bundle_on_two_gpus_from_four_threads,
    ),
    (
        "kernels_from_source_in_every_mode_and_extern_c_handlers",
        source::kernels_from_source_in_every_mode_and_extern_c_handlers,
    ),
    (
        "kernels_launch_by_their_cpp_names",
        source::kernels_launch_by_their_cpp_names,
    ),
];

fn main() {
    gpu_harness::run(TESTS, gpus_needed);
}
