//! Splits the command line into flag occurrences the way pflag does.

use super::table::{lookup, lookup_short};
use super::{Arity, FlagDef, FlagError, ValueError};

/// One flag as it appeared on the command line.
#[derive(Clone, Debug)]
pub(crate) struct Occurrence {
    pub def: &'static FlagDef,
    pub value: String,
}

impl Occurrence {
    /// The error for this occurrence's value, naming the flag as pflag does.
    pub(crate) fn invalid(&self, reason: ValueError) -> FlagError {
        FlagError::InvalidValue {
            flag: self.def.name,
            value: self.value.clone(),
            reason,
        }
    }
}

/// Splits `args` (without the program name) into flag occurrences, pflag style.
pub(crate) fn tokenize(args: &[String]) -> Result<Vec<Occurrence>, FlagError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            if let Some(extra) = args.get(i) {
                return Err(FlagError::UnknownCommand(extra.clone()));
            }
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            if name.is_empty() || name.starts_with('-') || name.starts_with('=') {
                return Err(FlagError::BadSyntax(arg.clone()));
            }
            let def = lookup(name).ok_or_else(|| FlagError::Unknown(name.to_string()))?;
            let value = match (attached, def.arity) {
                (Some(v), _) => v,
                (None, Arity::Bool) => "true".to_string(),
                (None, Arity::Value) => {
                    let v = args
                        .get(i)
                        .ok_or_else(|| FlagError::MissingValue(name.to_string()))?;
                    i += 1;
                    v.clone()
                }
            };
            out.push(Occurrence { def, value });
        } else if arg.len() > 1 && arg.starts_with('-') {
            let shorts: Vec<char> = arg[1..].chars().collect();
            let mut j = 0;
            while j < shorts.len() {
                let c = shorts[j];
                let def = lookup_short(c).ok_or_else(|| FlagError::UnknownShorthand {
                    short: c,
                    arg: arg.clone(),
                })?;
                let rest: String = shorts[j + 1..].iter().collect();
                if let Some(v) = rest.strip_prefix('=') {
                    out.push(Occurrence {
                        def,
                        value: v.to_string(),
                    });
                    break;
                }
                match def.arity {
                    Arity::Bool => {
                        out.push(Occurrence {
                            def,
                            value: "true".to_string(),
                        });
                        j += 1;
                    }
                    Arity::Value if !rest.is_empty() => {
                        out.push(Occurrence { def, value: rest });
                        break;
                    }
                    Arity::Value => {
                        let v = args
                            .get(i)
                            .ok_or_else(|| FlagError::MissingShorthandValue {
                                short: c,
                                arg: arg.clone(),
                            })?;
                        i += 1;
                        out.push(Occurrence {
                            def,
                            value: v.clone(),
                        });
                        break;
                    }
                }
            }
        } else {
            return Err(FlagError::UnknownCommand(arg.clone()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn toks(list: &[&str]) -> Vec<(String, String)> {
        match tokenize(&args(list)) {
            Ok(v) => v
                .into_iter()
                .map(|o| (o.def.name.to_string(), o.value))
                .collect(),
            Err(e) => panic!("tokenize {list:?}: {e}"),
        }
    }

    #[test]
    fn pflag_forms() {
        assert_eq!(
            toks(&[
                "--port=1",
                "--max-pods",
                "20",
                "--register-node",
                "--fail-swap-on=false"
            ]),
            vec![
                ("port".into(), "1".into()),
                ("max-pods".into(), "20".into()),
                ("register-node".into(), "true".into()),
                ("fail-swap-on".into(), "false".into()),
            ]
        );
        assert_eq!(toks(&["-v=2"]), vec![("v".into(), "2".into())]);
        assert_eq!(toks(&["-v", "3"]), vec![("v".into(), "3".into())]);
        assert_eq!(toks(&["-v4"]), vec![("v".into(), "4".into())]);
        assert_eq!(toks(&["--v=5"]), vec![("v".into(), "5".into())]);
        assert_eq!(
            toks(&["--node_ip=1.2.3.4"]),
            vec![("node-ip".into(), "1.2.3.4".into())]
        );
        assert_eq!(toks(&["-h"]), vec![("help".into(), "true".into())]);
        // A value flag takes the next word even if it looks like a flag.
        assert_eq!(
            toks(&["--cluster-domain", "--x"]),
            vec![("cluster-domain".into(), "--x".into())]
        );
        assert_eq!(
            toks(&["--cluster-domain="]),
            vec![("cluster-domain".into(), "".into())]
        );
    }

    #[test]
    fn tokenize_errors() {
        let err = |l: &[&str]| {
            tokenize(&args(l))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert_eq!(err(&["--bogus-flag=1"]), "unknown flag: --bogus-flag");
        assert_eq!(err(&["-x"]), "unknown shorthand flag: 'x' in -x");
        assert_eq!(
            err(&["-config=/x"]),
            "unknown shorthand flag: 'c' in -config=/x"
        );
        assert_eq!(err(&["--port"]), "flag needs an argument: --port");
        assert_eq!(err(&["-v"]), "flag needs an argument: 'v' in -v");
        // Booleans never consume the next word, so it becomes a stray argument.
        assert_eq!(
            err(&["--register-node", "false"]),
            "unknown command \"false\""
        );
        assert_eq!(err(&["--", "run"]), "unknown command \"run\"");
    }
}
