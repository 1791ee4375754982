//! The device comparator against the CPU comparator on shape, dtype and float64-reference
//! errors, empty tensors, sizes around vector and block boundaries, integers and bools,
//! random mixtures, and its throughput on large fp32 tensors.

use super::*;

#[test]
fn shape_dtype_and_reference_errors() {
    let dc = gpu_or_skip("shape_dtype_and_reference_errors");
    let a = floats(Dtype::F32, &[2, 3], &[1.0; 6]);
    let b = floats(Dtype::F32, &[3, 2], &[1.0; 6]);
    let h = floats(Dtype::F16, &[2, 3], &[1.0; 6]);
    let t = f64s(&[2, 3], &[1.0; 6]);
    let t_wrong_shape = f64s(&[6], &[1.0; 6]);
    let t_wrong_dtype = floats(Dtype::F32, &[2, 3], &[1.0; 6]);
    assert!(matches!(
        check(dc, &b, &a, None, KB, Precision::Fp32),
        Ok(Comparison::WrongShape { .. })
    ));
    assert!(matches!(
        check(dc, &h, &a, Some(&t), STRICT, Precision::Fp32),
        Ok(Comparison::WrongDtype { .. })
    ));
    // The float64 reference is checked first: a harness fault, whatever the candidate.
    assert!(matches!(
        check(dc, &b, &a, Some(&t_wrong_shape), STRICT, Precision::Fp32),
        Err(CompareError::ReferenceF64Shape { .. })
    ));
    assert!(matches!(
        check(dc, &h, &a, Some(&t_wrong_dtype), KB, Precision::Fp32),
        Err(CompareError::ReferenceF64Dtype(Dtype::F32))
    ));
    let i = ints(Dtype::I64, &[2, 3], &[1; 6]);
    assert!(matches!(
        check(dc, &i, &a, None, KB, Precision::Fp32),
        Ok(Comparison::WrongDtype { .. })
    ));
    if let Some(dc) = dc {
        // A buffer too small for its shape is a harness fault (the outer error).
        let buf = dc.gpu.upload(&[0u8; 8]).unwrap();
        let small = DevTensor {
            buf: &buf,
            dtype: Dtype::F32,
            shape: vec![4],
        };
        let err = dc.compare(&small, &small, None, KB, Precision::Fp32);
        assert!(err.is_err(), "{err:?}");
    }
}

#[test]
fn empty_tensors() {
    let dc = gpu_or_skip("empty_tensors");
    for shape in [vec![0u64], vec![4, 0, 3]] {
        let t = f64s(&shape, &[]);
        for dtype in [Dtype::F32, Dtype::Bf16, Dtype::F64, Dtype::I64, Dtype::Bool] {
            let e = HostTensor::new(dtype, shape.clone(), vec![]).unwrap();
            for profile in PROFILES {
                for truth in [None, Some(&t)] {
                    let v = values(&check(dc, &e, &e, truth, profile, Precision::Fp32));
                    assert!(v.passed() && v.elements == 0, "{v:?}");
                }
            }
        }
    }
}

#[test]
fn sizes_around_vector_and_block_boundaries() {
    let dc = gpu_or_skip("sizes_around_vector_and_block_boundaries");
    let mut rng = Rng(7);
    let sizes = [
        1usize, 2, 7, 8, 9, 15, 16, 17, 255, 256, 257, 4095, 4096, 4097, 65537, 1_000_003,
    ];
    for n in sizes {
        let t: Vec<f64> = (0..n).map(|_| rng.sym()).collect();
        let mut c = t.clone();
        c[n - 1] += 0.25;
        let shape = [n as u64];
        for dtype in FLOATS {
            let (ct, rt) = (floats(dtype, &shape, &c), floats(dtype, &shape, &t));
            let v = values(&check(dc, &ct, &rt, None, KB, precision_of(dtype)));
            assert_eq!(v.first_mismatch.unwrap().flat_index, n as u64 - 1);
        }
        let ic: Vec<i64> = t.iter().map(|x| (x * 100.0) as i64).collect();
        let (mut ic, mut ir) = (ic.clone(), ic);
        ic[n - 1] = 0;
        ir[n - 1] = 1;
        for dtype in INTS {
            let v = values(&check(
                dc,
                &ints(dtype, &shape, &ic),
                &ints(dtype, &shape, &ir),
                None,
                V01,
                Precision::Fp32,
            ));
            assert_eq!(v.mismatches, 1, "{dtype} {n}");
        }
    }
    // A scalar (shape []).
    let s = floats(Dtype::F32, &[], &[1.0]);
    let s2 = floats(Dtype::F32, &[], &[2.0]);
    let v = values(&check(dc, &s2, &s, None, KB, Precision::Fp32));
    assert_eq!(v.first_mismatch.unwrap().index, Vec::<u64>::new());
}

