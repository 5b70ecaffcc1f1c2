//! `gguf`: look inside GGUF files.
//!
//! ```text
//! gguf inspect FILE                 metadata and the tensor table
//! gguf dump FILE TENSOR -o OUT.npy  one tensor decoded to f32, as a NumPy array
//! gguf tokenize FILE TEXT [--special]  TEXT's token ids in the file's own vocabulary
//! ```
//!
//! Three subcommands and two flags: a hand-written parser is shorter than the dependency.
//!
//! `dump` decodes and writes a bounded number of blocks at a time, so a tensor of any size
//! takes a few MiB of memory; before writing it checks that the output fits the free space of
//! its file system, and refuses with the sizes when it does not.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rocm_model::model::{Encode, Tokenizer};
use rocm_model::npy::{npy_f32_len, write_f32_data, write_npy_f32_header};
use rocm_model::{GgufError, GgufFile};
use rocm_runtime::Bytes;

const USAGE: &str = "usage:
  gguf inspect FILE                 print the metadata and the tensor table
  gguf dump FILE TENSOR -o OUT.npy  write TENSOR decoded to f32 as a NumPy .npy file
                                    (shape: the GGUF dims reversed, row-major)
  gguf tokenize FILE TEXT [--special]
                                    print TEXT's token ids in FILE's vocabulary, one line;
                                    --special: the beginning-of-sequence token as FILE asks,
                                    and control tokens written in TEXT (<|eot_id|>) parsed";

enum Command {
    Inspect { file: PathBuf },
    Dump { file: PathBuf, tensor: String, out: PathBuf },
    Tokenize { file: PathBuf, text: String, special: bool },
    Help,
}

/// Parses the arguments after the program name.
fn parse_args(args: &[String]) -> Result<Command, String> {
    let mut positional = Vec::new();
    let mut out = None;
    let mut special = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-o" | "--output" => {
                let path = it.next().ok_or_else(|| format!("{arg} needs a file name"))?;
                if out.replace(PathBuf::from(path)).is_some() {
                    return Err(format!("{arg} given twice"));
                }
            }
            "--special" => special = true,
            "--" => positional.extend(it.by_ref().cloned()),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option `{s}`")),
            _ => positional.push(arg.clone()),
        }
    }
    if special && positional.first().is_some_and(|c| c != "tokenize") {
        return Err("--special goes with tokenize".into());
    }
    match positional.as_slice() {
        [cmd, file] if cmd == "inspect" => {
            if out.is_some() {
                return Err("inspect takes no -o".into());
            }
            Ok(Command::Inspect { file: file.into() })
        }
        [cmd, file, tensor] if cmd == "dump" => {
            let out = out.ok_or("dump needs -o OUT.npy")?;
            Ok(Command::Dump { file: file.into(), tensor: tensor.clone(), out })
        }
        [cmd, file, text] if cmd == "tokenize" => {
            if out.is_some() {
                return Err("tokenize takes no -o".into());
            }
            Ok(Command::Tokenize { file: file.into(), text: text.clone(), special })
        }
        [cmd, ..] if cmd == "inspect" => Err("inspect takes one FILE".into()),
        [cmd, ..] if cmd == "tokenize" => Err("tokenize takes FILE TEXT (one argument: quote it)".into()),
        [cmd, ..] if cmd == "dump" => Err("dump takes FILE TENSOR -o OUT.npy".into()),
        [cmd, ..] => Err(format!("unknown command `{cmd}`")),
        [] => Err("no command given".into()),
    }
}

fn open(path: &Path) -> Result<GgufFile, String> {
    GgufFile::open(path).map_err(|e| match e {
        // These already name the path.
        GgufError::Io { .. } | GgufError::NotAFile { .. } => e.to_string(),
        _ => format!("{}: {e}", path.display()),
    })
}

fn inspect(path: &Path) -> Result<(), String> {
    let file = open(path)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    print_inspect(&file, path, &mut out).map_err(|e| format!("writing to stdout: {e}"))
}

