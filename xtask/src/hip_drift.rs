//! Part of `cargo xtask bindgen --check`: does what rocm-sys binds from HIP 5.2's headers still
//! hold for the HIP 6.x headers of the `cargo xtask amd-toolchain` chroot?
//!
//! rocm-sys is generated once, from 5.2, and loads whatever `libamdhip64` the user has (5.x to
//! 7.x). A signature or enum value that changed since 5.2 would be a silent ABI mismatch, so the
//! binding is generated again in memory from the newer headers, with the same allowlist, and
//! compared where it matters: the `HipLibrary` signatures, the constants the runtime uses, the
//! hand-written `HipExtras` signatures and the device-properties layouts of `hip_facts`.
//! Comparisons are of types only (parameter names, paths and typedef names are normalised
//! away), since only the ABI matters.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use rocm_sys::HipExtras;
use rocm_sys::hip_facts::{HIP_ATTRIBUTES, PROPS_LAYOUTS};

use crate::bindgen::{Binding, HIP, builder};
use crate::{Result, amd_toolchain, workspace_root};

/// Constants HIP renamed after 5.2, compared by value under the new name (and listed in the
/// output, so a rename is never silent). `hipDeviceAttributeGcnArch` became
/// `hipDeviceAttributeUnused4` in 6.0: no release answers it (`hip_facts::HIP_ATTRIBUTES` says
/// so), and only its value, which the runtime passes, must stay.
const RENAMED: &[(&str, &str)] = &[("hipDeviceAttributeGcnArch", "hipDeviceAttributeUnused4")];

/// A `rocm_sys::HipExtras` entry point and what the newer headers declare for it.
struct Extra {
    symbol: &'static str,
    /// The declaration of `symbol` in 6.x headers.
    declared: &'static str,
    /// The properties struct it fills: rocm-sys passes an opaque buffer sized from
    /// `hip_facts::PROPS_LAYOUTS`, so the pointer compares as `*mut c_void` and the layout is
    /// checked instead.
    props: Option<&'static str>,
    /// The field's type as the compiler names it (`type_name`), so what is checked is the
    /// struct itself, not a copy of it here.
    ours: fn() -> &'static str,
}

const EXTRAS: &[Extra] = &[
    // 6.x headers make `hipGetDeviceProperties` a macro for the R0600 call; the unversioned
    // symbol the library still exports is clr's forwarder to `hipGetDevicePropertiesR0000`
    // (declared in hip_deprecated.h), which fills the 5.x layout.
    Extra {
        symbol: "hipGetDeviceProperties",
        declared: "hipGetDevicePropertiesR0000",
        props: Some("hipDeviceProp_tR0000"),
        ours: || field_type(|e: &HipExtras| &e.get_device_properties),
    },
    Extra {
        symbol: "hipGetDevicePropertiesR0600",
        declared: "hipGetDevicePropertiesR0600",
        props: Some("hipDeviceProp_tR0600"),
        ours: || field_type(|e: &HipExtras| &e.get_device_properties_r0600),
    },
    Extra {
        symbol: "hipMallocAsync",
        declared: "hipMallocAsync",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.malloc_async),
    },
    Extra {
        symbol: "hipFreeAsync",
        declared: "hipFreeAsync",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.free_async),
    },
    Extra {
        symbol: "hipStreamBeginCapture",
        declared: "hipStreamBeginCapture",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.stream_begin_capture),
    },
    Extra {
        symbol: "hipStreamEndCapture",
        declared: "hipStreamEndCapture",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.stream_end_capture),
    },
    Extra {
        symbol: "hipStreamIsCapturing",
        declared: "hipStreamIsCapturing",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.stream_is_capturing),
    },
    Extra {
        symbol: "hipGraphInstantiate",
        declared: "hipGraphInstantiate",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.graph_instantiate),
    },
    Extra {
        symbol: "hipGraphLaunch",
        declared: "hipGraphLaunch",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.graph_launch),
    },
    Extra {
        symbol: "hipGraphExecDestroy",
        declared: "hipGraphExecDestroy",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.graph_exec_destroy),
    },
    Extra {
        symbol: "hipGraphDestroy",
        declared: "hipGraphDestroy",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.graph_destroy),
    },
    Extra {
        symbol: "hipModuleLaunchCooperativeKernel",
        declared: "hipModuleLaunchCooperativeKernel",
        props: None,
        ours: || field_type(|e: &HipExtras| &e.module_launch_cooperative_kernel),
    },
];

