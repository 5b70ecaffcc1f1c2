//! Code-object preflight for AMD: before a module is loaded, check that the image has code for
//! the device's full target ID. A missing build then surfaces as an error naming the device's
//! target, the targets present and the command that builds for it, instead of a
//! `hipErrorNoBinaryForGpu` from the loader.
//!
//! An image is what `hipcc --genco` writes (a clang offload bundle) or a bare AMDGPU ELF. This is
//! parsing only: no FFI, no device. The matching rule is the HIP runtime's own (clr,
//! `hip_code_object.cpp`): a code object for processor P runs on a device of processor P when
//! every feature it pins (`sramecc`, `xnack`) equals the device's setting, a feature it leaves
//! unspecified running under either; a generic target (`gfx11-generic`) runs on its family.
//! Given the running HIP release, an entry also has to be of a code object version that release
//! loads (`rocm_sys::hip_facts::CODE_OBJECT_VERSIONS`: v6, and so every generic target, from
//! HIP 6.4); an image whose entries for the device are all too new says so, naming the release.

use std::fmt;
use std::str::FromStr;

use rocm_sys::hip_facts::{self, HipVersion};

/// The command that builds the kernels for AMD, and the variable that names its targets.
pub const BUILD_COMMAND: &str = "cargo xtask kernels --platform amd";
pub const ARCHS_ENV: &str = "ROCMFORGE_AMD_ARCHS";

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// `--offload-compress` bundles: the entry table is inside the compressed payload.
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";
/// The triple of HSA code objects as bundle entry IDs spell it, up to the environment component.
const AMDHSA_TRIPLE: &str = "amdgcn-amd-amdhsa-";

const ELF_MAGIC: &[u8] = b"\x7fELF";
const ELF64_HEADER_LEN: usize = 64;
const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
const EF_AMDGPU_MACH: u32 = 0x0ff;
const EF_AMDGPU_FEATURE_XNACK_V4: u32 = 0x300;
const EF_AMDGPU_FEATURE_SRAMECC_V4: u32 = 0xc00;
const EF_AMDGPU_GENERIC_VERSION_OFFSET: u32 = 24;

/// `EF_AMDGPU_MACH_AMDGCN_*` values of LLVM's `BinaryFormat/ELF.h`. 0x040 (gfx940) and 0x04b
/// (gfx941) are "reserved" in LLVM's main branch since those processors were dropped, but
/// objects built by LLVM 20 and older carry them.
const MACHINES: &[(u32, &str)] = &[
    (0x020, "gfx600"),
    (0x021, "gfx601"),
    (0x022, "gfx700"),
    (0x023, "gfx701"),
    (0x024, "gfx702"),
    (0x025, "gfx703"),
    (0x026, "gfx704"),
    (0x028, "gfx801"),
    (0x029, "gfx802"),
    (0x02a, "gfx803"),
    (0x02b, "gfx810"),
    (0x02c, "gfx900"),
    (0x02d, "gfx902"),
    (0x02e, "gfx904"),
    (0x02f, "gfx906"),
    (0x030, "gfx908"),
    (0x031, "gfx909"),
    (0x032, "gfx90c"),
    (0x033, "gfx1010"),
    (0x034, "gfx1011"),
    (0x035, "gfx1012"),
    (0x036, "gfx1030"),
    (0x037, "gfx1031"),
    (0x038, "gfx1032"),
    (0x039, "gfx1033"),
    (0x03a, "gfx602"),
    (0x03b, "gfx705"),
    (0x03c, "gfx805"),
    (0x03d, "gfx1035"),
    (0x03e, "gfx1034"),
    (0x03f, "gfx90a"),
    (0x040, "gfx940"),
    (0x041, "gfx1100"),
    (0x042, "gfx1013"),
    (0x043, "gfx1150"),
    (0x044, "gfx1103"),
    (0x045, "gfx1036"),
    (0x046, "gfx1101"),
    (0x047, "gfx1102"),
    (0x048, "gfx1200"),
    (0x04a, "gfx1151"),
    (0x04b, "gfx941"),
    (0x04c, "gfx942"),
    (0x04e, "gfx1201"),
    (0x04f, "gfx950"),
    (0x051, "gfx9-generic"),
    (0x052, "gfx10-1-generic"),
    (0x053, "gfx10-3-generic"),
    (0x054, "gfx11-generic"),
    (0x055, "gfx1152"),
    (0x058, "gfx1153"),
    (0x059, "gfx12-generic"),
    (0x05f, "gfx9-4-generic"),
];

/// A generic processor and the processors its code runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenericTarget {
    pub name: &'static str,
    pub members: &'static [&'static str],
}

/// LLVM's "AMDGPU Generic Processors" table (AMDGPUUsage, LLVM 20.1). The HIP runtime keeps its
/// own copy, which may lag: some releases map neither gfx940/gfx941 nor gfx1152/gfx1153.
pub const GENERIC_TARGETS: &[GenericTarget] = &[
    GenericTarget {
        name: "gfx9-generic",
        members: &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"],
    },
    GenericTarget { name: "gfx9-4-generic", members: &["gfx940", "gfx941", "gfx942", "gfx950"] },
    GenericTarget { name: "gfx10-1-generic", members: &["gfx1010", "gfx1011", "gfx1012", "gfx1013"] },
    GenericTarget {
        name: "gfx10-3-generic",
        members: &["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"],
    },
    GenericTarget {
        name: "gfx11-generic",
        members: &["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"],
    },
    GenericTarget { name: "gfx12-generic", members: &["gfx1200", "gfx1201"] },
];

/// Generic processors exist only in code object v6 and later (AMDGPUUsage).
pub const GENERIC_MIN_CODE_OBJECT_VERSION: u8 = 6;

