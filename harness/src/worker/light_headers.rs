//! Which light headers a run compiles candidates' sources with first (`KBENCH_CUDA_HEADER`,
//! `KBENCH_CXX_HEADER`), and where the light C++ header lies: the choice is read and checked
//! here, once, for the build pool's folder keys (`build`), the precompiled-header helper
//! (`pch`), the workers' environment and the records. The worker does the building
//! (`kbench_worker/light_build.py`).
//!
//! May import: `worker::python` (the embedded worker files).

use kbench_suites::sha256_hex;

/// `off`: no precompiled header is made or used (`worker::pch`).
pub(crate) const PCH_ENV: &str = "KBENCH_PCH";

/// `light`: a CUDA source's `torch/extension.h` is compiled as `torch/types.h` first, and
/// against torch's own where that fails (`kbench_worker/cuda_header.py` says why and what it
/// could change); unset, empty or `full`: torch's own, as without kbench.
pub(crate) const CUDA_HEADER_ENV: &str = "KBENCH_CUDA_HEADER";

/// `light`: a C++ source's `torch/extension.h` (the binding every `load_inline` compiles) is
/// compiled as `torch/types.h` + `torch/python.h` first, and against torch's own where that
/// fails (`kbench_worker/cxx_header.py`); unset, empty or `full`: torch's own.
pub(crate) const CXX_HEADER_ENV: &str = "KBENCH_CXX_HEADER";

/// Which light headers a run compiles candidates' sources with first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LightHeaders {
    /// [`CUDA_HEADER_ENV`].
    pub(crate) cuda: bool,
    /// [`CXX_HEADER_ENV`].
    pub(crate) cxx: bool,
}

/// The light headers `KBENCH_CUDA_HEADER` and `KBENCH_CXX_HEADER` ask for; an error naming
/// the variable for any value but `light`, `full` or empty (a typo must not silently build
/// the other way).
pub(crate) fn light_headers() -> anyhow::Result<LightHeaders> {
    let h = LightHeaders {
        cuda: header_choice(
            CUDA_HEADER_ENV,
            std::env::var(CUDA_HEADER_ENV).ok().as_deref(),
            "a CUDA source's torch/extension.h compiled as torch/types.h first",
        )?,
        cxx: header_choice(
            CXX_HEADER_ENV,
            std::env::var(CXX_HEADER_ENV).ok().as_deref(),
            "a C++ source's torch/extension.h compiled as torch/types.h + torch/python.h first",
        )?,
    };
    if h.cxx && std::env::var(PCH_ENV).is_ok_and(|v| v == "off") {
        // The light header lies in the precompiled headers' folder: without it every build
        // would use torch's header while the run said light.
        anyhow::bail!(
            "{CXX_HEADER_ENV}=light needs kbench's precompiled-header folder, which {}=off \
             turns off: unset one of them",
            PCH_ENV
        );
    }
    Ok(h)
}

/// What runs and records say of the two choices, (CUDA, C++): `light`, or nothing for torch's
/// own header (an invalid value was refused where the run started).
pub(crate) fn light_header_labels() -> (Option<String>, Option<String>) {
    let h = light_headers().unwrap_or_default();
    let label = |light: bool| light.then(|| "light".to_string());
    (label(h.cuda), label(h.cxx))
}

fn header_choice(var: &str, value: Option<&str>, light: &str) -> anyhow::Result<bool> {
    match value {
        None | Some("" | "full") => Ok(false),
        Some("light") => Ok(true),
        Some(other) => anyhow::bail!(
            "{var}={other:?} is not a choice: use light ({light}) or full (torch's own, the \
             default)"
        ),
    }
}

/// The folder of the light C++ header and its precompiled forms, inside [`Pch::dir`]
/// (`kbench_worker/cxx_header.py`, `LIGHT`), made when `KBENCH_CXX_HEADER=light`: named after
/// that file's bytes, as the worker names it.
pub(crate) fn light_folder_name() -> String {
    let source = super::python::WORKER_FILES
        .iter()
        .find(|(name, _)| *name == "cxx_header.py")
        .map_or("", |(_, text)| text);
    format!("light-{}", &sha256_hex(source.as_bytes())[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_choice_is_light_or_full_and_anything_else_is_refused() {
        for var in [CUDA_HEADER_ENV, CXX_HEADER_ENV] {
            assert!(!header_choice(var, None, "x").unwrap());
            assert!(!header_choice(var, Some(""), "x").unwrap());
            assert!(!header_choice(var, Some("full"), "x").unwrap());
            assert!(header_choice(var, Some("light"), "x").unwrap());
            let err = header_choice(var, Some("lite"), "x")
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("{var}=\"lite\"")), "{err}");
        }
    }

    #[test]
    fn the_light_folder_is_named_after_the_light_header_module() {
        let name = light_folder_name();
        let hex = name.strip_prefix("light-").unwrap();
        assert_eq!(hex.len(), 12, "{name}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
        // The module's bytes, not nothing: the embedded file is found.
        assert_ne!(hex, &sha256_hex(b"")[..12]);
    }
}