/// The declarations of [`EXTRAS`] (each one's `declared` name), generated like the HIP binding
/// (same newtype enums, so the types compare), with layout assertions for the properties
/// structs.
fn declared_binding() -> Binding {
    let functions: Vec<&'static str> = EXTRAS.iter().map(|e| e.declared).collect();
    Binding {
        file: "",
        header: "hip.h",
        library: "Declared",
        functions: functions.leak(),
        newtype_enums: HIP.newtype_enums,
        types: &["hipDeviceProp_tR0000", "hipDeviceProp_tR0600"],
        vars: &[],
    }
}

fn field_type<T>(_: fn(&HipExtras) -> &T) -> &'static str {
    std::any::type_name::<T>()
}

/// One item that differs.
#[derive(Debug, PartialEq)]
struct Drift {
    item: String,
    /// Where rocm-sys's form comes from (`HIP 5.2`, `rocm_sys::HipExtras`, ..).
    source: String,
    ours: String,
    theirs: String,
}

/// Compares `hip52` (the fresh 5.2 generation of `hip.rs`, from `include52`) with the chroot's
/// headers; prints one line when those are missing.
pub fn check(hip52: &str, include52: &Path) -> Result<()> {
    let chroot = amd_toolchain::chroot_dir();
    let include = chroot.join("usr/include");
    if !include.join("hip/hip_runtime_api.h").is_file() {
        println!(
            "HIP 6.x drift check skipped: no HIP headers in {} (`cargo xtask amd-toolchain` makes that chroot)",
            include.display()
        );
        return Ok(());
    }
    let (old_v, new_v) = (header_version(include52), header_version(&include));
    let wrapper = workspace_root().join("crates/rocm-sys/wrapper/hip.h");
    // The chroot as sysroot: its C library headers go with its HIP headers (forky's stdint.h
    // needs its own bits/), and none of the host's 5.2 headers can leak in.
    let sysroot = format!("--sysroot={}", chroot.display());
    let generate = |binding: &Binding| builder(binding, &wrapper, &include).clang_arg(&sysroot);
    let failed = |e| format!("bindgen failed on the HIP {new_v} headers in {}: {e}", include.display());
    let old = Generated::parse(hip52, HIP.library);
    let new = Generated::parse(&generate(&HIP).generate().map_err(failed)?.to_string(), HIP.library);
    // hip_deprecated.h goes last: bindgen `-include`s the earlier headers, so it sees the
    // types of hip_runtime_api.h that it builds on.
    let declared_binding = declared_binding();
    let declared_text = generate(&declared_binding)
        .header(include.join("hip/hip_deprecated.h").to_string_lossy())
        .layout_tests(true)
        .generate()
        .map_err(failed)?
        .to_string();
    let declared = Generated::parse(&declared_text, declared_binding.library);

    let source = format!("HIP {old_v}");
    let mut drift = Vec::new();
    compare_functions(&source, &old, &new, &mut drift);
    let used = used_constants(&old.consts)?;
    let renames = compare_constants(&source, &old.consts, &new.consts, &used, &mut drift);
    for extra in EXTRAS {
        let ours = signature(strip_option((extra.ours)()), &HashMap::new(), None);
        let theirs = declared
            .fields
            .get(extra.declared)
            .map_or("absent".into(), |t| declared.signature(t, extra.props));
        if ours != theirs {
            let item = format!("HipExtras {} (declared as {})", extra.symbol, extra.declared);
            drift.push(Drift { item, source: "rocm_sys::HipExtras".into(), ours, theirs });
        }
    }
    for layout in PROPS_LAYOUTS {
        let props = EXTRAS.iter().find(|e| e.symbol == layout.symbol).and_then(|e| e.props);
        let props = props.ok_or_else(|| format!("no properties struct known for {}", layout.symbol))?;
        let size = layout_number(&declared_text, &format!("Size of {props}"));
        let at = layout_number(&declared_text, &format!("Offset of field: {props}::gcnArchName"));
        if (size, at) != (Some(layout.size), Some(layout.gcn_arch_name)) {
            let form = |size: Option<usize>, at: Option<usize>| {
                let n = |v: Option<usize>| v.map_or("?".into(), |v| v.to_string());
                format!("sizeof {}, gcnArchName at {}", n(size), n(at))
            };
            drift.push(Drift {
                item: format!("{props} (filled by {})", layout.symbol),
                source: "hip_facts::PROPS_LAYOUTS".into(),
                ours: form(Some(layout.size), Some(layout.gcn_arch_name)),
                theirs: form(size, at),
            });
        }
    }

    for (from, to, value) in &renames {
        println!(
            "HIP {new_v} renames {from} to {to} (known, documented in hip_drift::RENAMED); both are {value}"
        );
    }
    if !drift.is_empty() {
        let lines: Vec<String> = drift
            .iter()
            .map(|d| format!("  {}: {} has `{}`, HIP {new_v} has `{}`", d.item, d.source, d.ours, d.theirs))
            .collect();
        return Err(format!(
            "what rocm-sys binds drifted between HIP {old_v} and the HIP {new_v} headers in {}:\n{}",
            include.display(),
            lines.join("\n")
        )
        .into());
    }
    println!(
        "HIP {new_v} headers agree with the HIP {old_v} bindings: {} HipLibrary signatures, {} constants, {} HipExtras signatures, {} properties layouts",
        old.fields.len(),
        used.len(),
        EXTRAS.len(),
        PROPS_LAYOUTS.len()
    );
    Ok(())
}

