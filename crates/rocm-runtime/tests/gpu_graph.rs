//! Graphs on a real device: a recorded chain of copies and memsets replayed with new inputs and
//! compared with the same chain run eagerly, what a capture refuses, what a failed capture
//! leaves behind, buffers a graph keeps alive after their owners dropped them, and captures
//! beside other streams' work. Kernel launches under capture are tested with the kernels, in
//! rocm-kernels' `gpu_kernels::graph`.
//!
//! Every test first asks whether the host API can capture at all: a HIP library without the
//! graph entry points answers [`Error::GraphsUnsupported`] (from `Backend::graph_support` and
//! from a capture alike), and the test stops there; any other answer than that or success
//! fails.

use std::sync::Arc;

use rocm_runtime::{DeviceBuffer, Error, GemmDesc, Stream};
use rocm_testkit::{GpuTest, Rng, gpu_test};

/// `true` when graphs can be captured here; `false` only for [`Error::GraphsUnsupported`].
/// `Backend::graph_support` (asked without capturing) must say the same as a capture of one
/// memset, with the same reason.
fn graphs_supported(gpu: &GpuTest) -> bool {
    let reported = gpu.backend().graph_support();
    let mut probe = gpu.stream().alloc::<u8>(1).unwrap();
    let captured = gpu.stream().capture(|_| probe.fill_bytes(1)).map(drop);
    match (reported, captured) {
        (Ok(()), Ok(())) => true,
        (Err(Error::GraphsUnsupported(said)), Err(Error::GraphsUnsupported(why))) => {
            assert_eq!(said, why, "graph_support and the capture give different reasons");
            assert!(why.contains("hipStreamBeginCapture") && why.contains("does not export"), "{why}");
            eprintln!("graphs are unsupported by this HIP library, which is allowed: {why}");
            false
        }
        (reported, captured) => {
            panic!("graph_support says {reported:?}, but capturing one memset gave {captured:?}")
        }
    }
}

/// A GPU test scope where graphs can be captured; returns from the test otherwise.
macro_rules! graph_test {
    () => {{
        let gpu = gpu_test!();
        if !graphs_supported(&gpu) {
            return;
        }
        gpu
    }};
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// What the recorded chain works on: an input written between replays, a scratch buffer, and
/// an output of twice the input's length.
struct Step {
    input: DeviceBuffer<f32>,
    scratch: DeviceBuffer<f32>,
    output: DeviceBuffer<f32>,
}

impl Step {
    fn new(stream: &Stream, n: usize) -> Step {
        let mut step = Step {
            input: stream.alloc(n).unwrap(),
            scratch: stream.alloc(n).unwrap(),
            output: stream.alloc(2 * n).unwrap(),
        };
        for buffer in [&mut step.input, &mut step.scratch, &mut step.output] {
            buffer.poison().unwrap();
        }
        step
    }
}

/// Five capturable operations, each depending on the one before: a copy, 32-bit and 8-bit
/// memsets and two ranged copies.
fn chain(step: &mut Step) -> rocm_runtime::Result<()> {
    let n = step.input.len();
    step.scratch.copy_from_device(&step.input)?; // scratch = input
    step.output.fill(-1.5)?; // output = -1.5
    step.output.copy_range_from_device(n / 2, &step.scratch, 0, n)?; // output[n/2..n/2 + n] = input
    step.scratch.fill_bytes(0)?; // scratch = 0
    step.output.copy_range_from_device(0, &step.scratch, 0, n / 4) // output[..n/4] = 0
}

fn chain_reference(input: &[f32]) -> Vec<f32> {
    let n = input.len();
    let mut out = vec![-1.5f32; 2 * n];
    out[n / 2..n / 2 + n].copy_from_slice(input);
    out[..n / 4].fill(0.0);
    out
}

#[test]
fn graph_replays_match_the_eager_chain_with_new_inputs_each_time() {
    let gpu = graph_test!();
    let stream = gpu.stream();
    let mut rng = Rng::new(0x6a0f_0001);
    for n in [1usize, 7, 4097, 1_000_003] {
        let mut eager = Step::new(stream, n);
        let mut recorded = Step::new(stream, n);
        let graph = stream.capture_with(&mut recorded, |_, step| chain(step)).unwrap();
        assert!(!stream.is_capturing());
        let output = graph.state().output.to_vec().unwrap();
        assert!(output.iter().all(|v| v.is_nan()), "n {n}: the capture ran work instead of recording it");
        for replay in 0..4 {
            let input = rng.f32_vec(n, -100.0, 100.0);
            eager.input.copy_from_host(&input).unwrap();
            eager.output.poison().unwrap();
            chain(&mut eager).unwrap();
            let want = eager.output.to_vec().unwrap();
            assert_eq!(bits(&want), bits(&chain_reference(&input)), "n {n}: the eager chain");

            graph.state().input.write_from_host(&input).unwrap();
            graph.state().output.write_from_host(&vec![f32::NAN; 2 * n]).unwrap();
            graph.launch().unwrap();
            let got = graph.state().output.to_vec().unwrap();
            assert_eq!(bits(&got), bits(&want), "n {n}: replay {replay} differs from the eager chain");
        }
        // A graph is `Send`: replayed and dropped on another thread.
        let input = rng.f32_vec(n, -1.0, 1.0);
        graph.state().input.write_from_host(&input).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                graph.launch().unwrap();
                let got = graph.state().output.to_vec().unwrap();
                assert_eq!(bits(&got), bits(&chain_reference(&input)), "n {n}: replay on another thread");
            });
        });
    }
}