fn print_inspect(file: &GgufFile, path: &Path, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{}", path.display())?;
    writeln!(
        out,
        "GGUF version {}, {} bytes, alignment {}, data section at byte {}",
        file.version(),
        file.len(),
        file.alignment(),
        file.data_offset()
    )?;
    let metadata = file.metadata();
    writeln!(out, "\nmetadata: {} entries", metadata.len())?;
    let key_width = metadata.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (key, value) in metadata.iter() {
        let ty = value.value_type().name();
        writeln!(out, "  {key:key_width$}  {ty:7}  {}", value.preview(8, 80))?;
    }
    let tensors = file.tensors();
    writeln!(out, "\ntensors: {} ({} bytes)", tensors.len(), file.tensor_bytes_total())?;
    let shapes: Vec<String> = tensors
        .iter()
        .map(|t| format!("[{}]", t.dims().iter().map(u64::to_string).collect::<Vec<_>>().join(", ")))
        .collect();
    let name_w = tensors.iter().map(|t| t.name().len()).max().unwrap_or(0).max(4);
    let shape_w = shapes.iter().map(String::len).max().unwrap_or(0).max(5);
    writeln!(
        out,
        "  {:name_w$}  {:7}  {:shape_w$}  {:>12}  {:>12}",
        "name", "type", "shape", "offset", "bytes"
    )?;
    for (t, shape) in tensors.iter().zip(&shapes) {
        writeln!(
            out,
            "  {:name_w$}  {:7}  {shape:shape_w$}  {:>12}  {:>12}",
            t.name(),
            t.ggml_type().name(),
            t.data_offset(),
            t.n_bytes()
        )?;
    }
    let counts: Vec<String> = file.type_counts().iter().map(|(t, n)| format!("{t}: {n}")).collect();
    if !counts.is_empty() {
        writeln!(out, "\ntypes: {}", counts.join(", "))?;
    }
    writeln!(
        out,
        "shapes are in GGUF order (ne[0], the row length, first); offsets are from the data section"
    )?;
    Ok(())
}

fn tokenize(path: &Path, text: &str, special: bool) -> Result<(), String> {
    let file = open(path)?;
    let in_file = |e: rocm_model::model::ModelError| format!("{}: {e}", path.display());
    let tokenizer = Tokenizer::from_file(&file)
        .map_err(in_file)?
        .ok_or_else(|| format!("{}: no vocabulary (tokenizer.ggml.tokens)", path.display()))?;
    let how = if special { Encode::PROMPT } else { Encode::TEXT };
    let ids = tokenizer.encode(text, how).map_err(in_file)?;
    let line: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("{}", line.join(" "));
    Ok(())
}

/// Values decoded and written at a time by `dump`: 4 MiB of f32, whatever the tensor's size.
const DUMP_CHUNK_ELEMENTS: usize = 1 << 20;

fn dump(path: &Path, tensor: &str, out_path: &Path) -> Result<(), String> {
    let file = open(path)?;
    let in_file = |e: GgufError| format!("{}: {e}", path.display());
    // Refused before the output is touched.
    let info = file.decodable_tensor(tensor).map_err(in_file)?;
    let shape = info.row_major_shape();
    let what = format!("tensor `{tensor}` ({}, {} elements)", info.ggml_type(), info.n_elements());
    let total = npy_f32_len(&shape).ok_or_else(|| format!("{what} as f32 takes more than 2^64 bytes"))?;
    if let Some(free) = free_bytes_for(out_path)
        && total > free
    {
        return Err(format!(
            "{}: {what} takes {} as f32, more than the {} free there",
            out_path.display(),
            Bytes(total),
            Bytes(free)
        ));
    }
    let io = |e: std::io::Error| format!("{}: {e}", out_path.display());
    let mut out = BufWriter::new(std::fs::File::create(out_path).map_err(io)?);
    // Bytes handed to the writer so far, for the message if writing fails.
    let mut written = 0u64;
    let result = write_npy_f32_header(&mut out, &shape)
        .map_err(DumpError::Io)
        .and_then(|()| {
            written = total - 4 * info.n_elements(); // the header: `total` is it and the data
            file.to_f32_chunked(tensor, DUMP_CHUNK_ELEMENTS, |values| {
                write_f32_data(&mut out, values)?;
                written += 4 * values.len() as u64;
                Ok::<_, DumpError>(())
            })
        })
        .and_then(|()| out.flush().map_err(DumpError::Io));
    if let Err(e) = result {
        drop(out);
        // A partial array is not a smaller dump of the tensor: do not leave one (if it is a
        // file: the output may be a device such as /dev/full).
        let removed =
            std::fs::metadata(out_path).is_ok_and(|m| m.is_file()) && std::fs::remove_file(out_path).is_ok();
        let partial = if removed { "; the partial file was removed" } else { "" };
        return Err(match e {
            DumpError::Io(e) => format!(
                "{}: {e}, after writing {} of the {} that {what} takes as f32{partial}",
                out_path.display(),
                Bytes(written),
                Bytes(total)
            ),
            DumpError::Gguf(e) => format!("{}: {e}{partial}", path.display()),
        });
    }
    eprintln!(
        "wrote {} ({} {} -> f32, shape {shape:?})",
        out_path.display(),
        tensor,
        info.ggml_type().name()
    );
    Ok(())
}