/// `HipExtras` fields are `Option`s of the entry point's type.
fn strip_option(type_name: &str) -> &str {
    type_name.strip_prefix("core::option::Option<").and_then(|t| t.strip_suffix('>')).unwrap_or(type_name)
}

/// Compares every entry point of `old`'s loader struct with `new`'s.
fn compare_functions(source: &str, old: &Generated, new: &Generated, drift: &mut Vec<Drift>) {
    for (name, ty) in &old.fields {
        let ours = old.signature(ty, None);
        let theirs = new.fields.get(name).map_or("absent".into(), |t| new.signature(t, None));
        if ours != theirs {
            drift.push(Drift { item: format!("HipLibrary::{name}"), source: source.into(), ours, theirs });
        }
    }
}

/// Compares the values of `used` constants; returns the known renames it followed.
fn compare_constants(
    source: &str,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    used: &BTreeSet<String>,
    drift: &mut Vec<Drift>,
) -> Vec<(String, String, String)> {
    let mut renames = Vec::new();
    for name in used {
        let old_value = old.get(name).map_or("absent", String::as_str);
        let (theirs, renamed_to) = match (new.get(name), RENAMED.iter().find(|(from, _)| from == name)) {
            (Some(v), _) => (v.clone(), None),
            (None, Some((_, to))) => (new.get(*to).map_or(format!("{to} absent"), |v| v.clone()), Some(*to)),
            (None, None) => ("absent".into(), None),
        };
        if theirs != old_value {
            let theirs = renamed_to.map_or(theirs.clone(), |to| format!("{to} = {theirs}"));
            drift.push(Drift { item: name.clone(), source: source.into(), ours: old_value.into(), theirs });
        } else if let Some(to) = renamed_to {
            renames.push((name.clone(), to.to_string(), theirs));
        }
    }
    renames
}