/// Fails unless `result` is the refusal of `operation` on stream `stream`, for a reason that
/// mentions `why`, in the words of the error's documented form.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    result: rocm_runtime::Result<T>,
    stream: u64,
    operation: &str,
    why: &str,
) {
    match result {
        Err(e @ Error::CaptureRefused { .. }) => {
            let Error::CaptureRefused { stream: s, operation: op, reason } = &e else { unreachable!() };
            assert_eq!((*s, *op), (stream, operation), "{e}");
            assert!(reason.contains(why), "{operation}: the reason does not say `{why}`: {e}");
            let text = e.to_string();
            let head = format!("stream {stream} is recording a graph, so {operation} is refused: ");
            assert!(text.starts_with(&head) && text.ends_with(reason), "{text}");
        }
        other => panic!("{operation}: expected Error::CaptureRefused, got {other:?}"),
    }
}

#[test]
fn operations_that_cannot_be_recorded_are_refused_inside_a_capture() {
    let gpu = graph_test!();
    let stream = gpu.stream();
    let id = stream.id();
    let other = gpu.new_stream();
    let before = stream.record_event().unwrap();
    let mut earlier_output = stream.alloc_zeroed::<f32>(8).unwrap();
    let earlier = stream.capture(|_| earlier_output.fill(2.0)).unwrap();
    let theirs = other.upload(&[7.0f32; 8]).unwrap();
    let mut buffer = stream.alloc_zeroed::<f32>(8).unwrap();
    let mut host = vec![6.0f32; 8];
    let blas = rocm_runtime::Blas::open(gpu.backend()).ok();
    let (a, b) = (stream.upload(&[1.0f32; 4]).unwrap(), stream.upload(&[1.0f32; 4]).unwrap());
    let mut c = stream.alloc_zeroed::<f32>(4).unwrap();

    let graph = stream
        .capture(|s| {
            assert!(s.is_capturing());
            let freed = "freed before the graph replays";
            assert_refused(s.alloc::<f32>(4), id, "allocating", freed);
            assert_refused(s.upload(&[1.0f32]), id, "allocating", freed);
            assert_refused(s.alloc_zeroed::<u8>(0), id, "allocating", freed);
            let replay = "again at every replay";
            assert_refused(buffer.copy_from_host(&host), id, "copying from the host", replay);
            assert_refused(buffer.write_from_host(&host), id, "copying from the host", replay);
            let all = DeviceBuffer::write_all_from_host(&[(&buffer, &host[..])]);
            assert_refused(all, id, "copying from the host", replay);
            assert_refused(buffer.copy_to_host(&mut host), id, "copying to the host", replay);
            assert_refused(buffer.to_vec(), id, "copying to the host", replay);
            assert_refused(s.synchronize(), id, "synchronizing the stream", "nothing recorded has run");
            assert_refused(s.is_idle(), id, "asking whether the stream is idle", "invalidate the capture");
            assert_refused(s.record_event(), id, "recording an event", "mean nothing");
            assert_refused(s.wait_event(&before), id, "waiting on an event", "cannot be recorded");
            let two = "copying between two streams";
            assert_refused(buffer.copy_from_device(&theirs), id, two, "pull that stream into the capture");
            assert_refused(buffer.copy_range_from_device(0, &theirs, 0, 4), id, two, "one stream");
            let nested = s.capture(|_| Ok::<(), Error>(()));
            assert_refused(nested, id, "starting another capture", "one graph at a time");
            assert_refused(earlier.launch(), id, "replaying a graph", "allocations alive");
            if let Some(blas) = &blas {
                let gemm = blas.gemm(&GemmDesc::new(2, 2, 2), &a, &b, &mut c);
                assert_refused(gemm, id, "a vendor BLAS GEMM", "portable GEMM kernel");
            }
            // Work queued on the recording stream from another thread.
            std::thread::scope(|scope| {
                scope.spawn(|| assert_refused(buffer.fill(3.0), id, "a memset", "another thread"));
            });
            // A refusal queues nothing and leaves the capture valid: this is recorded.
            buffer.fill(4.0)
        })
        .unwrap();
    assert!(!stream.is_capturing());
    graph.launch().unwrap();
    drop(graph);
    assert_eq!(buffer.to_vec().unwrap(), [4.0; 8], "the recorded memset, replayed once");
    assert_eq!(host, [6.0; 8], "a refused copy to the host wrote nothing");
    earlier.launch().unwrap();
    drop(earlier);
    assert_eq!(earlier_output.to_vec().unwrap(), [2.0; 8]);
    stream.synchronize().unwrap();
    assert!(stream.is_idle().unwrap());
}