#[test]
fn integers_and_bools_are_exact() {
    let dc = gpu_or_skip("integers_and_bools_are_exact");
    let mut rng = Rng(8);
    let n = 100_003usize;
    let t = f64s(&[n as u64], &vec![0.0; n]);
    for dtype in INTS {
        let r: Vec<i64> = (0..n).map(|_| rng.next() as i64).collect();
        let rt = ints(dtype, &[n as u64], &r);
        let v = values(&check(dc, &rt, &rt, Some(&t), STRICT, Precision::Fp32));
        assert!(v.passed() && v.float64 == Float64Status::NotApplicable);
        let mut c = r.clone();
        for _ in 0..20 {
            let i = rng.below(n as u64) as usize;
            c[i] = c[i].wrapping_add(1 + rng.below(3) as i64);
        }
        let v = values(&check(
            dc,
            &ints(dtype, &[n as u64], &c),
            &rt,
            None,
            KB,
            Precision::Fp32,
        ));
        assert!(v.mismatches > 0 && v.max_abs >= 1.0, "{dtype}: {v:?}");
    }
    // Extremes: |i64::MIN − i64::MAX| = 2⁶⁴ − 1, values above 2⁵³ rounded to f64.
    let c = [i64::MIN, 0, 7, i64::MAX, (1 << 53) + 1];
    let r = [i64::MAX, 5, 0, i64::MIN, (1 << 53) + 3];
    let v = values(&check(
        dc,
        &ints(Dtype::I64, &[5], &c),
        &ints(Dtype::I64, &[5], &r),
        None,
        KB,
        Precision::Fp32,
    ));
    assert_eq!(v.mismatches, 5);
    assert_eq!(v.max_abs, 2f64.powi(64));
    assert_eq!(v.max_rel, f64::INFINITY);
    // Bools: any non-zero byte is true.
    let c = [0u64, 1, 2, 255, 0, 1];
    let r = [0u64, 1, 1, 1, 1, 0];
    let v = values(&check(
        dc,
        &bits(Dtype::Bool, &[6], &c),
        &bits(Dtype::Bool, &[6], &r),
        None,
        KB,
        Precision::Fp32,
    ));
    assert_eq!(v.mismatches, 2);
    assert_eq!(v.first_mismatch.unwrap().flat_index, 4);
}