/// The constants rocmforge relies on: every attribute of `hip_facts::HIP_ATTRIBUTES`, and every
/// bound constant that rocm-runtime's sources or rocm-sys's hand-written ones name (in code or
/// comments: over-including is cheap, missing one is not).
fn used_constants(bound: &BTreeMap<String, String>) -> Result<BTreeSet<String>> {
    let root = workspace_root().join("crates");
    let mut files = vec![root.join("rocm-sys/src/hip_facts.rs"), root.join("rocm-sys/src/load.rs")];
    let mut dirs = vec![root.join("rocm-runtime/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("reading {}: {e}", dir.display()))? {
            let path = entry?.path();
            match path.extension() {
                _ if path.is_dir() => dirs.push(path),
                Some(ext) if ext == "rs" => files.push(path),
                _ => {}
            }
        }
    }
    let mut used: BTreeSet<String> = HIP_ATTRIBUTES.iter().map(|a| a.name.to_string()).collect();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        used.extend(words.filter(|w| bound.contains_key(*w)).map(str::to_string));
    }
    Ok(used)
}

/// What the comparison needs from one generated binding.
struct Generated {
    /// The loader struct's fields: symbol -> its `unsafe extern "C" fn(..)` type.
    fields: BTreeMap<String, String>,
    /// `pub type` aliases: name -> type.
    aliases: HashMap<String, String>,
    /// `pub const` items (newtype-enum constants and `#define`s): name -> value.
    consts: BTreeMap<String, String>,
}

impl Generated {
    fn parse(text: &str, library: &str) -> Generated {
        // rustfmt's line breaks are noise here.
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut fields = BTreeMap::new();
        if let Some(at) = text.find(&format!("pub struct {library} {{")) {
            let body = &text[at..];
            let body = &body[body.find('{').unwrap_or(0) + 1..body.find('}').unwrap_or(body.len())];
            for field in split_top(body, ',') {
                // `__library` is private; the entry points are `pub`.
                if let Some((name, ty)) = field.trim().strip_prefix("pub ").and_then(|f| f.split_once(':')) {
                    fields.insert(name.trim().to_string(), ty.trim().to_string());
                }
            }
        }
        let items = |keyword: &str| {
            let keyword = format!("pub {keyword} ");
            text.split(&keyword)
                .skip(1)
                .filter_map(|item| {
                    let item = &item[..item.find(';')?];
                    let (head, value) = item.split_once(" = ")?;
                    let name = head.split(':').next()?.trim();
                    name.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                        .then(|| (name.to_string(), value.trim()))
                })
                .collect::<Vec<_>>()
        };
        let aliases = items("type").into_iter().map(|(n, v)| (n, v.to_string())).collect();
        // `hipError_t(600)` -> `600`.
        let consts = items("const")
            .into_iter()
            .map(|(n, v)| {
                let inner = v.split_once('(').and_then(|(_, rest)| rest.strip_suffix(')'));
                (n, inner.unwrap_or(v).trim().to_string())
            })
            .collect();
        Generated { fields, aliases, consts }
    }

    /// [`signature`] with this binding's typedefs; `opaque` names a struct passed as `c_void`.
    fn signature(&self, ty: &str, opaque: Option<&str>) -> String {
        signature(ty, &self.aliases, opaque)
    }
}

/// `unsafe extern "C" fn(stream: hipStream_t, flags: ::std::os::raw::c_uint) -> hipError_t` as
/// `fn(*mut ihipStream_t, u32) -> hipError_t`: parameter names and paths dropped, typedefs and C
/// integer names resolved, so two spellings of one ABI compare equal. Unparsable text is kept
/// whole, so it can only compare unequal.
fn signature(ty: &str, aliases: &HashMap<String, String>, opaque: Option<&str>) -> String {
    let ty = ty.split_whitespace().collect::<Vec<_>>().join(" ");
    fn_type(&ty, aliases, opaque).unwrap_or(ty)
}

