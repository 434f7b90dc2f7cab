//! OpenSSL 3.0's shared libraries, `libcrypto.so.3` and `libssl.so.3` (hand-written perlasm
//! next to C, secondary entries, big dispatch tables), built from Debian's source by
//! scripts/build-real-programs.sh, rewritten by Rivet and run under OpenSSL's own test suite
//! (scripts/check-openssl.sh: `make test` in a copy of the build tree, whose `openssl` app
//! and test programs load the libraries under test).
//!
//! Both libraries are instrumented and trained on real use (scripts/openssl-load.sh: TLS
//! handshakes through `s_server`/`s_client` on 127.0.0.1, certificate parsing, requests and
//! verification, a short `speed`), then optimized from that profile with `--verify`: with
//! the defaults and with every option set of the corpus tests. They are also rewritten with
//! shuffled layouts. Every output must pass what the originals pass.
//!
//! The whole suite takes long (scripts/check-openssl.sh with no test names runs it: 257 test
//! files, 4 to 38 minutes of wall time on this shared 2-core machine for about 6 minutes of
//! CPU); by default `SUITE` (12 files, under 2 minutes) runs on the default optimization and
//! on one shuffled layout (`RIVET_OPENSSL_FULL_SUITE=1` runs the whole suite on every
//! output), and every other output runs TLS handshakes (each must complete), certificate
//! parsing and the `openssl req` of issue 39, which crashed in RSA blinding when a moved
//! function's forwarding jump covered a secondary entry that staying code branched to. Some of
//! OpenSSL's test programs link `libcrypto.a` to reach internal functions; in those recipes
//! only the `openssl` commands run the libraries under test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::corpus::{NO_RELOCATIONS, ORDER_FILE, optimize_option_sets};
use common::{check_script, real_programs, s, scratch};

const LIBS: [&str; 2] = ["libcrypto.so.3", "libssl.so.3"];

/// OpenSSL's tests run on the main outputs (`make test TESTS=...`): EVP's algorithm vectors,
/// RSA, ECDSA, certificates, chain verification, requests, and TLS between the libraries' own
/// client and server (`test_ssl_old`, `test_sslapi`, `test_tls13messages`).
const SUITE: [&str; 12] = [
    "test_evp",
    "test_evp_extra",
    "test_rsa",
    "test_ecdsa",
    "test_x509",
    "test_verify",
    "test_ssl_old",
    "test_req",
    "test_sslapi",
    "test_tls13messages",
    "test_bn",
    "test_ec",
];

/// Set (to anything), every output runs OpenSSL's whole `make test` instead of what the
/// default run gives it (the proof behind issue 39's closing note: 10 outputs, 4 to 12
/// minutes each here).
const FULL_SUITE_ENV: &str = "RIVET_OPENSSL_FULL_SUITE";

fn full_suite() -> bool {
    std::env::var_os(FULL_SUITE_ENV).is_some()
}

/// The OpenSSL build tree (scripts/build-real-programs.sh openssl), with its libraries.
fn tree() -> &'static Path {
    use std::sync::OnceLock;
    static TREE: OnceLock<PathBuf> = OnceLock::new();
    TREE.get_or_init(|| {
        real_programs(&["openssl"])
            .remove("openssl-tree")
            .expect("build-real-programs.sh openssl printed no openssl-tree")
    })
}

/// Runs rivet, which must succeed and keep the debug info; returns its standard output.
fn rivet(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_rivet"))
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rivet {args:?}: {stderr}");
    assert!(
        !stderr.contains("debug info removed"),
        "rivet {args:?}: {stderr}"
    );
    out.stdout
}