/// Random tensors with random special values, sizes, shapes, profiles, precisions and
/// float64 references.
#[test]
fn random_mixtures_match_the_cpu() {
    let dc = gpu_or_skip("random_mixtures_match_the_cpu");
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1e-40,
        -3e-42,
        5e-324,
        1e-310,
        1e30,
        -3.4e38,
        65504.0,
        1e300,
    ];
    const SEEDS: u64 = 320;
    let mut failing = 0;
    for seed in 0..SEEDS {
        let mut rng = Rng(1000 + seed);
        let dtype = rng.pick(&FLOATS);
        let n = match rng.below(4) {
            0 => 1 + rng.below(20),
            1 => 1 + rng.below(2000),
            2 => 1 + rng.below(70_000),
            _ => 1 + rng.below(400_000),
        } as usize;
        let shape: Vec<u64> = if n.is_multiple_of(6) {
            vec![2, 3, n as u64 / 6]
        } else if n.is_multiple_of(2) {
            vec![n as u64 / 2, 2]
        } else {
            vec![n as u64]
        };
        let precision = rng.pick(&PRECISIONS);
        let profile = rng.pick(&PROFILES);
        let tol = tolerance(profile, precision).atol;
        let scale = 10f64.powi(rng.below(7) as i32 - 3);
        let noise = tol * rng.pick(&[0.0, 0.1, 0.5, 1.0, 2.0, 10.0]);
        let ref_err = tol * rng.pick(&[0.0, 0.1, 1.0, 10.0]);
        let p_special = rng.pick(&[0.0, 1e-4, 1e-2, 0.2]);
        let mut t = Vec::with_capacity(n);
        let (mut c, mut r) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let x = scale * rng.sym();
            t.push(x);
            r.push(x + ref_err * rng.sym() * x.abs().max(1.0));
            c.push(x + noise * rng.sym() * x.abs().max(1.0));
        }
        for i in 0..n {
            if rng.unit() < p_special {
                let s = rng.pick(&specials);
                match rng.below(5) {
                    0 => c[i] = s,
                    1 => r[i] = s,
                    2 => t[i] = s,
                    3 => {
                        c[i] = s;
                        r[i] = s;
                    }
                    _ => {
                        c[i] = s;
                        r[i] = s;
                        t[i] = s;
                    }
                }
            }
        }
        let (ct, rt, tt) = (
            floats(dtype, &shape, &c),
            floats(dtype, &shape, &r),
            f64s(&shape, &t),
        );
        let truth = (rng.below(3) > 0).then_some(&tt);
        let res = check(dc, &ct, &rt, truth, profile, precision);
        failing += u64::from(!values(&res).passed());
    }
    // The mixture is worth its time only if it has both verdicts.
    assert!(
        (SEEDS / 8..SEEDS * 7 / 8).contains(&failing),
        "{failing} of {SEEDS} failed"
    );
}

/// Prints the device comparator's throughput on 256 MiB fp32 tensors.
#[test]
fn throughput_256mib_fp32() {
    let Some(dc) = comparator() else {
        println!("devcmp::throughput_256mib_fp32: skipped (no GPU)");
        return;
    };
    let n = (256usize << 20) / 4;
    let mut rng = Rng(9);
    let mut t = Vec::with_capacity(n);
    let (mut c, mut r) = (Vec::with_capacity(4 * n), Vec::with_capacity(4 * n));
    for _ in 0..n {
        let x = rng.sym();
        let y = x as f32;
        let noise = (rng.next() % 64) as f32 * 1e-6;
        t.extend_from_slice(&x.to_le_bytes());
        r.extend_from_slice(&y.to_le_bytes());
        c.extend_from_slice(&(y + noise).to_le_bytes());
    }
    let shape = vec![n as u64];
    let ct = HostTensor::new(Dtype::F32, shape.clone(), c).unwrap();
    let rt = HostTensor::new(Dtype::F32, shape.clone(), r).unwrap();
    let tt = HostTensor::new(Dtype::F64, shape.clone(), t).unwrap();
    let (cb, rb, tb) = (
        dc.gpu.upload(ct.data()).unwrap(),
        dc.gpu.upload(rt.data()).unwrap(),
        dc.gpu.upload(tt.data()).unwrap(),
    );
    let (cd, rd, td) = (dev(&ct, &cb), dev(&rt, &rb), dev(&tt, &tb));
    for (profile, truth) in [(KB, None), (STRICT, Some(&td))] {
        let bytes = (8 + if truth.is_some() { 8 } else { 0 }) * n;
        let run = || {
            dc.compare(&cd, &rd, truth, profile, Precision::Fp32)
                .expect("device comparison")
        };
        let got = run();
        // Deterministic: fixed grid, fixed reduction tree, float sums included.
        assert_eq!(run(), got, "two runs of one comparison");
        let started = Instant::now();
        let want =
            kbench_adversarial::compare(&ct, &rt, truth.map(|_| &tt), profile, Precision::Fp32);
        let cpu_s = started.elapsed().as_secs_f64();
        assert_same(&got, &want, &format!("256 MiB fp32, {profile}"));
        let reps = 20;
        let started = Instant::now();
        for _ in 0..reps {
            let _ = std::hint::black_box(run());
        }
        let s = started.elapsed().as_secs_f64() / reps as f64;
        println!(
            "devcmp: 256 MiB fp32 ({n} elements), {profile}{}: {:.3} ms per comparison, {:.0} GB/s over {} MiB read (CPU comparator here: {:.1} ms, {:.1} GB/s)",
            if truth.is_some() { " with float64 reference" } else { "" },
            s * 1e3,
            bytes as f64 / s / 1e9,
            bytes >> 20,
            cpu_s * 1e3,
            bytes as f64 / cpu_s / 1e9,
        );
    }
}