fn fn_type(ty: &str, aliases: &HashMap<String, String>, opaque: Option<&str>) -> Option<String> {
    let inner = ty.strip_prefix("unsafe extern \"C\" fn")?.trim_start().strip_prefix('(')?;
    let mut pieces = split_top(inner, ')');
    let (list, after) = (pieces.next()?, pieces.next()?);
    let params: Vec<String> = split_top(list, ',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| type_of(strip_name(p), aliases, opaque))
        .collect();
    let ret = after.trim().strip_prefix("->").map_or("()".into(), |r| type_of(r, aliases, opaque));
    Some(format!("fn({}) -> {ret}", params.join(", ")))
}

/// `name: type` -> `type`; a path's `::` is no parameter name.
fn strip_name(param: &str) -> &str {
    match param.split_once(':') {
        Some((name, ty))
            if !ty.starts_with(':')
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            ty.trim()
        }
        _ => param,
    }
}

fn type_of(ty: &str, aliases: &HashMap<String, String>, opaque: Option<&str>) -> String {
    use std::any::type_name;
    use std::os::raw::*;
    let c_names = [
        ("c_char", type_name::<c_char>()),
        ("c_schar", type_name::<c_schar>()),
        ("c_uchar", type_name::<c_uchar>()),
        ("c_short", type_name::<c_short>()),
        ("c_ushort", type_name::<c_ushort>()),
        ("c_int", type_name::<c_int>()),
        ("c_uint", type_name::<c_uint>()),
        ("c_long", type_name::<c_long>()),
        ("c_ulong", type_name::<c_ulong>()),
        ("c_longlong", type_name::<c_longlong>()),
        ("c_ulonglong", type_name::<c_ulonglong>()),
    ];
    let words = ty.split_whitespace().map(|word| {
        let word = word.rsplit("::").next().unwrap_or(word);
        if opaque == Some(word) {
            "c_void".to_string()
        } else if let Some((_, primitive)) = c_names.iter().find(|(c, _)| *c == word) {
            primitive.to_string()
        } else if let Some(alias) = aliases.get(word) {
            type_of(alias, aliases, opaque)
        } else {
            word.to_string()
        }
    });
    words.collect::<Vec<_>>().join(" ")
}

/// The pieces of `text` between `sep`s outside brackets; with `)` as `sep`, the text up to the
/// bracket that closes an already open one.
fn split_top(text: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut depth = 0i32;
    let mut prev = ' ';
    let mut start = 0;
    let mut pieces = Vec::new();
    for (i, c) in text.char_indices() {
        if c == sep && depth == 0 {
            pieces.push(&text[start..i]);
            start = i + c.len_utf8();
        } else if matches!(c, '(' | '[' | '<') {
            depth += 1;
        } else if matches!(c, ')' | ']') || (c == '>' && prev != '-') {
            depth -= 1;
        }
        prev = c;
    }
    pieces.push(&text[start..]);
    pieces.into_iter()
}

/// A number from bindgen's layout assertions, which read
/// `["Size of S"][::std::mem::size_of::<S>() - 1472usize];`.
fn layout_number(text: &str, label: &str) -> Option<usize> {
    let rest = &text[text.find(&format!("[\"{label}\"]"))?..];
    let rest = &rest[rest.find("- ")? + 2..];
    rest[..rest.find("usize")?].trim().parse().ok()
}

