//! What each AMD code object asks of the hardware, read from the AMDGPU metadata note of every
//! code object in every `<out>/amd/<stem>.hsaco` bundle: wavefront size, registers, spills, LDS
//! and scratch per kernel entry and target.
//!
//! `cargo xtask kernels` writes the table to `docs/kernels/amd-resources.md` and fails when an
//! entry spills registers on a target where the committed table records no spill for it, so a
//! change that makes a kernel spill cannot pass CI unnoticed. Everything is parsed here (offload
//! bundle, ELF, MessagePack): no LLVM tool is needed to read the objects.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use crate::Result;

/// Where the table lives, relative to the workspace root.
pub const TABLE_PATH: &str = "docs/kernels/amd-resources.md";

/// Set to accept new spills: the table is rewritten with them and the build passes.
pub const ACCEPT_VAR: &str = "ROCMFORGE_ACCEPT_SPILLS";

/// One kernel entry's resources on one target, as its code object's metadata records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub wavefront: u64,
    pub sgprs: u64,
    pub vgprs: u64,
    /// Absent on targets without accumulation registers (everything but CDNA).
    pub agprs: Option<u64>,
    pub sgpr_spills: u64,
    pub vgpr_spills: u64,
    /// `group_segment_fixed_size`: static LDS bytes.
    pub lds: u64,
    /// `private_segment_fixed_size`: scratch bytes per work-item.
    pub scratch: u64,
    pub dynamic_stack: bool,
}

impl Entry {
    pub fn spills(&self) -> bool {
        self.sgpr_spills > 0 || self.vgpr_spills > 0
    }
}

/// One code object of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObject {
    /// Target ID as the bundle names it (`gfx1100`, `gfx11-generic`, `gfx90a:xnack-`).
    pub target: String,
    /// AMDHSA code object version (4, 5, 6), from the ELF header's ABI version.
    pub version: u32,
    /// Kernel entries sorted by name.
    pub entries: Vec<Entry>,
}

// ---------------------------------------------------------------------------------------------
// Offload bundle
// ---------------------------------------------------------------------------------------------

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

fn read_u64(data: &[u8], at: usize) -> Result<u64> {
    let bytes = data.get(at..at + 8).ok_or("truncated")?;
    Ok(u64::from_le_bytes(bytes.try_into()?))
}

fn read_u32(data: &[u8], at: usize) -> Result<u32> {
    let bytes = data.get(at..at + 4).ok_or("truncated")?;
    Ok(u32::from_le_bytes(bytes.try_into()?))
}

fn read_u16(data: &[u8], at: usize) -> Result<u16> {
    let bytes = data.get(at..at + 2).ok_or("truncated")?;
    Ok(u16::from_le_bytes(bytes.try_into()?))
}

fn to_usize(v: u64) -> Result<usize> {
    Ok(usize::try_from(v)?)
}

/// The (bundle entry ID, bytes) pairs of an uncompressed clang offload bundle.
fn bundle_entries(data: &[u8]) -> Result<Vec<(String, &[u8])>> {
    if !data.starts_with(BUNDLE_MAGIC) {
        let what =
            if data.starts_with(b"CCOB") { "a compressed offload bundle" } else { "not an offload bundle" };
        return Err(what.into());
    }
    let count = read_u64(data, BUNDLE_MAGIC.len())?;
    let mut at = BUNDLE_MAGIC.len() + 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let offset = to_usize(read_u64(data, at)?)?;
        let size = to_usize(read_u64(data, at + 8)?)?;
        let id_len = to_usize(read_u64(data, at + 16)?)?;
        at += 24;
        let id = data.get(at..at + id_len).ok_or("truncated bundle entry ID")?;
        at += id_len;
        let bytes = data.get(offset..offset + size).ok_or("bundle entry past the end of the file")?;
        out.push((String::from_utf8_lossy(id).into_owned(), bytes));
    }
    Ok(out)
}

/// The target ID of a device bundle entry (`hipv4-amdgcn-amd-amdhsa--gfx1100` gives `gfx1100`);
/// `None` for the host entry.
fn device_target(id: &str) -> Option<&str> {
    id.split_once("amdgcn-amd-amdhsa-").map(|(_, rest)| rest.trim_start_matches('-'))
}