#[test]
fn a_failed_capture_leaves_the_stream_usable_and_leaks_nothing() {
    let gpu = graph_test!();
    let stream = gpu.stream();
    let mut kept = stream.alloc_zeroed::<f32>(1000).unwrap();
    let baseline = gpu.account().live_bytes();

    // The closure fails: its error comes back as it was, and nothing it recorded runs.
    let doomed = stream.upload(&[1.0f32; 256]).unwrap();
    let kept_ref = &mut kept;
    let err = stream
        .capture(move |_| {
            kept_ref.fill(5.0)?;
            kept_ref.copy_range_from_device(0, &doomed, 0, 256)?;
            drop(doomed); // during the capture: freed once it ended
            Err(Error::InvalidArgument("recording failed on purpose".into()))
        })
        .unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m == "recording failed on purpose"), "{err}");
    assert!(!stream.is_capturing());
    assert_eq!(gpu.account().live_bytes(), baseline, "the buffer dropped in the failed capture is freed");
    assert_eq!(kept.to_vec().unwrap(), vec![0.0; 1000], "work of a failed capture ran");

    // The closure panics: the panic comes through, with the same cleanup.
    let doomed = stream.upload(&[2.0f32; 64]).unwrap();
    let kept_ref = &mut kept;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stream.capture(move |_| -> rocm_runtime::Result<()> {
            kept_ref.fill(6.0)?;
            let mut doomed = doomed;
            doomed.fill(3.0)?;
            panic!("recording panicked on purpose")
        })
    }));
    let payload = panicked.expect_err("the panic must come through");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"recording panicked on purpose"));
    assert!(!stream.is_capturing());
    assert_eq!(gpu.account().live_bytes(), baseline, "the buffer of the panicking capture is freed");
    assert_eq!(kept.to_vec().unwrap(), vec![0.0; 1000], "work of a panicked capture ran");

    // The stream works eagerly and captures again.
    let data: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    kept.copy_from_host(&data).unwrap();
    let mut copy = stream.alloc::<f32>(1000).unwrap();
    let graph = stream.capture(|_| copy.copy_from_device(&kept)).unwrap();
    graph.launch().unwrap();
    drop(graph);
    assert_eq!(copy.to_vec().unwrap(), data);
}