/// `major.minor` from `hip/hip_version.h` below `include`.
fn header_version(include: &Path) -> String {
    let text = std::fs::read_to_string(include.join("hip/hip_version.h")).unwrap_or_default();
    let define = |name: &str| {
        let prefix = format!("#define {name} ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).map_or("?", str::trim).to_string()
    };
    format!("{}.{}", define("HIP_VERSION_MAJOR"), define("HIP_VERSION_MINOR"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loader struct, a typedef and constants as bindgen writes them.
    const GENERATED: &str = r#"
pub const hipStreamNonBlocking: u32 = 1;
impl hipError_t {
    pub const hipSuccess: hipError_t = hipError_t(0);
    pub const hipErrorNotReady: hipError_t = hipError_t(600);
}
impl<S> __BindgenBitfieldUnit<S> {
    pub const fn new(storage: S) -> Self {
        Self { storage }
    }
}
pub type hipStream_t = *mut ihipStream_t;
pub struct HipLibrary {
    __library: ::libloading::Library,
    pub hipInit: unsafe extern "C" fn(flags: ::std::os::raw::c_uint) -> hipError_t,
    pub hipMemsetD8Async: unsafe extern "C" fn(
        dest: hipDeviceptr_t,
        value: ::std::os::raw::c_uchar,
        count: usize,
        stream: hipStream_t,
    ) -> hipError_t,
}
"#;

    fn generated(text: &str) -> Generated {
        Generated::parse(text, "HipLibrary")
    }

    #[test]
    fn generated_text_is_read_whatever_its_line_breaks() {
        let g = generated(GENERATED);
        assert_eq!(g.fields.keys().collect::<Vec<_>>(), ["hipInit", "hipMemsetD8Async"]);
        assert_eq!(g.aliases["hipStream_t"], "*mut ihipStream_t");
        let consts: Vec<_> = g.consts.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(consts, [("hipErrorNotReady", "600"), ("hipStreamNonBlocking", "1"), ("hipSuccess", "0")]);
        assert_eq!(
            g.signature(&g.fields["hipMemsetD8Async"], None),
            "fn(hipDeviceptr_t, u8, usize, *mut ihipStream_t) -> hipError_t"
        );
    }

    #[test]
    fn signatures_compare_by_type_only() {
        let no_aliases = HashMap::new();
        let sig = |ty: &str| signature(ty, &no_aliases, None);
        // Parameter names, paths and line breaks are not part of the ABI.
        assert_eq!(
            sig("unsafe extern \"C\" fn(a: *mut ::std::os::raw::c_int,\n b: usize,) -> hipError_t"),
            sig("unsafe extern \"C\" fn(*mut i32, usize) -> rocm_sys::hip::hipError_t"),
        );
        assert_eq!(sig("unsafe extern \"C\" fn(x: ::std::os::raw::c_int)"), "fn(i32) -> ()");
        assert_ne!(sig("unsafe extern \"C\" fn(x: u32)"), sig("unsafe extern \"C\" fn(x: *mut u32)"));
        // Typedefs resolve, so a renamed typedef of the same type is no drift.
        let aliases = HashMap::from([
            ("hipStream_t".to_string(), "*mut ihipStream_t".to_string()),
            ("hipDeviceptr_t".to_string(), "*mut ::std::os::raw::c_void".to_string()),
        ]);
        assert_eq!(
            signature("unsafe extern \"C\" fn(s: hipStream_t, p: hipDeviceptr_t)", &aliases, None),
            "fn(*mut ihipStream_t, *mut c_void) -> ()"
        );
        // The properties struct of an opaque buffer compares as `c_void`.
        let props = "unsafe extern \"C\" fn(prop: *mut hipDeviceProp_tR0600, id: ::std::os::raw::c_int) -> hipError_t";
        assert_eq!(
            signature(props, &aliases, Some("hipDeviceProp_tR0600")),
            "fn(*mut c_void, i32) -> hipError_t"
        );
        assert_eq!(signature("not a function", &aliases, None), "not a function");
    }

    #[test]
    fn hip_extras_types_read_like_the_generated_declarations() {
        let aliases = HashMap::from([("hipStream_t".to_string(), "*mut ihipStream_t".to_string())]);
        let declared = "unsafe extern \"C\" fn(dev_ptr: *mut *mut ::std::os::raw::c_void, size: usize, stream: hipStream_t) -> hipError_t";
        let ours = (EXTRAS.iter().find(|e| e.symbol == "hipMallocAsync").unwrap().ours)();
        assert_eq!(signature(strip_option(ours), &HashMap::new(), None), signature(declared, &aliases, None));
    }

    #[test]
    fn a_changed_signature_or_a_missing_entry_point_is_drift() {
        let old = generated(GENERATED);
        // Renamed parameters: no drift.
        let renamed = GENERATED.replace("flags:", "f:").replace("dest:", "dst:");
        let mut drift = Vec::new();
        compare_functions("HIP 5.2", &old, &generated(&renamed), &mut drift);
        assert_eq!(drift, []);
        let changed = GENERATED.replace("value: ::std::os::raw::c_uchar", "value: ::std::os::raw::c_int");
        let missing = changed.replace("pub hipInit", "pub hipInit2");
        compare_functions("HIP 5.2", &old, &generated(&missing), &mut drift);
        let drifted = |item: &str, ours: &str, theirs: &str| Drift {
            item: item.into(),
            source: "HIP 5.2".into(),
            ours: ours.into(),
            theirs: theirs.into(),
        };
        assert_eq!(
            drift,
            [
                drifted("HipLibrary::hipInit", "fn(u32) -> hipError_t", "absent"),
                drifted(
                    "HipLibrary::hipMemsetD8Async",
                    "fn(hipDeviceptr_t, u8, usize, *mut ihipStream_t) -> hipError_t",
                    "fn(hipDeviceptr_t, i32, usize, *mut ihipStream_t) -> hipError_t"
                ),
            ]
        );
    }

    #[test]
    fn constants_compare_by_value_following_known_renames() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
        };
        let old = map(&[("a", "1"), ("b", "2"), ("c", "3"), ("hipDeviceAttributeGcnArch", "10003")]);
        let used: BTreeSet<String> = old.keys().cloned().collect();
        let mut drift = Vec::new();
        let new = map(&[("a", "1"), ("b", "5"), ("hipDeviceAttributeUnused4", "10003")]);
        let renames = compare_constants("HIP 5.2", &old, &new, &used, &mut drift);
        assert_eq!(
            renames,
            [("hipDeviceAttributeGcnArch".into(), "hipDeviceAttributeUnused4".into(), "10003".into())]
        );
        let items: Vec<_> =
            drift.iter().map(|d| (d.item.as_str(), d.ours.as_str(), d.theirs.as_str())).collect();
        assert_eq!(items, [("b", "2", "5"), ("c", "3", "absent")]);
        // A renamed constant whose value moved is drift too.
        drift.clear();
        let new = map(&[("a", "1"), ("b", "2"), ("c", "3"), ("hipDeviceAttributeUnused4", "10004")]);
        assert_eq!(compare_constants("HIP 5.2", &old, &new, &used, &mut drift), []);
        assert_eq!(drift[0].theirs, "hipDeviceAttributeUnused4 = 10004");
    }

    #[test]
    fn every_constant_the_runtime_names_is_compared() {
        let old = Generated::parse(include_str!("../../crates/rocm-sys/src/hip.rs"), HIP.library);
        let used = used_constants(&old.consts).unwrap();
        for name in [
            "hipSuccess",
            "hipErrorNotReady",
            "HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK",
            "HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
            "hipStreamNonBlocking",
            "hipEventDefault",
            "hipEventDisableTiming",
            "hipDeviceAttributeGcnArch",
        ] {
            assert!(used.contains(name), "{name}");
        }
        assert_eq!(old.fields.len(), HIP.functions.len());
    }

    #[test]
    fn layout_numbers_come_from_the_layout_assertions() {
        let text = r#"const _: () = {
    ["Size of hipDeviceProp_tR0600"][::std::mem::size_of::<hipDeviceProp_tR0600>() - 1472usize];
    ["Offset of field: hipDeviceProp_tR0600::gcnArchName"]
        [::std::mem::offset_of!(hipDeviceProp_tR0600, gcnArchName) - 1160usize];
};"#;
        assert_eq!(layout_number(text, "Size of hipDeviceProp_tR0600"), Some(1472));
        assert_eq!(layout_number(text, "Offset of field: hipDeviceProp_tR0600::gcnArchName"), Some(1160));
        assert_eq!(layout_number(text, "Size of hipDeviceProp_tR0000"), None);
    }
}