// ---------------------------------------------------------------------------------------------
// ELF notes
// ---------------------------------------------------------------------------------------------

const NT_AMDGPU_METADATA: u32 = 32;
const SHT_NOTE: u32 = 7;
const ELFOSABI_AMDGPU_HSA: u8 = 64;

/// (code object version, the MessagePack bytes of the NT_AMDGPU_METADATA note).
fn amdgpu_metadata(elf: &[u8]) -> Result<(u32, &[u8])> {
    if !elf.starts_with(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file".into());
    }
    if elf.get(7) != Some(&ELFOSABI_AMDGPU_HSA) {
        return Err("not an AMDGPU HSA code object".into());
    }
    // EI_ABIVERSION: 0 = v2, 1 = v3, 2 = v4, 3 = v5, 4 = v6.
    let version = u32::from(elf[8]) + 2;
    let shoff = to_usize(read_u64(elf, 0x28)?)?;
    let shentsize = usize::from(read_u16(elf, 0x3a)?);
    let shnum = usize::from(read_u16(elf, 0x3c)?);
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        if read_u32(elf, sh + 4)? != SHT_NOTE {
            continue;
        }
        let offset = to_usize(read_u64(elf, sh + 0x18)?)?;
        let size = to_usize(read_u64(elf, sh + 0x20)?)?;
        let notes = elf.get(offset..offset + size).ok_or("note section past the end of the file")?;
        let align4 = |n: usize| (n + 3) & !3;
        let mut at = 0;
        while at + 12 <= notes.len() {
            let namesz = to_usize(u64::from(read_u32(notes, at)?))?;
            let descsz = to_usize(u64::from(read_u32(notes, at + 4)?))?;
            let kind = read_u32(notes, at + 8)?;
            let name = notes.get(at + 12..at + 12 + namesz).ok_or("truncated note")?;
            let desc_at = at + 12 + align4(namesz);
            let desc = notes.get(desc_at..desc_at + descsz).ok_or("truncated note")?;
            if kind == NT_AMDGPU_METADATA && name.strip_suffix(b"\0").unwrap_or(name) == b"AMDGPU" {
                return Ok((version, desc));
            }
            at = desc_at + align4(descsz);
        }
    }
    Err("no NT_AMDGPU_METADATA note (code object v3 or later expected)".into())
}

// ---------------------------------------------------------------------------------------------
// MessagePack: the subset of values AMDGPU metadata uses, decoded in full so that any well-formed
// document parses.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bin,
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(pairs) => {
                pairs.iter().find(|(k, _)| matches!(k, Value::Str(s) if s == key)).map(|(_, v)| v)
            }
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let bytes = self.data.get(self.at..self.at + n).ok_or("truncated MessagePack")?;
        self.at += n;
        Ok(bytes)
    }

    fn uint(&mut self, n: usize) -> Result<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn sint(&mut self, n: usize) -> Result<i128> {
        let raw = self.uint(n)?;
        let shift = 64 - 8 * n as u32;
        Ok(i128::from(((raw << shift) as i64) >> shift))
    }

    fn str(&mut self, n: usize) -> Result<Value> {
        Ok(Value::Str(String::from_utf8_lossy(self.take(n)?).into_owned()))
    }

    fn array(&mut self, n: usize, depth: u32) -> Result<Value> {
        (0..n).map(|_| self.value(depth + 1)).collect::<Result<Vec<_>>>().map(Value::Array)
    }

    fn map(&mut self, n: usize, depth: u32) -> Result<Value> {
        let mut pairs = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            let key = self.value(depth + 1)?;
            pairs.push((key, self.value(depth + 1)?));
        }
        Ok(Value::Map(pairs))
    }

    fn len(&mut self, n: usize) -> Result<usize> {
        to_usize(self.uint(n)?)
    }

    fn value(&mut self, depth: u32) -> Result<Value> {
        if depth > 64 {
            return Err("MessagePack nested too deeply".into());
        }
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Int(i128::from(tag)),
            0x80..=0x8f => self.map(usize::from(tag & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(tag & 0x0f), depth)?,
            0xa0..=0xbf => self.str(usize::from(tag & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.len(1 << (tag - 0xc4))?;
                self.take(n)?;
                Value::Bin
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (tag - 0xc7))?;
                self.take(n + 1)?;
                Value::Bin
            }
            0xca => Value::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::Int(i128::from(self.uint(1 << (tag - 0xcc))?)),
            0xd0..=0xd3 => Value::Int(self.sint(1 << (tag - 0xd0))?),
            0xd4..=0xd8 => {
                self.take((1 << (tag - 0xd4)) + 1)?;
                Value::Bin
            }
            0xd9..=0xdb => {
                let n = self.len(1 << (tag - 0xd9))?;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.len(if tag == 0xdc { 2 } else { 4 })?;
                self.array(n, depth)?
            }
            0xde | 0xdf => {
                let n = self.len(if tag == 0xde { 2 } else { 4 })?;
                self.map(n, depth)?
            }
            0xe0..=0xff => Value::Int(i128::from(tag as i8)),
            0xc1 => return Err("MessagePack: reserved byte 0xc1".into()),
        })
    }
}