/// scripts/openssl-load.sh with the libraries of `libs` (a directory); it fails on any failed
/// step or handshake.
fn load(libs: &Path, what: &[&str]) {
    let mut args = vec![s(tree()), s(libs)];
    args.extend_from_slice(what);
    let out = Command::new("bash")
        .arg(common::repo_root().join("scripts/openssl-load.sh"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl-load.sh {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// OpenSSL's tests `tests` (check-openssl.sh) with the libraries of `libs`.
fn openssl_tests(libs: &Path, tests: &[&str]) {
    let crypto = libs.join(LIBS[0]);
    let ssl = libs.join(LIBS[1]);
    let mut extra = vec!["--libcrypto", s(&crypto), "--libssl", s(&ssl)];
    extra.extend_from_slice(tests);
    check_script("check-openssl.sh", &[], &extra);
}

/// The command of issue 39: a certificate request signed with an RSA key (RSA blinding,
/// Montgomery multiplication in perlasm) must print the request.
fn issue_req(libs: &Path) {
    let tree = tree();
    let out = Command::new("timeout")
        .arg("60")
        .arg(tree.join("apps/openssl"))
        .args(["req", "-new", "-key"])
        .arg(tree.join("test/certs/ee-key.pem"))
        .arg("-config")
        .arg(tree.join("test/test.cnf"))
        .args(["-addext", "subjectAltName=DNS:example.com"])
        .env("LD_LIBRARY_PATH", libs)
        .env("OPENSSL_MODULES", tree.join("providers"))
        .env_remove("OPENSSL_CONF")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("-----BEGIN CERTIFICATE REQUEST-----"),
        "openssl req with the libraries of {}: {:?}\n{stdout}\n{}",
        libs.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Both libraries instrumented into `dir/instrumented` and trained with openssl-load.sh's
/// training load (which fails if anything does); returns the directory holding the two
/// counter files, named after the libraries.
fn train(dir: &Path) -> PathBuf {
    let inst = dir.join("instrumented");
    let profiles = dir.join("profiles");
    std::fs::create_dir_all(&inst).unwrap();
    std::fs::create_dir_all(&profiles).unwrap();
    for lib in LIBS {
        rivet(&[
            "instrument",
            s(&tree().join(lib)),
            "-o",
            s(&inst.join(lib)),
            "--profile",
            s(&profiles.join(lib)),
        ]);
    }
    load(&inst, &["train"]);
    issue_req(&inst);
    for lib in LIBS {
        assert!(
            profiles.join(lib).exists(),
            "training left no profile of {lib}"
        );
    }
    profiles
}

/// `rivet optimize` of both libraries with `options` into `out`; the corpus tests' markers
/// become an order file of libcrypto's hot functions, or inputs without relocations. Returns
/// the JSON summaries.
fn optimize_both(
    profiles: &Path,
    out: &Path,
    options: &[&str],
    order_file: &Path,
) -> Vec<serde_json::Value> {
    std::fs::create_dir_all(out).unwrap();
    LIBS.iter()
        .map(|lib| {
            let mut input = tree().join(lib);
            let mut args: Vec<String> = Vec::new();
            for &o in options {
                match o {
                    NO_RELOCATIONS => {
                        let stripped = out.join(format!("{lib}.norelocs"));
                        let st = Command::new("objcopy")
                            .arg("--remove-relocations=*")
                            .arg(&input)
                            .arg(&stripped)
                            .status()
                            .expect("objcopy is required (apt-get install binutils)");
                        assert!(st.success(), "objcopy --remove-relocations=* {lib}");
                        input = stripped;
                    }
                    ORDER_FILE => args.push(s(order_file).to_string()),
                    other => args.push(other.to_string()),
                }
            }
            let output = out.join(lib);
            let mut all = vec!["optimize", s(&input), "-o", s(&output), "--profile"];
            let profile = profiles.join(lib);
            all.push(s(&profile));
            all.extend(["--verify", "--json"]);
            all.extend(args.iter().map(String::as_str));
            serde_json::from_slice(&rivet(&all)).expect("JSON summary")
        })
        .collect()
}

/// Optimized from one profile of real use with every option set; the defaults pass the
/// training load and `SUITE`, every other output 40 handshakes, the certificate load and the
/// issue's `openssl req`.
#[test]
fn openssl_optimized_libraries_pass_openssls_tests() {
    let dir = scratch("real-openssl", "optimize");
    let profiles = train(&dir);
    let order_file = dir.join("order.txt");
    // Hot functions of RSA and TLS first, one the library lacks (reported, not fatal).
    std::fs::write(
        &order_file,
        "# hot first\nbn_mul_mont\nbn_sqr8x_mont\nBN_mod_exp_mont_consttime\nno_such_function\n",
    )
    .unwrap();
    for (i, options) in optimize_option_sets().iter().enumerate() {
        let out = dir.join(format!("opt{i}"));
        let summaries = optimize_both(&profiles, &out, options, &order_file);
        // The training ran thousands of libcrypto's functions and hundreds of libssl's.
        let rewritten: Vec<u64> = summaries
            .iter()
            .map(|j| j["rewritten"].as_u64().expect("rewritten count"))
            .collect();
        assert!(
            rewritten[0] > 1000 && rewritten[1] > 100,
            "{options:?}: only {rewritten:?} functions rewritten"
        );
        issue_req(&out);
        if full_suite() {
            openssl_tests(&out, &[]);
        }
        if options.is_empty() {
            load(&out, &["train"]);
            openssl_tests(&out, &SUITE);
        } else {
            load(&out, &["handshakes", "40"]);
            load(&out, &["certs", "1"]);
        }
    }
}

/// Every function moved to a random place, blocks shuffled: the layouts no profile would
/// choose, where a reference Rivet missed lands on the wrong code.
#[test]
fn openssl_shuffled_libraries_pass_openssls_tests() {
    let dir = scratch("real-openssl", "shuffle");
    for seed in [1, 2, 3] {
        let out = dir.join(format!("seed{seed}"));
        std::fs::create_dir_all(&out).unwrap();
        for lib in LIBS {
            let r =
                common::rewrite_shuffled(&tree().join(lib), &out.join(lib), seed, &["--verify"]);
            assert!(
                r.status.success(),
                "rewrite --layout shuffle --seed {seed} {lib}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
        }
        issue_req(&out);
        load(&out, &["handshakes", "20"]);
        load(&out, &["certs", "1"]);
        if full_suite() {
            openssl_tests(&out, &[]);
        } else if seed == 1 {
            openssl_tests(&out, &SUITE);
        }
    }
}