/// One target feature's setting in a target ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Feature {
    /// Not named in the target ID. In a code object: built to run under either setting. In a
    /// device's target ID: the device does not have the feature.
    #[default]
    Any,
    On,
    Off,
}

impl Feature {
    /// Decodes a V4+ `e_flags` feature field. Both "unsupported" (0) and "any" (1) leave the
    /// feature out of the target ID, as the HIP runtime reads them.
    fn from_v4_field(field: u32) -> Feature {
        match field {
            2 => Feature::Off,
            3 => Feature::On,
            _ => Feature::Any,
        }
    }

    fn admits(self, device: Feature) -> bool {
        self == Feature::Any || self == device
    }
}

/// An AMDGPU target ID: a processor and its `sramecc` and `xnack` settings, e.g.
/// `gfx90a:sramecc+:xnack-`, `gfx942`, `gfx11-generic`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TargetId {
    processor: String,
    pub sramecc: Feature,
    pub xnack: Feature,
}

impl TargetId {
    /// `gfx90a`, `gfx11-generic`: the target ID without its features.
    pub fn processor(&self) -> &str {
        &self.processor
    }

    /// The generic family this target names, if it is a generic one.
    pub fn generic(&self) -> Option<&'static GenericTarget> {
        GENERIC_TARGETS.iter().find(|g| g.name == self.processor)
    }

    /// Whether a code object built for `self` runs on a device whose full target ID is `device`.
    pub fn runs_on(&self, device: &TargetId) -> bool {
        let processor = self.processor == device.processor
            || self.generic().is_some_and(|g| g.members.contains(&device.processor.as_str()));
        processor && self.sramecc.admits(device.sramecc) && self.xnack.admits(device.xnack)
    }

    fn pinned_features(&self) -> usize {
        [self.sramecc, self.xnack].iter().filter(|f| **f != Feature::Any).count()
    }
}

impl FromStr for TargetId {
    type Err = CodeObjectError;

    /// Accepts the features in any order (LLVM's non-canonical form); `Display` writes them in
    /// the canonical alphabetical order, which is also the only order the HIP runtime parses.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: &str| CodeObjectError::InvalidTargetId {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let mut parts = text.split(':');
        let processor = parts.next().unwrap_or_default();
        let name_ok = processor.strip_prefix("gfx").is_some_and(|rest| {
            !rest.is_empty()
                && !rest.ends_with('-')
                && rest.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
        });
        if !name_ok {
            return Err(invalid("the processor is not a gfx name"));
        }
        let mut id =
            TargetId { processor: processor.to_string(), sramecc: Feature::Any, xnack: Feature::Any };
        for part in parts {
            let (name, setting) = match part.as_bytes().last() {
                Some(b'+') => (&part[..part.len() - 1], Feature::On),
                Some(b'-') => (&part[..part.len() - 1], Feature::Off),
                _ => return Err(invalid("a feature must end in + or -")),
            };
            let slot = match name {
                "sramecc" => &mut id.sramecc,
                "xnack" => &mut id.xnack,
                _ => return Err(invalid("target IDs name only the sramecc and xnack features")),
            };
            if *slot != Feature::Any {
                return Err(invalid("a feature appears twice"));
            }
            *slot = setting;
        }
        Ok(id)
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, setting) in [("sramecc", self.sramecc), ("xnack", self.xnack)] {
            match setting {
                Feature::On => write!(f, ":{name}+")?,
                Feature::Off => write!(f, ":{name}-")?,
                Feature::Any => {}
            }
        }
        Ok(())
    }
}

/// One AMDGPU code object in an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub target: TargetId,
    /// The code object version from its ELF header, where the entry's code is an ELF.
    pub code_object_version: Option<u8>,
    /// The generic code object version (`e_flags` bits 24-31, v6+), where it is nonzero.
    pub generic_version: Option<u8>,
}

impl Entry {
    /// Whether the preflight can judge this entry. A v2/v3 code object cannot say "any" and
    /// reads an omitted feature as off only where the processor has it, which would take the
    /// runtime's per-processor feature tables to decide; nothing this project builds is that old.
    pub fn checkable(&self) -> bool {
        self.code_object_version.is_none_or(|v| v >= 4)
    }

    /// The code object version a runtime must load for this entry: its ELF's, or for a generic
    /// target whose code is not an ELF, the first version with generic targets.
    pub fn required_version(&self) -> Option<u8> {
        self.code_object_version.or(self.target.generic().map(|_| GENERIC_MIN_CODE_OBJECT_VERSION))
    }

    /// Whether the HIP runtime of `release` loads this entry's code object version
    /// (`hip_facts::CODE_OBJECT_VERSIONS`). An unknown release, or an entry whose version is
    /// unknown, is taken to load.
    pub fn loads_on(&self, release: Option<HipVersion>) -> bool {
        let (Some(release), Some(version)) = (release, self.required_version()) else { return true };
        hip_facts::code_object_version_since(version).is_some_and(|since| release.at_least(since))
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.target)?;
        match self.code_object_version {
            Some(v) if !self.checkable() => write!(f, " (code object v{v}, too old to check)"),
            _ => Ok(()),
        }
    }
}

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    #[error("not an AMDGPU code object: {0}")]
    NotCodeObject(String),
    #[error(
        "compressed offload bundle (`CCOB`): its targets cannot be checked without inflating it; build without `--offload-compress`"
    )]
    Compressed,
    #[error("corrupt code object: {0}")]
    Corrupt(String),
    #[error("code object for EF_AMDGPU_MACH {0:#05x}, a processor this check does not know")]
    UnknownMachine(u32),
    #[error("invalid target ID `{text}`: {reason}")]
    InvalidTargetId { text: String, reason: String },
    #[error("{}", no_match_message(.device, .present))]
    NoMatch { device: TargetId, present: Vec<Entry> },
    /// The image has code for the device, but only in code object versions the running HIP
    /// release does not load (a generic target's v6 on HIP before 6.4).
    #[error("{}", not_loadable_message(.device, .release, .candidates))]
    NotLoadable { device: TargetId, release: HipVersion, candidates: Vec<Entry> },
}