fn decode(data: &[u8]) -> Result<Value> {
    Reader { data, at: 0 }.value(0)
}

fn entry(kernel: &Value) -> Result<Entry> {
    let name = kernel.get(".name").and_then(Value::as_str).ok_or("kernel without .name")?.to_string();
    let num = |key: &str| -> Result<u64> {
        kernel
            .get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{name}: no {key} in the metadata").into())
    };
    Ok(Entry {
        wavefront: num(".wavefront_size")?,
        sgprs: num(".sgpr_count")?,
        vgprs: num(".vgpr_count")?,
        agprs: kernel.get(".agpr_count").and_then(Value::as_u64),
        sgpr_spills: num(".sgpr_spill_count")?,
        vgpr_spills: num(".vgpr_spill_count")?,
        lds: num(".group_segment_fixed_size")?,
        scratch: num(".private_segment_fixed_size")?,
        dynamic_stack: matches!(kernel.get(".uses_dynamic_stack"), Some(Value::Bool(true))),
        name,
    })
}

/// Every device code object of one `.hsaco` bundle, in bundle order.
pub fn read_bundle(data: &[u8]) -> Result<Vec<CodeObject>> {
    let mut objects = Vec::new();
    for (id, bytes) in bundle_entries(data)? {
        let Some(target) = device_target(&id) else { continue };
        let in_entry = |e: Box<dyn std::error::Error>| format!("bundle entry {id}: {e}");
        let (version, note) = amdgpu_metadata(bytes).map_err(in_entry)?;
        let metadata = decode(note).map_err(in_entry)?;
        let kernels = match metadata.get("amdhsa.kernels") {
            Some(Value::Array(k)) => k.as_slice(),
            _ => &[],
        };
        let mut entries = kernels.iter().map(entry).collect::<Result<Vec<_>>>().map_err(in_entry)?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        objects.push(CodeObject { target: target.to_string(), version, entries });
    }
    Ok(objects)
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

/// Targets in a stable order: CDNA (gfx9) before RDNA (gfx10-12), by generation, generic targets
/// after the chips they cover.
fn target_order(target: &str) -> (u32, u32, String) {
    let processor = target.split(':').next().unwrap_or(target);
    let body = processor.strip_prefix("gfx").unwrap_or(processor);
    match body.strip_suffix("-generic") {
        Some(generic) => {
            let mut parts = generic.split('-');
            let major = parts.next().and_then(|m| m.parse().ok()).unwrap_or(u32::MAX);
            let minor: u32 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
            (major, 1, format!("{minor:02x}~"))
        }
        None => {
            let split = if body.len() > 3 { 2 } else { 1 };
            let major = body.get(..split).and_then(|m| m.parse().ok()).unwrap_or(u32::MAX);
            (major, 0, body.get(split..).unwrap_or_default().to_string())
        }
    }
}

fn sort_targets(targets: &mut [String]) {
    targets.sort_by_key(|t| target_order(t));
}

/// The resources of every kernel file: `file stem -> code objects`.
pub type Resources = BTreeMap<String, Vec<CodeObject>>;

/// Reads every `<stem>.hsaco` of `stems` in `dir`.
pub fn read_all(dir: &Path, stems: &[String]) -> Result<Resources> {
    let mut out = Resources::new();
    for stem in stems {
        let path = dir.join(format!("{stem}.hsaco"));
        let data = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let objects = read_bundle(&data).map_err(|e| format!("{}: {e}", path.display()))?;
        out.insert(stem.clone(), objects);
    }
    Ok(out)
}

/// (file, entry, target) of every entry that spills, with its (SGPR, VGPR) spill counts.
pub type Spills = BTreeMap<(String, String, String), (u64, u64)>;

pub fn spills(resources: &Resources) -> Spills {
    let mut out = Spills::new();
    for (file, objects) in resources {
        for object in objects {
            for e in object.entries.iter().filter(|e| e.spills()) {
                out.insert(
                    (file.clone(), e.name.clone(), object.target.clone()),
                    (e.sgpr_spills, e.vgpr_spills),
                );
            }
        }
    }
    out
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn wave_list(waves: &BTreeSet<u64>) -> String {
    waves.iter().map(|w| w.to_string()).collect::<Vec<_>>().join("/")
}

const SPILL_HEADING: &str = "## Entries that spill or use scratch";

/// The table as Markdown, in a deterministic order. `toolchain` names the compiler it came from.
pub fn render(resources: &Resources, toolchain: &str) -> String {
    let mut targets: Vec<String> = resources.values().flatten().map(|o| o.target.clone()).collect();
    sort_targets(&mut targets);
    targets.dedup();
    let objects_of = |target: &str| -> Vec<&CodeObject> {
        resources.values().flatten().filter(|o| o.target == target).collect()
    };

    let mut md = String::new();
    md.push_str("# AMD kernel resources\n\n");
    md.push_str(
        "Written by `cargo xtask kernels` (AMD, with the toolchain of `cargo xtask amd-toolchain` and the\n\
         default targets) from the AMDGPU metadata of each code object in `target/kernels/amd/*.hsaco`.\n\
         Do not edit by hand. The build fails when an entry spills registers on a target where this\n\
         table lists no spill for it; to accept a spill, run the build with `ROCMFORGE_ACCEPT_SPILLS=1`\n\
         and commit the table.\n\n",
    );
    let _ = writeln!(md, "Toolchain: {toolchain}.\n");
    md.push_str(
        "Registers are counts per lane as the metadata records them. VGPR on CDNA (gfx90a, gfx942,\n\
         gfx950) is the unified count, accumulation registers included; AGPR is those accumulation\n\
         registers (CDNA only). SGPR spills usually go to VGPR lanes, VGPR spills to scratch memory.\n\
         LDS is static shared memory per workgroup, scratch private memory per lane, both in bytes.\n\n",
    );
    md.push_str(
        "Code object is the AMDHSA code object version of each target's code, which the HIP runtime\n\
         that loads it must know: HIP 5.0 and later load v4 and v5, HIP 6.4 and later v6 too (the\n\
         only version with generic targets). The build makes processor-specific targets v5 and\n\
         generic ones v6, in one bundle per kernel file.\n\n",
    );

    md.push_str("## Targets\n\n");
    md.push_str("| target | code object | wavefront | entries | entries spilling | max SGPR | max VGPR | max AGPR | max LDS | max scratch |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for target in &targets {
        let objects = objects_of(target);
        let entries: Vec<&Entry> = objects.iter().flat_map(|o| &o.entries).collect();
        let versions: BTreeSet<u32> = objects.iter().map(|o| o.version).collect();
        let versions: Vec<String> = versions.iter().map(|v| format!("v{v}")).collect();
        let waves: BTreeSet<u64> = entries.iter().map(|e| e.wavefront).collect();
        let max = |f: fn(&Entry) -> u64| entries.iter().map(|e| f(e)).max().unwrap_or(0);
        let max_agpr = entries.iter().filter_map(|e| e.agprs).max();
        let _ = writeln!(
            md,
            "| {target} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            versions.join(", "),
            wave_list(&waves),
            entries.len(),
            entries.iter().filter(|e| e.spills()).count(),
            max(|e| e.sgprs),
            max(|e| e.vgprs),
            opt(max_agpr),
            max(|e| e.lds),
            max(|e| e.scratch),
        );
    }

    md.push_str("\n## Per kernel file and target\n\n");
    md.push_str("Maxima over the file's entries.\n\n");
    md.push_str("| file | target | entries | wavefront | SGPR | VGPR | AGPR | spilling | LDS | scratch |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for (file, objects) in resources {
        let mut objects: Vec<&CodeObject> = objects.iter().collect();
        objects.sort_by_key(|o| target_order(&o.target));
        for o in objects {
            let e = &o.entries;
            let max = |f: fn(&Entry) -> u64| e.iter().map(f).max().unwrap_or(0);
            let waves: BTreeSet<u64> = e.iter().map(|e| e.wavefront).collect();
            let _ = writeln!(
                md,
                "| {file} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                o.target,
                e.len(),
                wave_list(&waves),
                max(|e| e.sgprs),
                max(|e| e.vgprs),
                opt(e.iter().filter_map(|e| e.agprs).max()),
                e.iter().filter(|e| e.spills()).count(),
                max(|e| e.lds),
                max(|e| e.scratch),
            );
        }
    }

    let _ = writeln!(md, "\n{SPILL_HEADING}\n");
    md.push_str(
        "Every entry with a register spill or a private (scratch) segment, per target; an entry and\n\
         target not listed here spill nothing.\n\n",
    );
    md.push_str("| file | entry | target | SGPR | VGPR | AGPR | SGPR spill | VGPR spill | LDS | scratch |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    let mut rows = 0;
    for (file, objects) in resources {
        let mut names: Vec<&str> = objects.iter().flat_map(|o| &o.entries).map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let mut per_target: Vec<(&str, &Entry)> = objects
                .iter()
                .filter_map(|o| o.entries.iter().find(|e| e.name == name).map(|e| (o.target.as_str(), e)))
                .filter(|(_, e)| e.spills() || e.scratch > 0 || e.dynamic_stack)
                .collect();
            per_target.sort_by_key(|(t, _)| target_order(t));
            for (target, e) in per_target {
                rows += 1;
                let _ = writeln!(
                    md,
                    "| {file} | {name} | {target} | {} | {} | {} | {} | {} | {} | {}{} |",
                    e.sgprs,
                    e.vgprs,
                    opt(e.agprs),
                    e.sgpr_spills,
                    e.vgpr_spills,
                    e.lds,
                    e.scratch,
                    if e.dynamic_stack { " (dynamic stack)" } else { "" },
                );
            }
        }
    }
    if rows == 0 {
        md.push_str("| (none) | | | | | | | | | |\n");
    }
    md
}

/// The spills a table records: the rows of its spill section.
pub fn parse_table_spills(md: &str) -> Spills {
    let mut out = Spills::new();
    let Some((_, section)) = md.split_once(SPILL_HEADING) else { return out };
    let section = section.split("\n## ").next().unwrap_or_default();
    for line in section.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 10 {
            continue;
        }
        let (Ok(sgpr), Ok(vgpr)) = (cells[6].parse::<u64>(), cells[7].parse::<u64>()) else { continue };
        if sgpr > 0 || vgpr > 0 {
            out.insert((cells[0].to_string(), cells[1].to_string(), cells[2].to_string()), (sgpr, vgpr));
        }
    }
    out
}

/// The targets a table covers: the first cells of its targets section.
pub fn parse_table_targets(md: &str) -> BTreeSet<String> {
    let Some((_, section)) = md.split_once("## Targets") else { return BTreeSet::new() };
    let section = section.split("\n## ").next().unwrap_or_default();
    section
        .lines()
        .filter_map(|l| l.trim().strip_prefix('|')?.split('|').next().map(str::trim))
        .filter(|cell| cell.starts_with("gfx"))
        .map(str::to_string)
        .collect()
}

/// Entries spilling now where `committed` records no spill for them (new entries and targets
/// included).
pub fn new_spills(now: &Spills, committed: &Spills) -> Vec<String> {
    now.iter()
        .filter(|(key, _)| !committed.contains_key(*key))
        .map(|((file, name, target), (s, v))| {
            format!("{file}: {name} on {target}: {s} SGPR, {v} VGPR spills")
        })
        .collect()
}

/// One line per target: its wavefront size(s) and code object version, for the build log.
pub fn target_summary(resources: &Resources) -> Vec<String> {
    let mut targets: Vec<String> = resources.values().flatten().map(|o| o.target.clone()).collect();
    sort_targets(&mut targets);
    targets.dedup();
    targets
        .iter()
        .map(|t| {
            let objects: Vec<&CodeObject> = resources.values().flatten().filter(|o| &o.target == t).collect();
            let waves: BTreeSet<u64> = objects.iter().flat_map(|o| &o.entries).map(|e| e.wavefront).collect();
            let versions: BTreeSet<u32> = objects.iter().map(|o| o.version).collect();
            let entries: usize = objects.iter().map(|o| o.entries.len()).sum();
            let spilling = objects.iter().flat_map(|o| &o.entries).filter(|e| e.spills()).count();
            format!(
                "{t:<16} wave{:<5} code object {:<3} {entries} entries, {spilling} spilling",
                wave_list(&waves),
                versions.iter().map(|v| format!("v{v}")).collect::<Vec<_>>().join(","),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MessagePack encoder for the tests' fixtures (maps of strings and small numbers).
    enum Mp<'a> {
        S(&'a str),
        U(u64),
        B(bool),
        A(Vec<Mp<'a>>),
        M(Vec<(&'a str, Mp<'a>)>),
    }

    fn encode(v: &Mp, out: &mut Vec<u8>) {
        match v {
            Mp::S(s) => {
                out.push(0xd9);
                out.push(s.len() as u8);
                out.extend_from_slice(s.as_bytes());
            }
            Mp::U(n) if *n < 128 => out.push(*n as u8),
            Mp::U(n) => {
                out.push(0xcd);
                out.extend_from_slice(&(*n as u16).to_be_bytes());
            }
            Mp::B(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Mp::A(items) => {
                out.push(0x90 | items.len() as u8);
                items.iter().for_each(|i| encode(i, out));
            }
            Mp::M(pairs) => {
                out.push(0xde);
                out.extend_from_slice(&(pairs.len() as u16).to_be_bytes());
                for (k, v) in pairs {
                    encode(&Mp::S(k), out);
                    encode(v, out);
                }
            }
        }
    }

    fn kernel(name: &str, vgprs: u64, vgpr_spills: u64) -> Mp<'_> {
        Mp::M(vec![
            (".name", Mp::S(name)),
            (".wavefront_size", Mp::U(32)),
            (".sgpr_count", Mp::U(18)),
            (".vgpr_count", Mp::U(vgprs)),
            (".sgpr_spill_count", Mp::U(0)),
            (".vgpr_spill_count", Mp::U(vgpr_spills)),
            (".group_segment_fixed_size", Mp::U(4096)),
            (".private_segment_fixed_size", Mp::U(if vgpr_spills > 0 { 64 } else { 0 })),
            (".uses_dynamic_stack", Mp::B(false)),
            (".args", Mp::A(vec![])),
        ])
    }

    /// A minimal AMDGPU ELF: header, one SHT_NOTE section holding the metadata note.
    fn elf(version_byte: u8, metadata: &[u8]) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend_from_slice(&7u32.to_le_bytes());
        note.extend_from_slice(&(metadata.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_AMDGPU_METADATA.to_le_bytes());
        note.extend_from_slice(b"AMDGPU\0\0");
        note.extend_from_slice(metadata);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let mut out = vec![0u8; 64];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = 2;
        out[5] = 1;
        out[7] = ELFOSABI_AMDGPU_HSA;
        out[8] = version_byte;
        let note_at = out.len() as u64;
        out.extend_from_slice(&note);
        let shoff = out.len() as u64;
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&[0u8; 64]); // the null section
        let mut sh = [0u8; 64];
        sh[4..8].copy_from_slice(&SHT_NOTE.to_le_bytes());
        sh[0x18..0x20].copy_from_slice(&note_at.to_le_bytes());
        sh[0x20..0x28].copy_from_slice(&(note.len() as u64).to_le_bytes());
        out.extend_from_slice(&sh);
        out
    }

    fn bundle(entries: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut header = BUNDLE_MAGIC.to_vec();
        header.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        let header_len = header.len() + entries.iter().map(|(id, _)| 24 + id.len()).sum::<usize>();
        let mut offset = header_len as u64;
        let mut body = Vec::new();
        for (id, bytes) in entries {
            header.extend_from_slice(&offset.to_le_bytes());
            header.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            header.extend_from_slice(&(id.len() as u64).to_le_bytes());
            header.extend_from_slice(id.as_bytes());
            body.extend_from_slice(bytes);
            offset += bytes.len() as u64;
        }
        header.extend_from_slice(&body);
        header
    }

    fn object(target: &str, kernels: Vec<Mp>) -> Vec<u8> {
        let doc = Mp::M(vec![("amdhsa.kernels", Mp::A(kernels)), ("amdhsa.target", Mp::S(target))]);
        let mut bytes = Vec::new();
        encode(&doc, &mut bytes);
        elf(4, &bytes)
    }

    fn sample() -> Vec<u8> {
        bundle(&[
            ("host-x86_64-unknown-linux-gnu-", Vec::new()),
            (
                "hipv4-amdgcn-amd-amdhsa--gfx1100",
                object("gfx1100", vec![kernel("rf_b", 40, 0), kernel("rf_a", 256, 12)]),
            ),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", object("gfx90a", vec![kernel("rf_a", 128, 0)])),
        ])
    }

    #[test]
    fn reads_a_bundle() {
        let objects = read_bundle(&sample()).unwrap();
        assert_eq!(objects.len(), 2, "the host entry is skipped");
        assert_eq!(objects[0].target, "gfx1100");
        assert_eq!(objects[0].version, 6);
        let names: Vec<&str> = objects[0].entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["rf_a", "rf_b"], "entries sorted by name");
        let a = &objects[0].entries[0];
        assert_eq!((a.wavefront, a.sgprs, a.vgprs, a.agprs), (32, 18, 256, None));
        assert_eq!((a.vgpr_spills, a.lds, a.scratch), (12, 4096, 64));
    }

    #[test]
    fn rejects_what_is_not_a_bundle() {
        assert!(read_bundle(b"\x7fELF").is_err());
        assert!(read_bundle(b"CCOB....").unwrap_err().to_string().contains("compressed"));
        let mut truncated = sample();
        truncated.truncate(100);
        assert!(read_bundle(&truncated).is_err());
    }

    #[test]
    fn messagepack_numbers() {
        assert_eq!(decode(&[0xcc, 0xff]).unwrap(), Value::Int(255));
        assert_eq!(decode(&[0xd0, 0xfe]).unwrap(), Value::Int(-2));
        assert_eq!(decode(&[0xd1, 0x80, 0x00]).unwrap(), Value::Int(-32768));
        assert_eq!(decode(&[0xcf, 0, 0, 0, 1, 0, 0, 0, 0]).unwrap(), Value::Int(1 << 32));
        assert_eq!(decode(&[0xff]).unwrap(), Value::Int(-1));
        assert_eq!(decode(&[0xa2, b'h', b'i']).unwrap(), Value::Str("hi".into()));
        assert_eq!(decode(&[0x92, 0xc0, 0xc3]).unwrap(), Value::Array(vec![Value::Nil, Value::Bool(true)]));
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[0xdc, 0xff]).is_err());
    }

    #[test]
    fn target_order_is_cdna_then_rdna_generics_last() {
        let mut targets: Vec<String> = [
            "gfx11-generic",
            "gfx1201",
            "gfx90a",
            "gfx1030",
            "gfx950",
            "gfx10-3-generic",
            "gfx1151",
            "gfx942",
            "gfx1100",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        sort_targets(&mut targets);
        assert_eq!(
            targets,
            [
                "gfx90a",
                "gfx942",
                "gfx950",
                "gfx1030",
                "gfx10-3-generic",
                "gfx1100",
                "gfx1151",
                "gfx11-generic",
                "gfx1201"
            ]
        );
    }

    #[test]
    fn table_round_trips_its_spills_and_flags_new_ones() {
        let mut resources = Resources::new();
        resources.insert("k".into(), read_bundle(&sample()).unwrap());
        let md = render(&resources, "test");
        assert_eq!(md, render(&resources, "test"), "deterministic");
        let targets: Vec<String> = parse_table_targets(&md).into_iter().collect();
        assert_eq!(targets, ["gfx1100", "gfx90a"]);
        let now = spills(&resources);
        assert_eq!(parse_table_spills(&md), now);
        assert_eq!(now.len(), 1);
        assert!(new_spills(&now, &now).is_empty());
        let flagged = new_spills(&now, &Spills::new());
        assert_eq!(flagged, ["k: rf_a on gfx1100: 0 SGPR, 12 VGPR spills"]);
        // A table whose spill section is empty records no spill.
        let clean = render(&Resources::new(), "test");
        assert!(parse_table_spills(&clean).is_empty());
    }
}
