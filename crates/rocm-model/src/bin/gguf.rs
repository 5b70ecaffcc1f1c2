//! `gguf`: look inside GGUF files.
//!
//! ```text
//! gguf inspect FILE                 metadata and the tensor table
//! gguf dump FILE TENSOR -o OUT.npy  one tensor decoded to f32, as a NumPy array
//! ```
//!
//! Two subcommands and one flag: a hand-written parser is shorter than the dependency.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rocm_model::GgufFile;
use rocm_model::npy::write_npy_f32;

const USAGE: &str = "usage:
  gguf inspect FILE                 print the metadata and the tensor table
  gguf dump FILE TENSOR -o OUT.npy  write TENSOR decoded to f32 as a NumPy .npy file
                                    (shape: the GGUF dims reversed, row-major)";

enum Command {
    Inspect { file: PathBuf },
    Dump { file: PathBuf, tensor: String, out: PathBuf },
    Help,
}

/// Parses the arguments after the program name.
fn parse_args(args: &[String]) -> Result<Command, String> {
    let mut positional = Vec::new();
    let mut out = None;
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
            "--" => positional.extend(it.by_ref().cloned()),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option `{s}`")),
            _ => positional.push(arg.clone()),
        }
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
        [cmd, ..] if cmd == "inspect" => Err("inspect takes one FILE".into()),
        [cmd, ..] if cmd == "dump" => Err("dump takes FILE TENSOR -o OUT.npy".into()),
        [cmd, ..] => Err(format!("unknown command `{cmd}`")),
        [] => Err("no command given".into()),
    }
}

fn open(path: &Path) -> Result<GgufFile, String> {
    GgufFile::open(path).map_err(|e| match e {
        // These already name the path.
        rocm_model::GgufError::Io { .. } | rocm_model::GgufError::NotAFile { .. } => e.to_string(),
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

fn dump(path: &Path, tensor: &str, out_path: &Path) -> Result<(), String> {
    let file = open(path)?;
    let info = file.tensor(tensor).map_err(|e| format!("{}: {e}", path.display()))?;
    let shape = info.row_major_shape();
    let values = file.to_f32(tensor).map_err(|e| format!("{}: {e}", path.display()))?;
    let io = |e: std::io::Error| format!("{}: {e}", out_path.display());
    let mut out = BufWriter::new(std::fs::File::create(out_path).map_err(io)?);
    write_npy_f32(&mut out, &shape, &values).map_err(io)?;
    out.flush().map_err(io)?;
    eprintln!(
        "wrote {} ({} {} -> f32, shape {shape:?})",
        out_path.display(),
        tensor,
        info.ggml_type().name()
    );
    Ok(())
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
        for (bad, why) in [
            ("", "no command"),
            ("frobnicate a", "unknown command"),
            ("inspect", "one FILE"),
            ("dump a.gguf t", "needs -o"),
            ("dump a.gguf t -o", "needs a file name"),
            ("inspect a -x", "unknown option"),
            ("dump a t -o x -o y", "twice"),
        ] {
            let err = parse_args(&args(bad)).err().unwrap_or_else(|| panic!("`{bad}` parsed"));
            assert!(err.contains(why), "`{bad}`: {err}");
        }
    }
}