fn not_loadable_message(device: &TargetId, release: &HipVersion, candidates: &[Entry]) -> String {
    let version = |e: &Entry| e.required_version().map_or("?".to_string(), |v| format!("v{v}"));
    let held: Vec<String> =
        candidates.iter().map(|e| format!("{} (code object {})", e.target, version(e))).collect();
    let loaded: Vec<String> =
        hip_facts::code_object_versions_loaded_by(*release).iter().map(|v| format!("v{v}")).collect();
    let loaded = if loaded.is_empty() { "none".to_string() } else { loaded.join(", ") };
    let newer = candidates
        .iter()
        .filter_map(|e| e.required_version().and_then(hip_facts::code_object_version_since))
        .min()
        .map(|since| format!(", or run on HIP {}.{} or later", since.major, since.minor))
        .unwrap_or_default();
    format!(
        "the image's code for device target `{device}` is of a code object version HIP {release} does not \
         load (the image has for it: {}; this release loads code object {loaded}); build code for the \
         device itself with `{ARCHS_ENV}={} {BUILD_COMMAND}`{newer}",
        held.join(", "),
        device.processor()
    )
}

fn no_match_message(device: &TargetId, present: &[Entry]) -> String {
    let present = if present.is_empty() {
        "no AMDGPU code object".to_string()
    } else {
        present.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    // The build suggested is for the bare processor: code leaving xnack and sramecc unspecified
    // runs under either setting, so it stays right if the device's mode is changed.
    format!(
        "no code object in the image runs on device target `{device}` (the image holds: {present}); \
         build for it with `{ARCHS_ENV}={} {BUILD_COMMAND}`",
        device.processor()
    )
}

/// The AMDGPU code objects in `image` (host and other non-AMDGPU bundle entries left out).
pub fn entries(image: &[u8]) -> Result<Vec<Entry>, CodeObjectError> {
    if image.starts_with(BUNDLE_MAGIC) {
        bundle_entries(image)
    } else if image.starts_with(COMPRESSED_BUNDLE_MAGIC) {
        Err(CodeObjectError::Compressed)
    } else if image.starts_with(ELF_MAGIC) {
        Ok(vec![elf_entry(image)?])
    } else {
        Err(CodeObjectError::NotCodeObject("neither an offload bundle nor an ELF".into()))
    }
}

/// The targets of the AMDGPU code objects in `image`.
pub fn targets(image: &[u8]) -> Result<Vec<TargetId>, CodeObjectError> {
    Ok(entries(image)?.into_iter().map(|e| e.target).collect())
}

/// The entry a device of target `device` should load under the HIP runtime of `release` (`None`:
/// unknown, every code object version taken to load): among those it can run and that release
/// loads, an exact processor match before a generic one (generic code trades some speed for
/// reach), then the entry pinning more features (built for exactly this mode), then the first in
/// the image.
pub fn select<'a>(entries: &'a [Entry], device: &TargetId, release: Option<HipVersion>) -> Option<&'a Entry> {
    let rank = |e: &Entry| (e.target.processor == device.processor, e.target.pinned_features());
    let mut best: Option<&Entry> = None;
    let loadable = |e: &&Entry| e.checkable() && e.target.runs_on(device) && e.loads_on(release);
    for entry in entries.iter().filter(loadable) {
        if best.is_none_or(|b| rank(entry) > rank(b)) {
            best = Some(entry);
        }
    }
    best
}

/// Checks that `image` has code for the device whose full target ID (as the runtime reports it,
/// features included, e.g. `gfx90a:sramecc+:xnack-`) is `device_target`, in a code object
/// version the running HIP `release` loads (`None`: unknown, every version accepted), and
/// returns the target of the entry it would load.
pub fn preflight(
    image: &[u8],
    device_target: &str,
    release: Option<HipVersion>,
) -> Result<TargetId, CodeObjectError> {
    let device: TargetId = device_target.parse()?;
    let present = entries(image)?;
    if let Some(entry) = select(&present, &device, release) {
        return Ok(entry.target.clone());
    }
    let candidates: Vec<Entry> =
        present.iter().filter(|e| e.checkable() && e.target.runs_on(&device)).cloned().collect();
    match release {
        Some(release) if !candidates.is_empty() => {
            Err(CodeObjectError::NotLoadable { device, release, candidates })
        }
        _ => Err(CodeObjectError::NoMatch { device, present }),
    }
}

fn corrupt(what: String) -> CodeObjectError {
    CodeObjectError::Corrupt(what)
}

/// Reads the bundle header front to back; every length is checked before it is used.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: u64, what: &str) -> Result<&'a [u8], CodeObjectError> {
        let left = self.bytes.len() - self.pos;
        let len = usize::try_from(len).ok().filter(|&n| n <= left).ok_or_else(|| {
            corrupt(format!("bundle header truncated: {what} needs {len} bytes at {}, {left} left", self.pos))
        })?;
        let out = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    fn u64(&mut self, what: &str) -> Result<u64, CodeObjectError> {
        let bytes = self.take(8, what)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("took 8 bytes")))
    }
}