#[test]
fn buffers_a_graph_uses_outlive_their_owners_until_the_graph_goes() {
    let gpu = graph_test!();
    let stream = gpu.stream();
    let n = 4097;
    let bytes = (n * size_of::<f32>()) as u64;
    let mut rng = Rng::new(0x6a0f_0003);
    let (first, second) = (rng.f32_vec(n, -1.0, 1.0), rng.f32_vec(n, -1.0, 1.0));
    let mut expected = first.clone();
    expected[..n / 2].copy_from_slice(&second[..n / 2]);

    let mut out = stream.alloc::<f32>(n).unwrap();
    let baseline = gpu.account().live_bytes();
    // Moved into the recording and dropped there.
    let moved = stream.upload(&first).unwrap();
    // Shared with the recording through an `Arc`, whose last handle goes after it.
    let shared = Arc::new(stream.upload(&second).unwrap());
    let in_closure = Arc::clone(&shared);
    let graph = stream
        .capture_with(&mut out, move |_, out| {
            out.copy_from_device(&moved)?;
            out.copy_range_from_device(0, &in_closure, 0, n / 2)
        })
        .unwrap();
    drop(shared);
    assert_eq!(gpu.account().live_bytes(), baseline + 2 * bytes, "the graph keeps both buffers' memory");
    // Memory freed now could be handed out again: take some and scribble over it.
    let mut scribble = stream.alloc::<f32>(2 * n).unwrap();
    scribble.fill(99.0).unwrap();
    for replay in 0..3 {
        graph.state().write_from_host(&vec![f32::NAN; n]).unwrap();
        graph.launch().unwrap();
        let got = graph.state().to_vec().unwrap();
        assert_eq!(bits(&got), bits(&expected), "replay {replay} read memory its buffers no longer own");
    }
    drop(graph);
    assert_eq!(gpu.account().live_bytes(), baseline + 2 * bytes, "the graph freed both when it went");
    drop(scribble);
    assert_eq!(gpu.account().live_bytes(), baseline);
}

#[test]
fn captures_on_many_streams_run_beside_eager_work() {
    let gpu = graph_test!();
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let stream = gpu.new_stream();
            scope.spawn(move || {
                let mut rng = Rng::new(0x6a0f_0100 + t);
                let n = 1000 + 333 * t as usize;
                let mut step = Step::new(&stream, n);
                for round in 0..5 {
                    let graph = stream.capture_with(&mut step, |_, step| chain(step)).unwrap();
                    for replay in 0..3 {
                        let input = rng.f32_vec(n, -1.0, 1.0);
                        graph.state().input.write_from_host(&input).unwrap();
                        graph.launch().unwrap();
                        let got = graph.state().output.to_vec().unwrap();
                        let want = chain_reference(&input);
                        assert_eq!(bits(&got), bits(&want), "thread {t}, round {round}, replay {replay}");
                    }
                }
            });
        }
        // Meanwhile, on another stream: allocations, frees and waits, which a capture in the
        // vendors' default (global) mode would make fail.
        let stream = gpu.new_stream();
        scope.spawn(move || {
            let mut rng = Rng::new(0x6a0f_0200);
            for i in 0..200 {
                let data = rng.f32_vec(1 + 37 * i, -1.0, 1.0);
                let buffer = stream.upload(&data).unwrap();
                assert_eq!(buffer.to_vec().unwrap(), data, "eager round trip {i}");
            }
        });
    });
}