/// The size the comparator is built for: 1.6 billion fp32 elements (6.4 GB a tensor),
/// filled on the device; all equal, then all wrong (every element through the full
/// rules). Also the fixed cost of a one-element comparison.
#[test]
fn throughput_1_6_billion_fp32() {
    let Some(dc) = comparator() else {
        println!("devcmp::throughput_1_6_billion_fp32: skipped (no GPU)");
        return;
    };
    let one = floats(Dtype::F32, &[1], &[1.0]);
    let ob = dc.gpu.upload(one.data()).unwrap();
    let od = dev(&one, &ob);
    let reps = 200;
    let started = Instant::now();
    for _ in 0..reps {
        let _ = std::hint::black_box(dc.compare(&od, &od, None, KB, Precision::Fp32));
    }
    println!(
        "devcmp: one-element comparison: {:.1} us",
        started.elapsed().as_secs_f64() / reps as f64 * 1e6
    );
    let n: u64 = 1_600_000_000;
    let bytes = 4 * n as usize;
    let (free, _) = dc.gpu.mem_info().unwrap();
    if free < 2 * bytes + (1 << 30) {
        println!("devcmp::throughput_1_6_billion_fp32: skipped ({free} bytes free)");
        return;
    }
    let (cb, rb) = (dc.gpu.alloc(bytes).unwrap(), dc.gpu.alloc(bytes).unwrap());
    let shape = vec![n];
    let cd = DevTensor {
        buf: &cb,
        dtype: Dtype::F32,
        shape: shape.clone(),
    };
    let rd = DevTensor {
        buf: &rb,
        dtype: Dtype::F32,
        shape: shape.clone(),
    };
    // The same comparison on 1,000 host elements gives every statistic but the counts.
    let small = |byte: u8| HostTensor::new(Dtype::F32, vec![1000], vec![byte; 4000]).unwrap();
    for (what, cbyte, rbyte) in [("all equal", 0x3f, 0x3f), ("all wrong", 0x3f, 0x3e)] {
        dc.gpu.fill(&cb, cbyte).unwrap();
        dc.gpu.fill(&rb, rbyte).unwrap();
        let mut s = f64::INFINITY;
        let mut got = None;
        for _ in 0..3 {
            let started = Instant::now();
            got = Some(dc.compare(&cd, &rd, None, KB, Precision::Fp32).unwrap());
            s = s.min(started.elapsed().as_secs_f64());
        }
        let got = got.unwrap();
        let want =
            kbench_adversarial::compare(&small(cbyte), &small(rbyte), None, KB, Precision::Fp32);
        let (mut g, w) = (values(&got), values(&want));
        assert_eq!(g.elements, n);
        let wrong = if cbyte == rbyte { 0 } else { n };
        assert_eq!(g.mismatches, wrong, "{what}");
        g.elements = w.elements;
        g.mismatches = w.mismatches;
        g.shape = w.shape.clone();
        if let Some(m) = g.first_mismatch.as_mut() {
            m.index = vec![m.flat_index];
        }
        assert_same(&Ok(Comparison::Values(g)), &want, what);
        println!(
            "devcmp: 1.6e9 fp32 elements, {what}: {:.1} ms, {:.0} GB/s over {} MiB read",
            s * 1e3,
            (2 * bytes) as f64 / s / 1e9,
            (2 * bytes) >> 20
        );
    }
}