/// Layout (ClangOffloadBundler docs): magic, u64 entry count, then per entry u64 offset (from
/// the start of the bundle), u64 size, u64 ID length and the ID; all little-endian.
fn bundle_entries(image: &[u8]) -> Result<Vec<Entry>, CodeObjectError> {
    let mut reader = Reader { bytes: image, pos: BUNDLE_MAGIC.len() };
    let count = reader.u64("the entry count")?;
    // An entry's header takes at least 24 bytes; checking the count against that first keeps a
    // forged count from driving a long loop.
    let room = (image.len() - reader.pos) as u64 / 24;
    if count > room {
        return Err(corrupt(format!("{count} bundle entries claimed, room for at most {room}")));
    }
    let mut out = Vec::new();
    for index in 0..count {
        let offset = reader.u64("an entry offset")?;
        let size = reader.u64("an entry size")?;
        let id_len = reader.u64("an entry ID length")?;
        let id = std::str::from_utf8(reader.take(id_len, "an entry ID")?)
            .map_err(|_| corrupt(format!("bundle entry {index}'s ID is not UTF-8")))?;
        let code = entry_code(image, offset, size).ok_or_else(|| {
            corrupt(format!(
                "bundle entry `{id}` ({size} bytes at {offset}) lies past the end ({} bytes)",
                image.len()
            ))
        })?;
        if let Some(entry) = bundle_entry(id, code)? {
            out.push(entry);
        }
    }
    Ok(out)
}

/// The entry's bytes. An empty entry (the host's, in what `--genco` writes) touches no bytes,
/// so its offset cannot read out of bounds and is not held to the image.
fn entry_code(image: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    if size == 0 {
        return Some(&[]);
    }
    let end = usize::try_from(offset.checked_add(size)?).ok()?;
    image.get(usize::try_from(offset).ok()?..end)
}

/// Entry IDs are `<kind>-<triple>-<target ID>`; only the HIP kinds for HSA code objects count.
fn bundle_entry(id: &str, code: &[u8]) -> Result<Option<Entry>, CodeObjectError> {
    let Some((kind, rest)) = id.split_once('-') else { return Ok(None) };
    let Some(after_triple) = rest.strip_prefix(AMDHSA_TRIPLE) else { return Ok(None) };
    let elf = |code: &[u8]| if code.starts_with(ELF_MAGIC) { elf_entry(code).map(Some) } else { Ok(None) };
    match kind {
        // From code object v4 on, the ID carries the full target ID (after the triple's empty
        // environment component), and the runtime goes by it.
        "hipv4" => {
            let text = after_triple.strip_prefix('-').ok_or_else(|| {
                corrupt(format!("bundle entry `{id}` is not of the form hipv4-{AMDHSA_TRIPLE}-<target ID>"))
            })?;
            let target: TargetId = text.parse()?;
            let elf = elf(code)?;
            Ok(Some(Entry {
                target,
                code_object_version: elf.as_ref().and_then(|e| e.code_object_version),
                generic_version: elf.and_then(|e| e.generic_version),
            }))
        }
        // Before v4 an ID cannot say "any" (so `gfx906` meant xnack and sramecc off); the newer
        // offload driver writes `hip-` for v4+ too. Either way the runtime reads the target from
        // the code object itself, and so does this.
        "hip" | "hcc" => elf(code)?
            .map(Some)
            .ok_or_else(|| corrupt(format!("bundle entry `{id}` does not hold an ELF code object"))),
        _ => Ok(None),
    }
}