/// Why a dump stopped once its output was created.
enum DumpError {
    Io(std::io::Error),
    Gguf(GgufError),
}

impl From<std::io::Error> for DumpError {
    fn from(e: std::io::Error) -> Self {
        DumpError::Io(e)
    }
}

impl From<GgufError> for DumpError {
    fn from(e: GgufError) -> Self {
        DumpError::Gguf(e)
    }
}

/// Bytes a new file at `path` can take: the space free to this user on its file system, plus
/// the size of the regular file there that creating it would truncate. `None` where that is
/// not known (no statvfs, no such directory: creating the file reports that) or does not apply
/// (the output is a device or a pipe, `/dev/null` say).
fn free_bytes_for(path: &Path) -> Option<u64> {
    let existing = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.len(),
        Ok(_) => return None,
        Err(_) => 0,
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(free_bytes(dir)?.saturating_add(existing))
}

#[cfg(unix)]
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string and `stat` points to writable memory the
    // size of a `statvfs`, which the call fills in when it returns 0.
    if unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `stat`.
    let stat = unsafe { stat.assume_init() };
    // Blocks available to unprivileged users, in units of the fragment size.
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    Some((stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

#[cfg(not(unix))]
fn free_bytes(_: &Path) -> Option<u64> {
    None
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gguf: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Help => {
            println!("{USAGE}");
            Ok(())
        }
        Command::Inspect { file } => inspect(&file),
        Command::Dump { file, tensor, out } => dump(&file, &tensor, &out),
        Command::Tokenize { file, text, special } => tokenize(&file, &text, special),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gguf: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn arguments_parse_or_say_why_not() {
        assert!(matches!(parse_args(&args("inspect a.gguf")), Ok(Command::Inspect { .. })));
        assert!(matches!(parse_args(&args("dump a.gguf t -o x.npy")), Ok(Command::Dump { .. })));
        assert!(matches!(parse_args(&args("dump -o x.npy a.gguf t")), Ok(Command::Dump { .. })));
        assert!(matches!(parse_args(&args("--help")), Ok(Command::Help)));
        assert!(matches!(
            parse_args(&args("tokenize a.gguf hi --special")),
            Ok(Command::Tokenize { special: true, .. })
        ));
        assert!(matches!(
            parse_args(&args("tokenize a.gguf hi")),
            Ok(Command::Tokenize { special: false, .. })
        ));
        for (bad, why) in [
            ("", "no command"),
            ("frobnicate a", "unknown command"),
            ("inspect", "one FILE"),
            ("dump a.gguf t", "needs -o"),
            ("dump a.gguf t -o", "needs a file name"),
            ("inspect a -x", "unknown option"),
            ("dump a t -o x -o y", "twice"),
            ("tokenize a.gguf two words", "quote it"),
            ("tokenize a.gguf", "FILE TEXT"),
            ("tokenize a.gguf hi -o x", "no -o"),
            ("inspect a.gguf --special", "goes with tokenize"),
        ] {
            let err = parse_args(&args(bad)).err().unwrap_or_else(|| panic!("`{bad}` parsed"));
            assert!(err.contains(why), "`{bad}`: {err}");
        }
    }
}
