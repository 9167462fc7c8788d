//! What the MPI programs share with each other and with the DSM apps: bands, the matrices'
//! values, the result line.

/// The DSM apps' kernels, from their own source.
#[path = "../../../apps/src/kernels.rs"]
pub mod kernels;

/// Rows `[start, end)` of `n` that rank `me` of `ranks` owns (the DSM apps' `band`).
pub fn band(n: usize, me: usize, ranks: usize) -> (usize, usize) {
    (n * me / ranks, n * (me + 1) / ranks)
}

/// The command line: `--no-check` and positional numbers with defaults.
pub struct Args {
    /// Check the result (not with `--no-check`).
    pub check: bool,
    /// The positional arguments.
    pub positional: Vec<String>,
}

impl Args {
    /// Reads the process's arguments; exits with status 2 on `--help` or an unknown option.
    pub fn read(usage: &str) -> Args {
        let mut check = true;
        let mut positional = Vec::new();
        for a in std::env::args().skip(1) {
            match a.as_str() {
                "--no-check" => check = false,
                "-h" | "--help" => {
                    println!("{usage}");
                    std::process::exit(0)
                }
                _ if a.starts_with('-') => {
                    eprintln!("unknown option {a}\n{usage}");
                    std::process::exit(2)
                }
                _ => positional.push(a),
            }
        }
        Args { check, positional }
    }

    /// Positional argument `i` as a number, or `default`.
    pub fn num(&self, i: usize, default: usize) -> usize {
        self.positional.get(i).map_or(default, |v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("argument {} must be a number, got {v}", i + 1);
                std::process::exit(2)
            })
        })
    }
}

/// The word of the result line: OK, FAILED, or UNCHECKED.
pub fn verdict(check: bool, ok: bool) -> &'static str {
    match (check, ok) {
        (false, _) => "UNCHECKED",
        (true, true) => "OK",
        (true, false) => "FAILED",
    }
}