/// The target of a bare AMDGPU ELF, from its header.
fn elf_entry(elf: &[u8]) -> Result<Entry, CodeObjectError> {
    let header = elf
        .get(..ELF64_HEADER_LEN)
        .ok_or_else(|| corrupt(format!("ELF header truncated: {} of {ELF64_HEADER_LEN} bytes", elf.len())))?;
    if !header.starts_with(ELF_MAGIC) {
        return Err(CodeObjectError::NotCodeObject("no ELF magic".into()));
    }
    // e_ident: EI_CLASS 2 = ELF64, EI_DATA 1 = little-endian.
    if header[4] != 2 || header[5] != 1 {
        return Err(CodeObjectError::NotCodeObject("not a 64-bit little-endian ELF".into()));
    }
    let machine = u16::from_le_bytes([header[18], header[19]]);
    if machine != EM_AMDGPU {
        return Err(CodeObjectError::NotCodeObject(format!(
            "ELF for machine {machine}, not AMDGPU ({EM_AMDGPU})"
        )));
    }
    let os_abi = header[7];
    if os_abi != ELFOSABI_AMDGPU_HSA {
        return Err(CodeObjectError::NotCodeObject(format!(
            "ELF OS ABI {os_abi}, not AMDHSA ({ELFOSABI_AMDGPU_HSA})"
        )));
    }
    // EI_ABIVERSION counts from code object v2 (ELFABIVERSION_AMDGPU_HSA_V2 = 0).
    let version = header[8]
        .checked_add(2)
        .ok_or_else(|| corrupt(format!("ELF ABI version {} is out of range", header[8])))?;
    let flags = u32::from_le_bytes([header[48], header[49], header[50], header[51]]);
    let mach = flags & EF_AMDGPU_MACH;
    let processor = MACHINES
        .iter()
        .find(|(value, _)| *value == mach)
        .map(|(_, name)| name.to_string())
        .ok_or(CodeObjectError::UnknownMachine(mach))?;
    // The two-bit xnack/sramecc fields are the v4+ encoding; v2/v3 used single on/off bits,
    // which `Entry::checkable` leaves alone.
    let (sramecc, xnack) = if version >= 4 {
        (
            Feature::from_v4_field((flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 10),
            Feature::from_v4_field((flags & EF_AMDGPU_FEATURE_XNACK_V4) >> 8),
        )
    } else {
        (Feature::Any, Feature::Any)
    };
    let generic_version = Some((flags >> EF_AMDGPU_GENERIC_VERSION_OFFSET) as u8)
        .filter(|&v| version >= GENERIC_MIN_CODE_OBJECT_VERSION && v > 0);
    Ok(Entry {
        target: TargetId { processor, sramecc, xnack },
        code_object_version: Some(version),
        generic_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "host-x86_64-unknown-linux-gnu-";

    /// The release-agnostic preflight most tests use (no HIP release known: every version loads).
    fn preflight(image: &[u8], device_target: &str) -> Result<TargetId, CodeObjectError> {
        super::preflight(image, device_target, None)
    }

    fn hip(major: u32, minor: u32) -> Option<HipVersion> {
        Some(HipVersion { major, minor, patch: 41133 })
    }

    fn hipv4(target: &str) -> String {
        format!("hipv4-amdgcn-amd-amdhsa--{target}")
    }

    /// A bundle laid out as the bundler does: header, then each entry's code in order.
    fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let header_len: usize = 24 + 8 + entries.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
        let mut out = BUNDLE_MAGIC.to_vec();
        out.extend((entries.len() as u64).to_le_bytes());
        let mut offset = header_len;
        for (id, code) in entries {
            out.extend((offset as u64).to_le_bytes());
            out.extend((code.len() as u64).to_le_bytes());
            out.extend((id.len() as u64).to_le_bytes());
            out.extend(id.as_bytes());
            offset += code.len();
        }
        for (_, code) in entries {
            out.extend(*code);
        }
        out
    }

    /// A 64-byte AMDHSA ELF header with `flags` and code object `version`.
    fn elf(flags: u32, version: u8) -> Vec<u8> {
        let mut h = vec![0u8; ELF64_HEADER_LEN];
        h[..4].copy_from_slice(ELF_MAGIC);
        h[4] = 2;
        h[5] = 1;
        h[6] = 1;
        h[7] = ELFOSABI_AMDGPU_HSA;
        h[8] = version - 2;
        h[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        h[48..52].copy_from_slice(&flags.to_le_bytes());
        h
    }

    fn id(text: &str) -> TargetId {
        text.parse().unwrap()
    }

    fn mach(name: &str) -> u32 {
        MACHINES.iter().find(|(_, n)| *n == name).unwrap().0
    }

    #[test]
    fn target_ids_round_trip() {
        for text in ["gfx90a", "gfx90a:xnack-", "gfx942:sramecc+:xnack+", "gfx11-generic", "gfx1030"] {
            assert_eq!(id(text).to_string(), text);
        }
        let t = id("gfx90a:xnack+:sramecc-");
        assert_eq!((t.processor(), t.sramecc, t.xnack), ("gfx90a", Feature::Off, Feature::On));
        assert_eq!(t.to_string(), "gfx90a:sramecc-:xnack+", "canonical order");
        assert_eq!(id("gfx90a").xnack, Feature::Any);
        assert_eq!(id("gfx9-4-generic").generic().unwrap().name, "gfx9-4-generic");
        assert!(id("gfx942").generic().is_none());
    }

    #[test]
    fn bad_target_ids_are_refused() {
        for text in [
            "",
            "gfx",
            "sm_90",
            "GFX90A",
            "gfx90a:",
            "gfx90a:xnack",
            "gfx90a:xnack*",
            "gfx90a:+",
            "gfx90a:xnack+:xnack-",
            "gfx90a:tgsplit+",
            "gfx11-",
            "gfx90a xnack-",
        ] {
            let err = text.parse::<TargetId>().unwrap_err();
            assert!(matches!(err, CodeObjectError::InvalidTargetId { .. }), "{text}: {err}");
        }
    }

    #[test]
    fn one_entry_bundle_host_ignored() {
        let image = bundle(&[(HOST, b""), (&hipv4("gfx90a"), b"code")]);
        assert_eq!(targets(&image).unwrap(), [id("gfx90a")]);
        let entries = entries(&image).unwrap();
        assert_eq!(entries[0].code_object_version, None, "the code is not an ELF");
    }

    #[test]
    fn several_entries_in_order() {
        let image = bundle(&[
            (HOST, b""),
            (&hipv4("gfx908"), b"a"),
            (&hipv4("gfx90a:sramecc+:xnack-"), b"bb"),
            ("openmp-amdgcn-amd-amdhsa--gfx90a", b"omp"),
            ("hip-spirv64-amd-amdhsa--amdgcnspirv", b"spv"),
            (&hipv4("gfx1100"), b"ccc"),
        ]);
        assert_eq!(targets(&image).unwrap(), [id("gfx908"), id("gfx90a:sramecc+:xnack-"), id("gfx1100")]);
    }

    #[test]
    fn bundle_entries_read_their_elf() {
        let code = elf(mach("gfx11-generic") | 0x0100_0000, 6);
        let image = bundle(&[(HOST, b""), (&hipv4("gfx11-generic"), &code)]);
        let entry = &entries(&image).unwrap()[0];
        assert_eq!((entry.code_object_version, entry.generic_version), (Some(6), Some(1)));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let image = bundle(&[(HOST, b""), (&hipv4("gfx908"), b"x"), (&hipv4("gfx90a"), b"payload")]);
        for len in 0..image.len() {
            assert!(entries(&image[..len]).is_err(), "prefix of {len} bytes accepted");
        }
        assert!(entries(&image).is_ok());
    }

    #[test]
    fn forged_lengths_are_errors_not_panics() {
        let valid = bundle(&[(&hipv4("gfx90a"), b"payload")]);
        let field = |at: usize, value: u64| {
            let mut image = valid.clone();
            image[at..at + 8].copy_from_slice(&value.to_le_bytes());
            image
        };
        // count at 24; the entry's offset, size and ID length at 32, 40 and 48.
        for (at, value) in [
            (24, u64::MAX),
            (24, 2),
            (32, u64::MAX),
            (32, valid.len() as u64),
            (40, u64::MAX),
            (40, 8),
            (48, u64::MAX),
            (48, 1 << 40),
        ] {
            let err = entries(&field(at, value)).unwrap_err();
            assert!(matches!(err, CodeObjectError::Corrupt(_)), "{at}={value:#x}: {err}");
        }
    }

    #[test]
    fn corrupt_entry_ids_are_errors() {
        let mut bad_utf8 = bundle(&[(&hipv4("gfx90a"), b"c")]);
        bad_utf8[56] = 0xff;
        assert!(matches!(entries(&bad_utf8), Err(CodeObjectError::Corrupt(_))));
        let one_dash = bundle(&[("hipv4-amdgcn-amd-amdhsa-gfx90a", b"c")]);
        assert!(matches!(entries(&one_dash), Err(CodeObjectError::Corrupt(_))));
        let bad_target = bundle(&[(&hipv4("gfx90a:xnack"), b"c")]);
        assert!(matches!(entries(&bad_target), Err(CodeObjectError::InvalidTargetId { .. })));
        let legacy_not_elf = bundle(&[("hip-amdgcn-amd-amdhsa-gfx908", b"not an elf")]);
        assert!(matches!(entries(&legacy_not_elf), Err(CodeObjectError::Corrupt(_))));
        let mut bad_elf = elf(mach("gfx90a"), 5);
        bad_elf.truncate(40);
        let truncated_elf = bundle(&[(&hipv4("gfx90a"), &bad_elf)]);
        assert!(matches!(entries(&truncated_elf), Err(CodeObjectError::Corrupt(_))));
    }

    #[test]
    fn scrambled_bundles_never_panic() {
        let valid = bundle(&[(HOST, b""), (&hipv4("gfx90a:xnack-"), &elf(mach("gfx90a") | 0x200, 5))]);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut image = valid.clone();
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % image.len() as u64) as usize;
                image[at] = (state >> 32) as u8;
            }
            let _ = entries(&image);
        }
    }

    #[test]
    fn other_formats() {
        assert_eq!(entries(b"CCOB\x01\x00rest"), Err(CodeObjectError::Compressed));
        assert!(matches!(entries(b""), Err(CodeObjectError::NotCodeObject(_))));
        assert!(matches!(entries(b"\0asm...."), Err(CodeObjectError::NotCodeObject(_))));
        assert!(matches!(entries(b"__CLANG_OFFLOAD_BUNDLE__"), Err(CodeObjectError::Corrupt(_))));
    }

    #[test]
    fn elf_flags_decode() {
        let decode = |flags, version| entries(&elf(flags, version)).unwrap().remove(0);
        // Brief's machine numbers, as LLVM's ELF.h has them.
        for (value, name) in [
            (0x02c, "gfx900"),
            (0x02f, "gfx906"),
            (0x030, "gfx908"),
            (0x03f, "gfx90a"),
            (0x040, "gfx940"),
            (0x04b, "gfx941"),
            (0x04c, "gfx942"),
            (0x04f, "gfx950"),
            (0x036, "gfx1030"),
            (0x041, "gfx1100"),
            (0x046, "gfx1101"),
            (0x047, "gfx1102"),
            (0x043, "gfx1150"),
            (0x04a, "gfx1151"),
            (0x048, "gfx1200"),
            (0x04e, "gfx1201"),
            (0x051, "gfx9-generic"),
            (0x052, "gfx10-1-generic"),
            (0x053, "gfx10-3-generic"),
            (0x054, "gfx11-generic"),
            (0x059, "gfx12-generic"),
            (0x05f, "gfx9-4-generic"),
        ] {
            assert_eq!(decode(value, 5).target, id(name));
        }
        // xnack: 0x000 unsupported, 0x100 any, 0x200 off, 0x300 on; sramecc the same at 0xc00.
        let gfx90a = mach("gfx90a");
        assert_eq!(decode(gfx90a | 0xc00 | 0x200, 5).target.to_string(), "gfx90a:sramecc+:xnack-");
        assert_eq!(decode(gfx90a | 0x800 | 0x300, 4).target.to_string(), "gfx90a:sramecc-:xnack+");
        assert_eq!(decode(gfx90a | 0x400 | 0x100, 5).target.to_string(), "gfx90a");
        assert_eq!(decode(mach("gfx1100"), 5).target.to_string(), "gfx1100");
        let generic = decode(mach("gfx12-generic") | 0x0200_0000, 6);
        assert_eq!((generic.code_object_version, generic.generic_version), (Some(6), Some(2)));
        assert_eq!(decode(mach("gfx942") | 0x0200_0000, 5).generic_version, None, "before v6");
        // v3 flags are single bits with another meaning: not decoded, and not checkable.
        let v3 = decode(mach("gfx908") | 0x300, 3);
        assert_eq!((v3.target.to_string(), v3.checkable()), ("gfx908".into(), false));
        assert!(decode(gfx90a, 4).checkable());
    }

    #[test]
    fn non_amdgpu_elfs_are_refused() {
        let with = |at: usize, byte: u8| {
            let mut image = elf(mach("gfx90a"), 5);
            image[at] = byte;
            entries(&image)
        };
        assert!(matches!(with(18, 62), Err(CodeObjectError::NotCodeObject(_))), "x86-64");
        assert!(matches!(with(4, 1), Err(CodeObjectError::NotCodeObject(_))), "ELF32");
        assert!(matches!(with(5, 2), Err(CodeObjectError::NotCodeObject(_))), "big-endian");
        assert!(matches!(with(7, 65), Err(CodeObjectError::NotCodeObject(_))), "PAL");
        assert_eq!(with(48, 0x27), Err(CodeObjectError::UnknownMachine(0x27)));
        assert!(matches!(with(8, 0xff), Err(CodeObjectError::Corrupt(_))));
        assert!(matches!(entries(&elf(0, 5)[..63]), Err(CodeObjectError::Corrupt(_))));
    }

    #[test]
    fn legacy_hip_entries_read_the_elf() {
        let v3 = elf(mach("gfx908"), 3);
        let v5 = elf(mach("gfx90a") | 0x200, 5);
        let image = bundle(&[
            (HOST, b""),
            ("hip-amdgcn-amd-amdhsa-gfx908", &v3),
            ("hip-amdgcn-amd-amdhsa--gfx90a", &v5),
        ]);
        let found = entries(&image).unwrap();
        assert_eq!(
            found.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["gfx908 (code object v3, too old to check)", "gfx90a:xnack-"]
        );
        assert_eq!(preflight(&image, "gfx90a:sramecc+:xnack-").unwrap(), id("gfx90a:xnack-"));
        let err = preflight(&image, "gfx908:sramecc+:xnack-").unwrap_err().to_string();
        assert!(err.contains("gfx908 (code object v3, too old to check)"), "{err}");
    }

    #[test]
    fn xnack_and_sramecc_settings_decide() {
        let device = "gfx90a:sramecc+:xnack-";
        let only = |target: &str| preflight(&bundle(&[(HOST, b""), (&hipv4(target), b"c")]), device);
        assert_eq!(only("gfx90a").unwrap(), id("gfx90a"));
        assert_eq!(only("gfx90a:xnack-").unwrap(), id("gfx90a:xnack-"));
        assert_eq!(only("gfx90a:sramecc+:xnack-").unwrap(), id("gfx90a:sramecc+:xnack-"));
        for target in ["gfx90a:xnack+", "gfx90a:sramecc-", "gfx90a:sramecc-:xnack-", "gfx908", "gfx942"] {
            assert!(matches!(only(target), Err(CodeObjectError::NoMatch { .. })), "{target}");
        }
        let ids = ["gfx90a", "gfx90a:xnack+", "gfx90a:xnack-"].map(hipv4);
        let all = bundle(&ids.iter().map(|i| (i.as_str(), &b"c"[..])).collect::<Vec<_>>());
        assert_eq!(preflight(&all, device).unwrap(), id("gfx90a:xnack-"), "the most specific");
        assert_eq!(preflight(&all, "gfx90a:sramecc+:xnack+").unwrap(), id("gfx90a:xnack+"));
        // A device that does not report xnack has none: only code leaving it unspecified runs.
        assert_eq!(preflight(&all, "gfx90a").unwrap(), id("gfx90a"));
    }

    #[test]
    fn generic_fallback_and_exact_preferred() {
        let generic = bundle(&[(HOST, b""), (&hipv4("gfx11-generic"), b"g"), (&hipv4("gfx1030"), b"r")]);
        assert_eq!(preflight(&generic, "gfx1101").unwrap(), id("gfx11-generic"));
        assert_eq!(preflight(&generic, "gfx1151").unwrap(), id("gfx11-generic"));
        assert_eq!(preflight(&generic, "gfx1030").unwrap(), id("gfx1030"));
        assert!(matches!(preflight(&generic, "gfx1200"), Err(CodeObjectError::NoMatch { .. })));
        assert!(matches!(preflight(&generic, "gfx1031"), Err(CodeObjectError::NoMatch { .. })));
        let both = bundle(&[(&hipv4("gfx11-generic"), b"g"), (&hipv4("gfx1100"), b"e")]);
        assert_eq!(preflight(&both, "gfx1100").unwrap(), id("gfx1100"));
        assert_eq!(preflight(&both, "gfx1102").unwrap(), id("gfx11-generic"));
        let mi300 = bundle(&[(&hipv4("gfx9-4-generic:xnack+"), b"a"), (&hipv4("gfx9-4-generic"), b"b")]);
        assert_eq!(preflight(&mi300, "gfx942:sramecc+:xnack-").unwrap(), id("gfx9-4-generic"));
        assert_eq!(preflight(&mi300, "gfx942:sramecc+:xnack+").unwrap(), id("gfx9-4-generic:xnack+"));
        assert!(!id("gfx9-generic").runs_on(&id("gfx90a:sramecc+:xnack-")), "gfx90a is in no family");
    }

    #[test]
    fn no_match_names_device_targets_and_command() {
        let image = bundle(&[(HOST, b""), (&hipv4("gfx908"), b"a"), (&hipv4("gfx1030"), b"b")]);
        let err = preflight(&image, "gfx90a:sramecc+:xnack-").unwrap_err();
        let CodeObjectError::NoMatch { device, present } = &err else { panic!("{err}") };
        assert_eq!((device, present.len()), (&id("gfx90a:sramecc+:xnack-"), 2));
        let text = err.to_string();
        for needle in [
            "`gfx90a:sramecc+:xnack-`",
            "gfx908, gfx1030",
            "`ROCMFORGE_AMD_ARCHS=gfx90a cargo xtask kernels --platform amd`",
        ] {
            assert!(text.contains(needle), "`{needle}` missing from: {text}");
        }
        let host_only = preflight(&bundle(&[(HOST, b"")]), "gfx1100").unwrap_err().to_string();
        assert!(host_only.contains("no AMDGPU code object"), "{host_only}");
        assert!(matches!(preflight(&image, "gfx90a:xnack"), Err(CodeObjectError::InvalidTargetId { .. })));
    }

    #[test]
    fn bare_elf_preflight() {
        let image = elf(mach("gfx942") | 0xc00 | 0x100, 5);
        assert_eq!(preflight(&image, "gfx942:sramecc+:xnack-").unwrap(), id("gfx942:sramecc+"));
        let err = preflight(&image, "gfx942:sramecc-:xnack-").unwrap_err().to_string();
        assert!(err.contains("gfx942:sramecc+") && err.contains("ROCMFORGE_AMD_ARCHS=gfx942"), "{err}");
    }

    #[test]
    fn generic_code_needs_hip_6_4() {
        let generic = elf(mach("gfx11-generic") | 0x0100_0000, 6);
        let only_generic = bundle(&[(HOST, b""), (&hipv4("gfx11-generic"), &generic)]);
        let err = super::preflight(&only_generic, "gfx1101", hip(6, 2)).unwrap_err();
        let CodeObjectError::NotLoadable { device, release, candidates } = &err else { panic!("{err}") };
        assert_eq!((device, release.minor, candidates.len()), (&id("gfx1101"), 2, 1));
        let text = err.to_string();
        for needle in [
            "HIP 6.2.41133",
            "gfx11-generic (code object v6)",
            "loads code object v4, v5",
            "`ROCMFORGE_AMD_ARCHS=gfx1101 cargo xtask kernels --platform amd`",
            "HIP 6.4 or later",
        ] {
            assert!(text.contains(needle), "`{needle}` missing from: {text}");
        }
        assert!(!text.contains("no code object in the image runs"), "{text}");
        for release in [hip(6, 4), hip(7, 0), None] {
            assert_eq!(super::preflight(&only_generic, "gfx1101", release).unwrap(), id("gfx11-generic"));
        }
        // No entry for the device at all is still `NoMatch`, whatever the release.
        assert!(matches!(
            super::preflight(&only_generic, "gfx1201", hip(6, 2)),
            Err(CodeObjectError::NoMatch { .. })
        ));
        // A generic entry whose code is not an ELF still needs v6.
        let not_elf = bundle(&[(&hipv4("gfx11-generic"), b"g")]);
        assert!(matches!(
            super::preflight(&not_elf, "gfx1151", hip(5, 7)),
            Err(CodeObjectError::NotLoadable { .. })
        ));
    }

    #[test]
    fn code_object_v5_loads_on_5x() {
        let v5 = elf(mach("gfx1100"), 5);
        let image = bundle(&[(HOST, b""), (&hipv4("gfx1100"), &v5)]);
        for release in [hip(5, 0), hip(5, 7), hip(6, 2), hip(7, 1)] {
            assert_eq!(super::preflight(&image, "gfx1100", release).unwrap(), id("gfx1100"), "{release:?}");
        }
        // Before any release this table knows, nothing loads.
        let err = super::preflight(&image, "gfx1100", hip(4, 5)).unwrap_err().to_string();
        assert!(err.contains("HIP 4.5.41133") && err.contains("loads code object none"), "{err}");
        // v6 for a processor-specific target is held to 6.4 too.
        let v6 = bundle(&[(&hipv4("gfx1100"), &elf(mach("gfx1100"), 6))]);
        assert!(super::preflight(&v6, "gfx1100", hip(6, 3)).is_err());
        assert!(super::preflight(&v6, "gfx1100", hip(6, 4)).is_ok());
    }

    #[test]
    fn exact_preferred_over_generic_on_every_release() {
        // What `cargo xtask kernels` builds: processor-specific v5, generic v6, one bundle.
        let image = bundle(&[
            (HOST, b""),
            (&hipv4("gfx10-3-generic"), &elf(mach("gfx10-3-generic") | 0x0100_0000, 6)),
            (&hipv4("gfx1100"), &elf(mach("gfx1100"), 5)),
            (&hipv4("gfx11-generic"), &elf(mach("gfx11-generic") | 0x0100_0000, 6)),
            (&hipv4("gfx1030"), &elf(mach("gfx1030"), 5)),
        ]);
        for release in [hip(5, 7), hip(6, 2), hip(6, 4), hip(7, 0), None] {
            assert_eq!(super::preflight(&image, "gfx1100", release).unwrap(), id("gfx1100"));
            assert_eq!(super::preflight(&image, "gfx1030", release).unwrap(), id("gfx1030"));
        }
        assert_eq!(super::preflight(&image, "gfx1103", hip(6, 4)).unwrap(), id("gfx11-generic"));
        assert_eq!(super::preflight(&image, "gfx1032", None).unwrap(), id("gfx10-3-generic"));
        let err = super::preflight(&image, "gfx1103", hip(6, 1)).unwrap_err();
        assert!(
            matches!(&err, CodeObjectError::NotLoadable { candidates, .. } if candidates.len() == 1),
            "{err}"
        );
        let entries = entries(&image).unwrap();
        assert_eq!(select(&entries, &id("gfx1102"), hip(6, 2)), None);
        assert_eq!(select(&entries, &id("gfx1102"), hip(6, 4)).unwrap().target, id("gfx11-generic"));
    }

    #[test]
    fn generic_minimum_matches_the_facts() {
        let since = hip_facts::code_object_version_since(GENERIC_MIN_CODE_OBJECT_VERSION).unwrap();
        // The release that loads generic code objects is that of v6 in hip_facts, not a copy.
        assert_eq!((since.major, since.minor), (6, 4));
    }

    #[test]
    fn generic_table_is_consistent() {
        let mut seen = Vec::new();
        for g in GENERIC_TARGETS {
            assert_eq!(id(g.name).generic(), Some(g));
            assert!(MACHINES.iter().any(|(_, n)| *n == g.name), "{} has no machine value", g.name);
            for member in g.members {
                assert!(MACHINES.iter().any(|(_, n)| n == member), "{member} has no machine value");
                assert!(!seen.contains(member), "{member} in two families");
                seen.push(*member);
                assert!(id(g.name).runs_on(&id(member)));
            }
        }
    }
}
